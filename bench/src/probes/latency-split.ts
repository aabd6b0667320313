/**
 * @module bench/probes/latency-split
 * Where enqueue→start latency goes at a steady rate on PostgreSQL: a submitting engine and a
 * worker engine in one process (as the `latency` scenario), operations sent open-loop at
 * `--rate`; per operation the submit's acknowledgement, the worker's claim leaving, the claim's
 * return and the handler's start. Prints medians (and p99 of the whole).
 *
 *   node dist/probes/latency-split.js [--rate 200] [--ops 2000] [--slowest 20] [--unflushed worker]
 *
 * Then the operations over 10 ms, counted by their longest step, and the process's garbage
 * collections. `--slowest K` also lists the K slowest operations with when they were sent, each
 * step's time and the other store calls (heartbeats, maintenance, ends) and collections that ran
 * meanwhile: to tell a periodic stall (operations slow at regular times) from slow commits.
 *
 * `--unflushed submit|worker|both`, on a database whose `synchronous_commit` is `off`: that side's
 * store keeps the setting (its commits do not wait for the WAL flush) while the other raises it to
 * `local` as it does by default; to tell which side's flushes the tail comes with.
 */
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { CLAIMING_METHODS } from '../lib/engine.js';
import { freshSchema, loadSluice, pgOptions, quantile } from './load.js';

const { values } = parseArgs({
  options: {
    rate: { type: 'string', default: '200' },
    ops: { type: 'string', default: '2000' },
    slowest: { type: 'string', default: '0' },
    unflushed: { type: 'string', default: '' },
  },
});
const durableFor = (side: 'submit' | 'worker'): boolean =>
  pgOptions().durableCommits && values.unflushed !== side && values.unflushed !== 'both';
const rate = Number(values.rate);
const n = Number(values.ops);
const { sluice: s, label } = await loadSluice();
const schema = freshSchema('latsplit');
// Two stores on one schema, as an API process and a worker process: NOTIFY carries the work.
const submitting = s.postgresStore({ ...pgOptions(), schema, durableCommits: durableFor('submit') });
await submitting.migrate();
const working = s.postgresStore({ ...pgOptions(), schema, durableCommits: durableFor('worker') });
// Every store call of both engines, timed. The worker's claims say which operations they started
// (alone, a wake-up's, or after ends); the other calls (the submits aside) are what ran while a
// slow operation waited.
const claimed = new Map<number, [number, number]>();
const others: Array<{ store: string; method: string; from: number; to: number }> = [];
for (const [name, st] of [
  ['api', submitting],
  ['worker', working],
] as const) {
  const obj = st as unknown as Record<string, unknown>;
  for (const method of Object.keys(obj)) {
    const real = obj[method];
    if (typeof real !== 'function' || ['operationSubmitMany', 'subscribe', 'close'].includes(method))
      continue;
    const claims = name === 'worker' && CLAIMING_METHODS.includes(method);
    obj[method] = async (...args: unknown[]) => {
      const from = performance.now();
      const out = (await (real as (...a: unknown[]) => Promise<unknown>).apply(st, args)) as {
        rows?: Array<{ id: string }>;
        claim?: { rows: Array<{ id: string }> };
      };
      const to = performance.now();
      if (!claims) others.push({ store: name, method, from, to });
      else
        for (const row of out.rows ?? out.claim?.rows ?? []) claimed.set(Number(row.id.slice(1)), [from, to]);
      return out;
    };
  }
}
// Garbage collections of this process (both engines live in it).
const gcs: Array<{ from: number; to: number; kind: number }> = [];
const gcObserver = new PerformanceObserver((list) => {
  for (const e of list.getEntries())
    gcs.push({
      from: e.startTime,
      to: e.startTime + e.duration,
      kind: (e as unknown as { detail?: { kind?: number } }).detail?.kind ?? 0,
    });
});
gcObserver.observe({ entryTypes: ['gc'] });
const startedAt = new Float64Array(n);
const producer = new s.Sluice({ store: submitting });
const consumer = new s.Sluice({ store: working });
for (const e of [producer, consumer])
  e.define('noop', {
    input: z.object({ j: z.number() }),
    run: ({ j }) => {
      startedAt[j] = performance.now();
    },
  });
const worker = consumer.worker();
worker.start();
await new Promise((r) => setTimeout(r, 500));
const sent = new Float64Array(n);
const acked = new Float64Array(n);
const t0 = performance.now();
const pending: Promise<void>[] = [];
for (let j = 0; j < n; j++) {
  const wait = t0 + (j * 1000) / rate - performance.now();
  if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  sent[j] = performance.now();
  pending.push(
    producer.submit({ tenant: `t${j % 4}`, id: `j${j}`, kind: 'noop', input: { j } }).then(() => {
      acked[j] = performance.now();
    }),
  );
}
await Promise.all(pending);
while (startedAt.some((t) => t === 0)) await new Promise((r) => setTimeout(r, 20));
const latency: number[] = [];
const ack: number[] = [];
const toClaim: number[] = [];
const claim: number[] = [];
const toStart: number[] = [];
for (let j = 0; j < n; j++) {
  latency.push(startedAt[j]! - sent[j]!);
  ack.push(acked[j]! - sent[j]!);
  const c = claimed.get(j);
  if (!c) continue;
  toClaim.push(c[0] - acked[j]!);
  claim.push(c[1] - c[0]);
  toStart.push(startedAt[j]! - c[1]);
}
const ms = (x: number) => x.toFixed(2);
console.log(
  `${label}: latency p50 ${ms(quantile(latency, 0.5))} ms, p99 ${ms(quantile(latency, 0.99))} ms | submit acknowledged ${ms(quantile(ack, 0.5))} | ` +
    `ack → claim leaves ${ms(quantile(toClaim, 0.5))} | claim ${ms(quantile(claim, 0.5))} | claim returns → handler ${ms(quantile(toStart, 0.5))} (medians, ms)`,
);
/** Whether [from, to] overlaps operation j's time from its submit to its handler's start. */
const meanwhile = (j: number) => (x: { from: number; to: number }) =>
  x.to > sent[j]! && x.from < startedAt[j]!;
// The operations over 10 ms (the p99 target), by the step that took longest.
const largest = new Map<string, number>();
let over = 0;
let overGc = 0;
for (let j = 0; j < n; j++) {
  if (latency[j]! <= 10) continue;
  over++;
  if (gcs.some(meanwhile(j))) overGc++;
  const c = claimed.get(j);
  const steps: Array<[string, number]> = [['submit acknowledged', acked[j]! - sent[j]!]];
  if (c)
    steps.push(
      ['ack → claim leaves', c[0] - acked[j]!],
      ['claim', c[1] - c[0]],
      ['claim returns → handler', startedAt[j]! - c[1]],
    );
  const [step] = steps.reduce((a, b) => (b[1] > a[1] ? b : a));
  largest.set(step, (largest.get(step) ?? 0) + 1);
}
const gcMs = gcs.reduce((sum, g) => sum + g.to - g.from, 0);
console.log(
  `over 10 ms: ${over} of ${n}; the longest step: ` +
    ([...largest].map(([step, k]) => `${step} ${k}`).join(', ') || 'none') +
    ` (${overGc} of them during a garbage collection) | garbage collection: ${gcs.length} pauses, ` +
    `${ms(gcMs)} ms in all, the longest ${ms(Math.max(0, ...gcs.map((g) => g.to - g.from)))} ms; ` +
    `major (mark-compact) ${gcs.filter((g) => g.kind === constants.NODE_PERFORMANCE_GC_MAJOR).length}`,
);
const slowest = [...latency.keys()]
  .sort((a, b) => latency[b]! - latency[a]!)
  .slice(0, Number(values.slowest));
for (const j of slowest.sort((a, b) => a - b)) {
  const c = claimed.get(j);
  console.log(
    `  op ${j} sent at ${ms(sent[j]! - t0)} ms: latency ${ms(latency[j]!)} | ack ${ms(acked[j]! - sent[j]!)}` +
      (c
        ? ` | → claim ${ms(c[0] - acked[j]!)} | claim ${ms(c[1] - c[0])} | → handler ${ms(startedAt[j]! - c[1])}`
        : ' | claim not seen'),
  );
  for (const o of others.filter(meanwhile(j)))
    console.log(`      meanwhile ${o.store}.${o.method} ${ms(o.from - t0)}–${ms(o.to - t0)} ms`);
  for (const g of gcs.filter(meanwhile(j)))
    console.log(`      meanwhile a garbage collection ${ms(g.from - t0)}–${ms(g.to - t0)} ms`);
}
gcObserver.disconnect();
await worker.stop();
await consumer.close();
await producer.close();
