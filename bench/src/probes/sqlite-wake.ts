/**
 * @module bench/probes/sqlite-wake
 * Enqueue→start latency across processes on one SQLite file, and what an idle worker's watch
 * costs. This process submits; a worker process on the same file runs the operations and reports
 * when each one's handler starts (wall clock, one machine). Two workers take turns, round by
 * round: the store's default watch (the WAL file's change events, then `PRAGMA data_version`)
 * and `watch: false` (polling alone, `pollIntervalMs` 500 ms, the default). Each round first
 * idles the worker for `--idle-ms` and reads its CPU time over that window, then submits `--ops`
 * operations one at a time, `--gap-ms` apart.
 *
 *   node dist/probes/sqlite-wake.js [--rounds 4] [--ops 40] [--gap-ms 25] [--idle-ms 3000]
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as delay } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { loadSluice, quantile } from './load.js';

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '4' },
    ops: { type: 'string', default: '40' },
    'gap-ms': { type: 'string', default: '25' },
    'idle-ms': { type: 'string', default: '3000' },
  },
});
const rounds = Number(values.rounds);
const ops = Number(values.ops);
const gapMs = Number(values['gap-ms']);
const idleMs = Number(values['idle-ms']);

const { sluice, label } = await loadSluice();
const entry = process.env.SLUICE ? pathToFileURL(process.env.SLUICE).href : import.meta.resolve('sluice');
const path = join(mkdtempSync(join(tmpdir(), 'sluice-wake-')), 'sluice.db');
const any = {
  '~standard': { version: 1 as const, vendor: 'probe', validate: (value: unknown) => ({ value }) },
};
const engine = new sluice.Sluice({ store: sluice.sqliteStore({ path }) });
engine.define('probe.wake', { input: any, run: () => undefined });
await engine.migrate();

/** The worker process: reports `{ id, at }` when a handler starts, `{ cpu }` when asked. */
const CHILD = `
const m = await import(process.env.ENTRY);
const engine = new m.Sluice({ store: m.sqliteStore({ path: process.env.DB, watch: process.env.WATCH !== 'off' }) });
const any = { '~standard': { version: 1, vendor: 'probe', validate: (value) => ({ value }) } };
engine.define('probe.wake', { input: any, run(_input, ctx) {
  console.log(JSON.stringify({ id: ctx.id, at: performance.timeOrigin + performance.now() }));
} });
engine.worker().start();
process.stdin.setEncoding('utf8');
process.stdin.on('data', () => console.log(JSON.stringify({ cpu: process.cpuUsage() })));
console.log(JSON.stringify({ ready: true }));`;

interface Worker {
  child: ChildProcess;
  next(match: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>>;
}

function worker(watch: 'on' | 'off'): Worker {
  const child = spawn(process.execPath, ['--input-type=module', '-e', CHILD], {
    env: {
      ...process.env,
      ENTRY: entry,
      DB: path,
      WATCH: watch,
    },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const waiting: Array<{
    match: (l: Record<string, unknown>) => boolean;
    resolve: (l: Record<string, unknown>) => void;
  }> = [];
  const seen: Record<string, unknown>[] = [];
  createInterface({ input: child.stdout! }).on('line', (text) => {
    const line = JSON.parse(text) as Record<string, unknown>;
    const i = waiting.findIndex((w) => w.match(line));
    if (i >= 0) waiting.splice(i, 1)[0]!.resolve(line);
    else seen.push(line);
  });
  return {
    child,
    next(match) {
      const i = seen.findIndex(match);
      if (i >= 0) return Promise.resolve(seen.splice(i, 1)[0]!);
      return new Promise((resolve) => waiting.push({ match, resolve }));
    },
  };
}

const cpuOf = async (w: Worker): Promise<number> => {
  w.child.stdin!.write('\n');
  const { cpu } = (await w.next((l) => 'cpu' in l)) as { cpu: { user: number; system: number } };
  return cpu.user + cpu.system;
};

const modes = ['on', 'off'] as const;
const latencies = { on: [] as number[], off: [] as number[] };
const idleCpu = { on: [] as number[], off: [] as number[] };
let n = 0;
for (let r = 0; r < rounds; r++) {
  for (const mode of r % 2 === 0 ? modes : [...modes].reverse()) {
    const w = worker(mode);
    await w.next((l) => l.ready === true);
    const before = await cpuOf(w);
    await delay(idleMs); // the window whose CPU is read: the worker has nothing to do
    idleCpu[mode].push((await cpuOf(w)) - before);
    for (let k = 0; k < ops; k++) {
      const id = `o${n++}`;
      const submittedAt = performance.timeOrigin + performance.now();
      await engine.submit({ tenant: 't', id, kind: 'probe.wake', input: {} });
      const { at } = (await w.next((l) => l.id === id)) as { at: number };
      latencies[mode].push(at - submittedAt);
      await delay(gapMs);
    }
    w.child.kill('SIGKILL');
  }
}
await engine.close();

console.log(
  `sqlite-wake (${label}): ${rounds} rounds of ${ops} submits ${gapMs} ms apart, each worker idle ${idleMs} ms first`,
);
for (const mode of modes) {
  const l = latencies[mode];
  console.log(
    `watch ${mode}: enqueue→start p50 ${quantile(l, 0.5).toFixed(2)} ms, p90 ${quantile(l, 0.9).toFixed(2)} ms, ` +
      `p99 ${quantile(l, 0.99).toFixed(2)} ms; idle worker CPU ${(quantile(idleCpu[mode], 0.5) / idleMs / 10).toFixed(3)}% of a core ` +
      `(${(quantile(idleCpu[mode], 0.5) / 1000).toFixed(1)} ms over ${idleMs} ms, median of rounds)`,
  );
}
