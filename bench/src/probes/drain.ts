/**
 * @module bench/probes/drain
 * One worker engine at its defaults drains a backlog of no-op operations of one tenant:
 * operations/s, Node CPU per operation, and the hot loop's store calls (count, mean latency,
 * through the bench's own call counter). For A/B runs of a change: alternate builds (`SLUICE`,
 * see load.ts) in the same minutes and compare the rates.
 *
 *   node dist/probes/drain.js [--store pg|sqlite] [--ops 10000]
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { CallCounts, counted } from '../lib/engine.js';
import { freshStore, loadSluice } from './load.js';

const HOT = ['operationClaimMany', 'attemptFinishMany', 'attemptFinishAndClaim'];

const { values } = parseArgs({
  options: { store: { type: 'string', default: 'pg' }, ops: { type: 'string', default: '10000' } },
});
const n = Number(values.ops);
const { sluice: s, label } = await loadSluice();
const base = freshStore(s, values.store, 'drain');
await base.migrate();
const counts = new CallCounts();
const store = counted(base, counts);
const engine = new s.Sluice({ store });
engine.define('noop', { input: z.object({ i: z.number() }), run: () => undefined });
for (let i = 0; i < n; i += 500)
  await Promise.all(
    Array.from({ length: Math.min(500, n - i) }, (_, k) =>
      engine.submit({ tenant: 't', id: `o${i + k}`, kind: 'noop', input: { i: i + k } }),
    ),
  );
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
const perCall = [...counts.byMethod]
  .filter(([m]) => HOT.includes(m))
  .map(([m, c]) => `${m} ${c} × ${((counts.msByMethod.get(m) ?? 0) / c).toFixed(2)} ms`)
  .join(', ');
console.log(
  `${label} ${values.store}: ${Math.round(n / seconds)} ops/s, Node CPU ${Math.round((used.user + used.system) / n)} µs/op; ${perCall}`,
);
await engine.close();
