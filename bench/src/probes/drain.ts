/**
 * @module bench/probes/drain
 * One worker engine at its defaults drains a backlog of no-op operations of one tenant (with
 * `--effect`, operations of one journaled effect each, at the bench's in-process provider stubs;
 * `--budget` makes each effect draw on a provider's spend budget and call rate):
 * operations/s, Node CPU per operation, and the hot loop's store calls (count, mean latency,
 * through the bench's own call counter). For A/B runs of a change, `--against <dist/index.js>`
 * loads that build too and alternates the two round by round in this process (load.ts).
 *
 * On SQLite, `--synchronous NORMAL` leaves the commits without their fsync: the Node CPU of a
 * change then stands out of the disk's noise. `--ids uuid` gives the operations random UUIDs as
 * ids, as clients' idempotency keys often are, instead of `o0`, `o1`, … (which a round's claims
 * take in nearly the order the ids sort).
 *
 *   node dist/probes/drain.js [--store pg|sqlite] [--ops 10000] [--effect [--budget]] [--rounds 1] [--against PATH]
 *                             [--synchronous FULL|NORMAL] [--ids seq|uuid]
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import type { Charge } from 'sluice/testing';
import { z } from 'zod';
import { CallCounts, counted, ProviderShards } from '../lib/engine.js';
import {
  alternate,
  freshStore,
  loadBuilds,
  quantile,
  roundRatios,
  type Sluice,
  submitBacklog,
} from './load.js';

const HOT = [
  'operationClaimMany',
  'attemptFinishMany',
  'attemptFinishAndClaim',
  'effectBeginMany',
  'effectMarkMany',
];

const { values } = parseArgs({
  options: {
    store: { type: 'string', default: 'pg' },
    ops: { type: 'string', default: '10000' },
    effect: { type: 'boolean', default: false },
    budget: { type: 'boolean', default: false },
    rounds: { type: 'string', default: '1' },
    against: { type: 'string' },
    synchronous: { type: 'string', default: 'FULL' },
    ids: { type: 'string', default: 'seq' },
  },
});
const idOf = z.enum(['seq', 'uuid']).parse(values.ids) === 'uuid' ? () => randomUUID() : undefined;
const n = Number(values.ops);
const synchronous = z.enum(['FULL', 'NORMAL']).parse(values.synchronous);
const builds = await loadBuilds(values.against);

async function drain(s: Sluice): Promise<{ rate: number; cpu: number; calls: string }> {
  const base = freshStore(s, values.store, 'drain', { synchronous });
  await base.migrate();
  const counts = new CallCounts();
  const store = counted(base, counts);
  // With --budget, every effect draws one unit on a per-tenant spend budget and a global call
  // rate, both far above what a run uses: the begins then carry budget rows to lock and draw.
  const engine = new s.Sluice({
    store,
    ...(values.budget
      ? {
          providers: {
            pay: {
              perTenant: { limit: 1_000_000_000, windowMs: 3_600_000 },
              rate: { limit: 1_000_000_000, windowMs: 60_000 },
            },
          },
        }
      : {}),
  });
  const provider = new ProviderShards(n);
  engine.define('noop', {
    input: z.object({ i: z.number() }),
    run: async (x, ctx) => {
      if (!values.effect) return undefined;
      const charge = await ctx.effect<Charge>('charge', {
        ...(values.budget ? { provider: 'pay', cost: 1 } : {}),
        call: ({ key, signal }) =>
          provider.charge(x.i, { key, params: { invoice: x.i, amount_cents: 1 }, signal }),
      });
      return { charge: charge.id };
    },
  });
  await submitBacklog(engine, n, idOf);
  counts.byMethod.clear();
  counts.msByMethod.clear();
  const worker = engine.worker();
  let done = 0;
  const cpu = process.cpuUsage();
  const started = performance.now();
  await new Promise<void>((resolve) => {
    worker.on('attempt', () => {
      if (++done === n) resolve();
    });
    worker.start();
  });
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  await engine.close();
  const calls = [...counts.byMethod]
    .filter(([m]) => HOT.includes(m))
    .map(([m, c]) => `${m} ${c} × ${((counts.msByMethod.get(m) ?? 0) / c).toFixed(2)} ms`)
    .join(', ');
  return { rate: n / seconds, cpu: (used.user + used.system) / n, calls };
}

const results = await alternate(builds, Number(values.rounds), drain);
for (const [i, build] of builds.entries()) {
  const runs = results[i]!;
  const rates = runs.map((r) => r.rate);
  console.log(
    `${build.label} ${values.store}${values.store === 'sqlite' ? ` ${synchronous}` : ''}` +
      `${values.effect ? (values.budget ? ' (one budgeted effect)' : ' (one effect)') : ''}${values.ids === 'uuid' ? ', UUID ids' : ''}: ` +
      `${Math.round(quantile(rates, 0.5))} ops/s (${rates.map(Math.round).join(', ')}), ` +
      `Node CPU ${Math.round(
        quantile(
          runs.map((r) => r.cpu),
          0.5,
        ),
      )} µs/op; last round: ${runs.at(-1)!.calls}`,
  );
}
if (builds.length === 2)
  console.log(
    roundRatios(
      results[0]!.map((r) => r.rate),
      results[1]!.map((r) => r.rate),
    ),
  );
