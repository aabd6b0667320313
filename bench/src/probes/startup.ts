/**
 * @module bench/probes/startup
 * How soon a new worker process runs its first operation: what a worker restarted after a crash
 * (or a scaled-out one) waits before it does any work. Each round spawns, per build, a process
 * that imports the package, opens the store, starts a worker and reports the moment its handler is
 * first called, with one operation queued for it; and a bare `node` that only reports its own
 * start (the floor, measured in the same round). Times are from the process's own start
 * (`performance.now()` in the child). Prints the medians per build, and the ratio round by round
 * with `--against` (another commit's built `dist/index.js`).
 *
 *   node dist/probes/startup.js [--store sqlite|pg] [--rounds 15] [--against ../other/dist/index.js]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { freshSchema, pgOptions, quantile, type Sluice } from './load.js';

const { values } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    rounds: { type: 'string', default: '15' },
    against: { type: 'string' },
  },
});
const rounds = Number(values.rounds);
const kind = values.store === 'pg' ? 'pg' : 'sqlite';

/** The builds by entry URL: this bench's `sluice` (or `SLUICE`), and `--against`. */
const entries = [process.env.SLUICE ? pathToFileURL(process.env.SLUICE).href : import.meta.resolve('sluice')];
if (values.against) entries.push(pathToFileURL(values.against).href);

/** A minimal Standard Schema, so the child loads nothing but the package. */
const CHILD = `
const boot = performance.now();
const m = await import(process.env.ENTRY);
const imported = performance.now();
const store = process.env.KIND === 'sqlite'
  ? m.sqliteStore({ path: process.env.DB })
  : m.postgresStore({ connectionString: process.env.DB, schema: process.env.SCHEMA, poolSize: 2 });
const engine = new m.Sluice({ store });
const any = { '~standard': { version: 1, vendor: 'probe', validate: (value) => ({ value }) } };
engine.define('probe.noop', {
  input: any,
  run() {
    console.log(JSON.stringify({ boot, imported, firstRun: performance.now() }));
    process.exit(0);
  },
});
engine.worker({ pollIntervalMs: 50 }).start();`;

interface Times {
  boot: number;
  imported: number;
  firstRun: number;
}

const sluice = (await import(entries[0]!)) as Sluice;
const db = kind === 'sqlite' ? join(mkdtempSync(join(tmpdir(), 'sluice-startup-')), 'sluice.db') : undefined;
const schema = freshSchema('startup');
const store =
  kind === 'sqlite' ? sluice.sqliteStore({ path: db! }) : sluice.postgresStore({ ...pgOptions(), schema });
const engine = new sluice.Sluice({ store });
engine.define('probe.noop', {
  input: { '~standard': { version: 1, vendor: 'probe', validate: (value: unknown) => ({ value }) } },
  run: () => undefined,
});
await engine.migrate();

let queued = 0;
function child(entry: string): Times {
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', CHILD], {
    env: {
      ...process.env,
      ENTRY: entry,
      KIND: kind,
      DB: db ?? pgOptions().connectionString,
      SCHEMA: schema,
    },
  });
  return JSON.parse(out.toString().trim().split('\n').at(-1)!) as Times;
}
const bare = (): number =>
  Number(execFileSync(process.execPath, ['-e', 'console.log(performance.now())']).toString());

const byBuild = entries.map((): Times[] => []);
const floor: number[] = [];
for (let r = 0; r < rounds; r++) {
  floor.push(bare());
  const order = [...entries.keys()];
  if (r % 2 === 1) order.reverse();
  for (const i of order) {
    await engine.submit({ tenant: 't', id: `o${queued++}`, kind: 'probe.noop', input: {} });
    byBuild[i]!.push(child(entries[i]!));
  }
}
await engine.close();

const med = (xs: number[]) => quantile(xs, 0.5);
console.log(`startup on ${kind}, ${rounds} rounds; ms from the process's start, medians`);
console.log(`bare node: ${med(floor).toFixed(1)} ms`);
entries.forEach((entry, i) => {
  const t = byBuild[i]!;
  console.log(
    `${entry}: imported ${med(t.map((x) => x.imported)).toFixed(1)} ms, ` +
      `first handler call ${med(t.map((x) => x.firstRun)).toFixed(1)} ms ` +
      `(p10–p90 ${quantile(
        t.map((x) => x.firstRun),
        0.1,
      ).toFixed(1)}–${quantile(
        t.map((x) => x.firstRun),
        0.9,
      ).toFixed(1)})`,
  );
});
if (entries.length === 2) {
  const ratios = byBuild[0]!.map((t, r) => t.firstRun / byBuild[1]![r]!.firstRun);
  console.log(
    `first handler call, this build over --against: median ${med(ratios).toFixed(2)}; ` +
      `round by round ${ratios.map((x) => x.toFixed(2)).join(', ')}`,
  );
}
