/**
 * @module bench/probes/drain
 * One worker engine at its defaults drains a backlog of no-op operations of one tenant:
 * operations/s, Node CPU per operation, and the hot loop's store calls (count, mean latency,
 * items per call). For A/B runs of a change: alternate builds (`SLUICE`, see load.ts) in the
 * same minutes and compare the rates.
 *
 *   node dist/probes/drain.js [--store pg|sqlite] [--ops 10000]
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { freshStore, loadSluice } from './load.js';

const { values } = parseArgs({
  options: { store: { type: 'string', default: 'pg' }, ops: { type: 'string', default: '10000' } },
});
const n = Number(values.ops);
const { sluice: s, label } = await loadSluice();
const store = freshStore(s, values.store, 'drain');
await store.migrate();
const calls = new Map<string, { count: number; ms: number; items: number }>();
for (const method of ['operationClaimMany', 'attemptFinishMany', 'attemptFinishAndClaim'] as const) {
  const real = (store as unknown as Record<string, ((...a: unknown[]) => Promise<unknown>) | undefined>)[
    method
  ];
  if (!real) continue;
  (store as unknown as Record<string, unknown>)[method] = async (...args: unknown[]) => {
    const started = performance.now();
    try {
      return await real.apply(store, args);
    } finally {
      const c = calls.get(method) ?? { count: 0, ms: 0, items: 0 };
      c.count++;
      c.ms += performance.now() - started;
      c.items += Array.isArray(args[0]) ? args[0].length : 0;
      calls.set(method, c);
    }
  };
}
const engine = new s.Sluice({ store });
engine.define('noop', { input: z.object({ i: z.number() }), run: () => undefined });
for (let i = 0; i < n; i += 500)
  await Promise.all(
    Array.from({ length: Math.min(500, n - i) }, (_, k) =>
      engine.submit({ tenant: 't', id: `o${i + k}`, kind: 'noop', input: { i: i + k } }),
    ),
  );
calls.clear();
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
const perCall = [...calls]
  .map(
    ([m, c]) =>
      `${m} ${c.count} × ${(c.ms / c.count).toFixed(2)} ms (${(c.items / c.count).toFixed(1)} ends)`,
  )
  .join(', ');
console.log(
  `${label} ${values.store}: ${Math.round(n / seconds)} ops/s, Node CPU ${Math.round((used.user + used.system) / n)} µs/op; ${perCall}`,
);
await engine.close();
