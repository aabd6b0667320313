/**
 * @module bench/probes/claim-one
 * The store's claim at a low rate: one operation submitted, then one claim (limit 32, as a worker
 * at its defaults asks) that starts it, timed from Node, over and over. With `--against
 * <dist/index.js>` the two builds take turns operation by operation, each on a schema of its own
 * (PostgreSQL), so both see the same moments of this noisy machine; medians per build.
 *
 *   node dist/probes/claim-one.js [--ops 400] [--against PATH]
 */
import { parseArgs } from 'node:util';
import { freshSchema, loadBuilds, pgOptions, quantile } from './load.js';

const { values } = parseArgs({
  options: {
    ops: { type: 'string', default: '400' },
    against: { type: 'string' },
  },
});
const n = Number(values.ops);
const builds = await loadBuilds(values.against);
// A schema per build (their migrations differ), named apart even when made in the same millisecond.
const stores = builds.map((b, k) =>
  b.sluice.postgresStore({ ...pgOptions(), schema: freshSchema(`claim1_${k}`) }),
);
for (const store of stores) await store.migrate();

const times = builds.map((): number[] => []);
for (let i = 0; i < n; i++) {
  for (const [k, store] of stores.entries()) {
    const [out] = await store.operationSubmitMany([
      {
        tenant: `t${i % 4}`,
        id: `o${i}`,
        kind: 'noop',
        class: 'default',
        digest: 'd',
        inputJson: '{}',
        maxAttempts: 3,
        deadlineMs: null,
      },
    ]);
    if (out?.status !== 'created') throw new Error(`submit: ${out?.status}`);
    const started = performance.now();
    const claim = await store.operationClaimMany({
      class: 'default',
      owner: 'probe',
      limit: 32,
      leaseMs: 30_000,
    });
    times[k]!.push(performance.now() - started);
    if (claim.rows.length !== 1) throw new Error(`the claim started ${claim.rows.length} operations`);
  }
}
for (const store of stores) await store.close();
for (const [k, build] of builds.entries()) {
  const t = times[k]!;
  console.log(
    `${build.label}: claim of one ${quantile(t, 0.5).toFixed(3)} ms (p10 ${quantile(t, 0.1).toFixed(3)}, ` +
      `p90 ${quantile(t, 0.9).toFixed(3)}) over ${n}`,
  );
}
if (builds.length === 2)
  console.log(`ratio of the medians: ${(quantile(times[0]!, 0.5) / quantile(times[1]!, 0.5)).toFixed(2)}`);
