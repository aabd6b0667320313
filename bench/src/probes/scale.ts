/**
 * @module bench/probes/scale
 * How processing scales with what a deployment can set: worker processes on one store, slots per
 * process, and how long a handler waits (a provider's answer, `--handler-ms`, a timer). For each
 * combination of the lists given, a fresh store gets a backlog of `--ops` operations (spread over
 * tenants of at most 5,000 each: one tenant may hold 10,000 waiting), then `--processes` worker
 * processes, each `sluice.worker({ defaultSlots })` (its warm-up class aside) and nothing else
 * set, drain it together, timed from the moment all of them are told to start until the last
 * operation has run. Each process first runs `--warm` operations of its own, untimed, with the
 * same handler and store calls: a long-running worker is warm, and a new one's first thousands of
 * operations run slower (docs/operations.md, "Sizing a worker"). It prints operations/s, the
 * workers' Node CPU per operation, and how busy the machine's cores were over the drain
 * (/proc/stat: every process, the database server's included). With `--effect` the handler's
 * wait is one journaled effect (`ctx.effect`) whose call answers after it.
 *
 *   node dist/probes/scale.js [--store pg|sqlite] [--ops 10000] [--processes 1,2] [--slots 32]
 *                             [--handler-ms 0] [--effect] [--warm 10000] [--rounds 3]
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
  /** This process's number, which names its warm-up kind and class. */
  index: z.number().int().nonnegative(),
  /** Operations of its own it runs before it says it is ready. */
  warm: z.number().int().nonnegative(),
});
type ChildSpec = z.infer<typeof childSpec>;

type FromChild = { ready: true } | { done: number } | { cpuMicros: number };

const noop = z.object({ i: z.number() });
const warmKindOf = (index: number) => `warm${index}`;

async function child(spec: ChildSpec): Promise<void> {
  const { sluice: s } = await loadSluice();
  const store =
    spec.store === 'sqlite'
      ? s.sqliteStore({ path: spec.where })
      : s.postgresStore({ ...pgOptions(), schema: spec.where });
  const engine = new s.Sluice({ store });
  const run = async (_: unknown, ctx: SluiceModule.OperationContext) => {
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
  };
  engine.define('noop', { input: noop, run });
  // A long-running worker is warm: the same handler and store calls first run in a class of this
  // process's own, untimed, so that a new process's slower start is not counted as processing.
  const warmKind = warmKindOf(spec.index);
  engine.define(warmKind, { input: noop, class: warmKind, run });
  if (spec.warm > 0) {
    const warmer = engine.worker({ defaultSlots: 0, slots: { [warmKind]: spec.slots } });
    let warmed = 0;
    await new Promise<void>((resolve) => {
      warmer.on('attempt', () => {
        if (++warmed === spec.warm) resolve();
      });
      warmer.start();
    });
    await warmer.stop();
  }
  const worker = engine.worker({ defaultSlots: spec.slots, slots: { [warmKind]: 0 } });
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

/** `n` operations to time, and `warm` of each worker process's own warm-up kind. */
async function backlog(
  s: typeof SluiceModule,
  store: SluiceModule.Store,
  n: number,
  processes: number,
  warm: number,
): Promise<void> {
  const engine = new s.Sluice({ store });
  engine.define('noop', { input: noop, run: async () => {} });
  const items: { tenant: string; id: string; kind: string; input: { i: number } }[] = [];
  for (let c = 0; c < processes; c++) {
    const kind = warmKindOf(c);
    engine.define(kind, { input: noop, class: kind, run: async () => {} });
    for (let j = 0; j < warm; j++) items.push({ tenant: `w${c}`, id: `w${j}`, kind, input: { i: j } });
  }
  for (let j = 0; j < n; j++)
    items.push({ tenant: `t${Math.floor(j / PER_TENANT)}`, id: `o${j}`, kind: 'noop', input: { i: j } });
  for (let i = 0; i < items.length; i += 500)
    await Promise.all(items.slice(i, i + 500).map((item) => engine.submit(item)));
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
  warm: number,
): Promise<Outcome> {
  const where =
    kind === 'sqlite' ? join(mkdtempSync(join(tmpdir(), 'scale-')), 'sluice.db') : freshSchema('scale');
  const store =
    kind === 'sqlite' ? s.sqliteStore({ path: where }) : s.postgresStore({ ...pgOptions(), schema: where });
  await store.migrate();
  await backlog(s, store, n, processes, warm);

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
    const spec: ChildSpec = { store: kind, where, slots, handlerMs, effect, index: c, warm };
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
      warm: { type: 'string', default: '10000' },
      rounds: { type: 'string', default: '3' },
    },
  });
  const kind = z.enum(['pg', 'sqlite']).parse(values.store);
  const n = z.coerce.number().int().positive().parse(values.ops);
  const warm = z.coerce.number().int().nonnegative().parse(values.warm);
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
      results[i]!.push(await run(s, kind, n, c.p, c.sl, c.h, values.effect, warm));
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
