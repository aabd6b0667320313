/**
 * @module bench/probes/latency-split
 * Where enqueue→start latency goes at a steady rate on PostgreSQL: a submitting engine and a
 * worker engine in one process (as the `latency` scenario), operations sent open-loop at
 * `--rate`; per operation the submit's acknowledgement, the worker's claim leaving, the claim's
 * return and the handler's start. Prints medians (and p99 of the whole).
 *
 *   node dist/probes/latency-split.js [--rate 200] [--ops 2000]
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { loadSluice, quantile } from './load.js';

const { values } = parseArgs({
  options: { rate: { type: 'string', default: '200' }, ops: { type: 'string', default: '2000' } },
});
const rate = Number(values.rate);
const n = Number(values.ops);
const { sluice: s, label } = await loadSluice();
const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const schema = `latsplit_${Date.now()}_${process.pid}`;
// Two stores on one schema, as an API process and a worker process: NOTIFY carries the work.
const submitting = s.postgresStore({ connectionString: url, schema });
await submitting.migrate();
const working = s.postgresStore({ connectionString: url, schema });
// The claims that start operations: alone (a wake-up's) or after ends.
const claimed = new Map<number, [number, number]>();
for (const method of ['operationClaimMany', 'attemptFinishAndClaim'] as const) {
  const real = (working as unknown as Record<string, ((...a: unknown[]) => Promise<unknown>) | undefined>)[
    method
  ];
  if (!real) continue;
  (working as unknown as Record<string, unknown>)[method] = async (...args: unknown[]) => {
    const started = performance.now();
    const out = (await real.apply(working, args)) as {
      rows?: Array<{ id: string }>;
      claim?: { rows: Array<{ id: string }> };
    };
    for (const row of out.rows ?? out.claim?.rows ?? [])
      claimed.set(Number(row.id.slice(1)), [started, performance.now()]);
    return out;
  };
}
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
await worker.stop();
await consumer.close();
await producer.close();
