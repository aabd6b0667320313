/**
 * @module bench/probes/paced-latency
 * Enqueue→start latency at a steady rate, one engine that submits and works (as the `latency`
 * scenario runs SQLite), operations sent open-loop every `1000 / --rate` ms; p50 and p99 over
 * `--ops` after 100 untimed. With `--against <dist/index.js>` it alternates that build with this
 * one round by round, each round on a fresh store of its own. Also prints the claiming store
 * calls per operation, and how many of those came back empty.
 *
 *   node dist/probes/paced-latency.js [--store sqlite|pg] [--rate 200] [--ops 2000] [--rounds 6] [--against PATH]
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { alternate, freshStore, loadBuilds, quantile, type Sluice } from './load.js';

const { values } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    rate: { type: 'string', default: '200' },
    ops: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '6' },
    against: { type: 'string' },
  },
});
const WARM = 100;
const n = Number(values.ops) + WARM;
const gapMs = 1000 / Number(values.rate);
const builds = await loadBuilds(values.against);
const input = z.object({ job: z.number().int() });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** The store calls that claim, and how many of them came back empty. */
function countClaims(store: object): { calls: number; empty: number } {
  const count = { calls: 0, empty: 0 };
  const methods = store as Record<string, (...args: unknown[]) => Promise<unknown>>;
  for (const method of ['operationClaimMany', 'attemptFinishAndClaim']) {
    const real = methods[method]!.bind(store);
    methods[method] = async (...args: unknown[]) => {
      const out = (await real(...args)) as { rows?: unknown[]; claim?: { rows: unknown[] } };
      count.calls++;
      if ((out.rows ?? out.claim?.rows ?? []).length === 0) count.empty++;
      return out;
    };
  }
  return count;
}

async function round(s: Sluice): Promise<{ p50: number; p99: number; claims: number; empty: number }> {
  const store = freshStore(s, values.store, 'paced');
  const claims = countClaims(store);
  const sluice = new s.Sluice({ store });
  const started = new Map<number, number>();
  let all!: () => void;
  const done = new Promise<void>((resolve) => {
    all = resolve;
  });
  sluice.define('paced', {
    input,
    run: ({ job }) => {
      started.set(job, performance.now());
      if (started.size === n) all();
    },
  });
  await sluice.migrate();
  const worker = sluice.worker();
  worker.start();
  const sent: number[] = [];
  const submits: Promise<unknown>[] = [];
  const t0 = performance.now() + 20;
  for (let job = 0; job < n; job++) {
    const at = t0 + job * gapMs;
    // The timer wakes a little early; the last stretch is awaited in small steps.
    while (performance.now() < at - 1) await sleep(at - performance.now() - 1);
    sent[job] = performance.now();
    submits.push(sluice.submit({ tenant: `t${job % 4}`, id: `j${job}`, kind: 'paced', input: { job } }));
  }
  await Promise.all(submits);
  await done;
  await sluice.close();
  const latency = sent.slice(WARM).map((at, k) => started.get(k + WARM)! - at);
  return {
    p50: quantile(latency, 0.5),
    p99: quantile(latency, 0.99),
    claims: claims.calls / n,
    empty: claims.empty / n,
  };
}

const results = await alternate(builds, Number(values.rounds), round);
for (const [i, build] of builds.entries()) {
  const p50 = results[i]!.map((r) => r.p50.toFixed(2)).join(', ');
  const p99 = results[i]!.map((r) => r.p99.toFixed(2)).join(', ');
  const claims = results[i]!.map((r) => `${r.claims.toFixed(2)} (${r.empty.toFixed(2)} empty)`).join(', ');
  console.log(`${build.label} ${values.store}: p50 ${p50} ms; p99 ${p99} ms (round by round)`);
  console.log(`  claims per operation: ${claims}`);
}
