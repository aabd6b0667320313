/**
 * @module bench/probes/pooled
 * What `pooler: 'transaction'` costs: `sluice.submit()` awaited one at a time, then a worker
 * draining what was submitted, with the store's statements prepared by name on a direct
 * connection (`named`), sent unnamed on a direct connection (`unnamed`), and, given `--bouncer`
 * (a URL of the same database through PgBouncer in transaction mode), sent unnamed through it
 * (`bouncer`). The variants take turns round by round, each round on a fresh schema, so all see
 * the same minutes of this noisy machine. Prints each variant's median rates and its ratios to
 * `named`.
 *
 *   node dist/probes/pooled.js [--bouncer postgres://…:6432/db] [--ops 1000] [--rounds 5]
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { databaseUrl, freshSchema, loadSluice, quantile } from './load.js';

const { values } = parseArgs({
  options: {
    bouncer: { type: 'string' },
    ops: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '5' },
  },
});
const n = Number(values.ops);
const { sluice: s } = await loadSluice();
const direct = databaseUrl();
const variants: Array<[string, Record<string, unknown>]> = [
  ['named', { connectionString: direct }],
  ['unnamed', { connectionString: direct, pooler: 'transaction', listenUrl: direct }],
];
if (values.bouncer)
  variants.push(['bouncer', { connectionString: values.bouncer, pooler: 'transaction', listenUrl: direct }]);

const input = z.object({ job: z.number().int() });

async function round(options: Record<string, unknown>): Promise<{ submit: number; drain: number }> {
  const store = s.postgresStore({ ...options, schema: freshSchema('pooled'), poolSize: 4 });
  await store.migrate();
  const engine = new s.Sluice({ store });
  let left = n;
  let drained!: () => void;
  const done = new Promise<void>((resolve) => {
    drained = resolve;
  });
  engine.define('bench.noop', {
    input,
    run: () => {
      if (--left === 0) drained();
    },
  });
  const started = performance.now();
  for (let i = 0; i < n; i++)
    await engine.submit({ tenant: `t${i % 4}`, id: `j${i}`, kind: 'bench.noop', input: { job: i } });
  const submitted = performance.now();
  engine.worker({ rescueIntervalMs: false, purgeIntervalMs: false }).start();
  await done;
  const ended = performance.now();
  await engine.close();
  return { submit: n / ((submitted - started) / 1000), drain: n / ((ended - submitted) / 1000) };
}

const results = variants.map((): Array<{ submit: number; drain: number }> => []);
for (let r = 0; r < Number(values.rounds); r++) {
  const order = [...variants.keys()];
  if (r % 2 === 1) order.reverse();
  for (const i of order) results[i]!.push(await round(variants[i]![1]));
}
const median = (i: number, key: 'submit' | 'drain') =>
  quantile(
    results[i]!.map((x) => x[key]),
    0.5,
  );
for (const [i, [name]] of variants.entries()) {
  const spread = (key: 'submit' | 'drain') => results[i]!.map((x) => Math.round(x[key])).join(', ');
  console.log(
    `${name}: submit ${Math.round(median(i, 'submit'))}/s (${spread('submit')}), ${(median(i, 'submit') / median(0, 'submit')).toFixed(2)}× named; ` +
      `drain ${Math.round(median(i, 'drain'))}/s (${spread('drain')}), ${(median(i, 'drain') / median(0, 'drain')).toFixed(2)}× named`,
  );
}
