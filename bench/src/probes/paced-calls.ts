/**
 * @module bench/probes/paced-calls
 * The floor under the latency scenario on PostgreSQL, without Sluice: one `pg` connection makes
 * the same call `--calls` times back to back, then once every `--every` ms (as at 200/s), and
 * prints each way's p50 and p99. The calls: `SELECT 1` (a round trip), a single-row `INSERT` in
 * autocommit (a round trip and a flushed commit), and the store's submit function (what a submit
 * costs the server, with its commit).
 *
 *   node dist/probes/paced-calls.js [--calls 1000] [--every 5]
 */
import { parseArgs } from 'node:util';
import type { QueryConfig } from 'pg';
import { loadSluice, migratedSchema, quantile, SUBMIT_ONE_SQL, schemaClient, submitOneArgs } from './load.js';

const { values } = parseArgs({
  options: { calls: { type: 'string', default: '1000' }, every: { type: 'string', default: '5' } },
});
const calls = Number(values.calls);
const everyMs = Number(values.every);
const { sluice: s, label } = await loadSluice();
const client = await schemaClient(await migratedSchema(s, 'paced'));
await client.query('CREATE TABLE plain (id bigserial PRIMARY KEY, v text)');

let next = 0;
const shapes: Record<string, () => QueryConfig> = {
  'SELECT 1': () => ({ name: 'one', text: 'SELECT 1' }),
  INSERT: () => ({ name: 'insert', text: 'INSERT INTO plain (v) VALUES ($1)', values: ['x'.repeat(60)] }),
  'submit function': () => ({
    name: 'submit',
    text: SUBMIT_ONE_SQL,
    values: submitOneArgs('t', `o${next++}`, 'c'),
  }),
};
const ms = (x: number) => x.toFixed(2);
for (const [name, make] of Object.entries(shapes)) {
  for (let i = 0; i < 100; i++) await client.query(make());
  const out: string[] = [];
  for (const paced of [false, true]) {
    const took: number[] = [];
    for (let i = 0; i < calls; i++) {
      if (paced) await new Promise((r) => setTimeout(r, everyMs));
      const t0 = performance.now();
      await client.query(make());
      took.push(performance.now() - t0);
    }
    out.push(
      `${paced ? `every ${everyMs} ms` : 'back to back'} p50 ${ms(quantile(took, 0.5))} p99 ${ms(quantile(took, 0.99))}`,
    );
  }
  console.log(`${label}: ${name.padEnd(15)} ${out.join(' | ')} (ms)`);
}
await client.end();
