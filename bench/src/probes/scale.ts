/**
 * @module bench/probes/scale
 * How processing scales with what a deployment can set: worker processes on one store, slots per
 * process, and how long a handler waits (a provider's answer, `--handler-ms`, a timer). For each
 * combination of the lists given, a fresh store gets a backlog of `--ops` operations (spread over
 * tenants of at most 5,000 each: one tenant may hold 10,000 waiting), then `--processes` worker
 * processes, each `sluice.worker({ defaultSlots })` and nothing else set, drain it together,
 * timed from the moment all of them are told to start until the last operation has run. It
 * prints operations/s, the workers' Node CPU per operation, and how busy the machine's cores were
 * over the drain (/proc/stat: every process, the database server's included). With `--effect`
 * the handler's wait is one journaled effect (`ctx.effect`) whose call answers after it.
 *
 *   node dist/probes/scale.js [--store pg|sqlite] [--ops 10000] [--processes 1,2] [--slots 32]
 *                             [--handler-ms 0] [--effect] [--rounds 3]
 *
 * Each item of a comma-separated list is a case; the cases take turns round by round.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as wait } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type * as SluiceModule from 'sluice';
import { z } from 'zod';
import { freshSchema, loadSluice, pgOptions, quantile } from './load.js';

const PER_TENANT = 5_000;

/** What a worker process is told to open. */
const childSpec = z.object({
  store: z.enum(['pg', 'sqlite']),
  /** The SQLite file, or the PostgreSQL schema. */
  where: z.string(),
  slots: z.number().int().positive(),
  handlerMs: z.number().nonnegative(),
  effect: z.boolean(),
});
type ChildSpec = z.infer<typeof childSpec>;

type FromChild = { ready: true } | { done: number } | { cpuMicros: number };

const noop = z.object({ i: z.number() });

async function child(spec: ChildSpec): Promise<void> {
  const { sluice: s } = await loadSluice();
  const store =
    spec.store === 'sqlite'
      ? s.sqliteStore({ path: spec.where })
      : s.postgresStore({ ...pgOptions(), schema: spec.where });
  const engine = new s.Sluice({ store });
  engine.define('noop', {
    input: noop,
    run: async (_, ctx) => {
      if (!spec.effect) {
        if (spec.handlerMs > 0) await wait(spec.handlerMs);
        return undefined;
      }
      return ctx.effect<{ id: string }>('charge', {
        call: async ({ key }) => {
          if (spec.handlerMs > 0) await wait(spec.handlerMs);
          return { id: key };
        },
      });
    },
  });
  const worker = engine.worker({ defaultSlots: spec.slots });
  let done = 0;
  let reporting = false;
  worker.on('attempt', (e) => {
    if (e.report.outcome !== 'written' || e.report.end !== 'succeeded') {
      console.error(`operation ${e.tenant}/${e.id}: ${JSON.stringify(e.report)}`);
      process.exit(1);
    }
    done++;
    // One message a turn of the event loop, not one an operation.
    if (!reporting) {
      reporting = true;
      setImmediate(() => {
        reporting = false;
        process.send?.({ done } satisfies FromChild);
      });
    }
  });
  let cpu = process.cpuUsage();
  process.on('message', (m: string) => {
    if (m === 'go') {
      cpu = process.cpuUsage();
      worker.start();
    } else if (m === 'stop') {
      const used = process.cpuUsage(cpu);
      process.send?.({ cpuMicros: used.user + used.system } satisfies FromChild, () => {
        engine.close().then(
          () => process.exit(0),
          () => process.exit(1),
        );
      });
    }
  });
  process.send?.({ ready: true } satisfies FromChild);
}

/** The machine's busy and total CPU time so far, over every core (/proc/stat's first line). */
function machineTicks(): { busy: number; total: number } {
  // user nice system idle iowait irq softirq steal (guest time is already in user)
  const fields = readFileSync('/proc/stat', 'utf8')
    .split('\n', 1)[0]!
    .trim()
    .split(/\s+/)
    .slice(1, 9)
    .map(Number);
  const total = fields.reduce((a, b) => a + b, 0);
  return { busy: total - fields[3]! - fields[4]!, total };
}

interface Outcome {
  rate: number;
  cpu: number;
  busy: number;
}

async function backlog(s: typeof SluiceModule, store: SluiceModule.Store, n: number): Promise<void> {
  const engine = new s.Sluice({ store });
  engine.define('noop', { input: noop, run: async () => {} });
  for (let i = 0; i < n; i += 500)
    await Promise.all(
      Array.from({ length: Math.min(500, n - i) }, (_, k) => {
        const j = i + k;
        return engine.submit({
          tenant: `t${Math.floor(j / PER_TENANT)}`,
          id: `o${j}`,
          kind: 'noop',
          input: { i: j },
        });
      }),
    );
  await engine.close();
}

async function run(
  s: typeof SluiceModule,
  kind: 'pg' | 'sqlite',
  n: number,
  processes: number,
  slots: number,
  handlerMs: number,
  effect: boolean,
): Promise<Outcome> {
  const where =
    kind === 'sqlite' ? join(mkdtempSync(join(tmpdir(), 'scale-')), 'sluice.db') : freshSchema('scale');
  const store =
    kind === 'sqlite' ? s.sqliteStore({ path: where }) : s.postgresStore({ ...pgOptions(), schema: where });
  await store.migrate();
  await backlog(s, store, n);

  const spec: ChildSpec = { store: kind, where, slots, handlerMs, effect };
  const children: ChildProcess[] = [];
  const done: number[] = [];
  const cpus: number[] = [];
  let finished!: () => void;
  const all = new Promise<void>((resolve) => {
    finished = resolve;
  });
  // A worker process that dies fails the run, whenever it dies.
  let died!: (e: Error) => void;
  const failed = new Promise<never>((_, reject) => {
    died = reject;
  });
  failed.catch(() => {});
  let ended = 0;
  const readies: Promise<void>[] = [];
  for (let c = 0; c < processes; c++) {
    const ch = fork(fileURLToPath(import.meta.url), ['--child', JSON.stringify(spec)], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    children.push(ch);
    done.push(0);
    readies.push(
      new Promise<void>((resolve) => {
        ch.on('exit', (code) => {
          if (code !== 0) died(new Error(`worker process ${c} exited with ${code}`));
        });
        ch.on('message', (m: FromChild) => {
          if ('ready' in m) resolve();
          else if ('done' in m) {
            done[c] = m.done;
            if (done.reduce((a, b) => a + b, 0) >= n && ended === 0) {
              ended = performance.now();
              finished();
            }
          } else cpus[c] = m.cpuMicros;
        });
      }),
    );
  }
  await Promise.race([Promise.all(readies), failed]);
  const ticks = machineTicks();
  const started = performance.now();
  for (const ch of children) ch.send('go');
  await Promise.race([all, failed]);
  const after = machineTicks();
  const exits = children.map((ch) => new Promise((resolve) => ch.once('exit', resolve)));
  for (const ch of children) ch.send('stop');
  await Promise.race([Promise.all(exits), failed]);
  await store.close();
  const total = done.reduce((a, b) => a + b, 0);
  if (total !== n) throw new Error(`${total} operations ran, ${n} were submitted`);
  return {
    rate: n / ((ended - started) / 1000),
    cpu: cpus.reduce((a, b) => a + b, 0) / n,
    busy: (after.busy - ticks.busy) / (after.total - ticks.total),
  };
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      store: { type: 'string', default: 'pg' },
      ops: { type: 'string', default: '10000' },
      processes: { type: 'string', default: '1,2' },
      slots: { type: 'string', default: '32' },
      'handler-ms': { type: 'string', default: '0' },
      effect: { type: 'boolean', default: false },
      rounds: { type: 'string', default: '3' },
    },
  });
  const kind = z.enum(['pg', 'sqlite']).parse(values.store);
  const n = z.coerce.number().int().positive().parse(values.ops);
  const list = (v: string) => v.split(',').map((x) => z.coerce.number().nonnegative().parse(x));
  const cases = list(values.processes).flatMap((p) =>
    list(values.slots).flatMap((sl) => list(values['handler-ms']).map((h) => ({ p, sl, h }))),
  );
  const { sluice: s } = await loadSluice();
  const results = cases.map((): Outcome[] => []);
  for (let r = 0; r < Number(values.rounds); r++) {
    const order = [...cases.keys()];
    if (r % 2 === 1) order.reverse();
    for (const i of order) {
      const c = cases[i]!;
      results[i]!.push(await run(s, kind, n, c.p, c.sl, c.h, values.effect));
    }
  }
  for (const [i, c] of cases.entries()) {
    const rs = results[i]!;
    const med = (get: (o: Outcome) => number) => quantile(rs.map(get), 0.5);
    console.log(
      `${kind} processes=${c.p} slots=${c.sl} handler=${c.h}ms${values.effect ? ' (one effect)' : ''}: ${Math.round(med((o) => o.rate))} ops/s ` +
        `(${rs.map((o) => Math.round(o.rate)).join(', ')}), workers' Node CPU ${Math.round(med((o) => o.cpu))} µs/op, ` +
        `cores busy ${Math.round(100 * med((o) => o.busy))}%`,
    );
  }
}

const at = process.argv.indexOf('--child');
if (at >= 0) await child(childSpec.parse(JSON.parse(process.argv[at + 1]!)));
else await main();
