/**
 * @module bench/probes/class-row
 * What the class's counter row costs concurrent submits on PostgreSQL. Every submit of a class
 * moves `classes.waiting` and holds that row's lock until its commit is flushed. `--clients` `pg`
 * connections (no engine, so no submit batcher folding them into one transaction) call the
 * store's submit function one at a time, each for a tenant of its own: all in one class, then each
 * in a class of its own, alternating for `--rounds` rounds.
 *
 *   node dist/probes/class-row.js [--clients 4] [--ops 6000] [--rounds 3]
 */
import { parseArgs } from 'node:util';
import { loadSluice, migratedSchema, SUBMIT_ONE_SQL, schemaClient, submitOneArgs } from './load.js';

const { values } = parseArgs({
  options: {
    clients: { type: 'string', default: '4' },
    ops: { type: 'string', default: '6000' },
    rounds: { type: 'string', default: '3' },
  },
});
const clientCount = Number(values.clients);
const perClient = Math.round(Number(values.ops) / clientCount);
const { sluice: s, label } = await loadSluice();
const schema = await migratedSchema(s, 'classrow');
const clients = await Promise.all(Array.from({ length: clientCount }, () => schemaClient(schema)));
let next = 0;
async function round(oneClass: boolean): Promise<number> {
  const t0 = performance.now();
  await Promise.all(
    clients.map(async (c, i) => {
      for (let j = 0; j < perClient; j++)
        await c.query({
          name: 'submit',
          text: SUBMIT_ONE_SQL,
          values: submitOneArgs(`t${i}`, `o${next++}`, oneClass ? 'one' : `c${i}`),
        });
    }),
  );
  return (clientCount * perClient * 1000) / (performance.now() - t0);
}
for (let r = 0; r < Number(values.rounds); r++) {
  const one = await round(true);
  const each = await round(false);
  console.log(
    `${label}: ${clientCount} clients, one class ${one.toFixed(0)} submits/s, a class each ${each.toFixed(0)} (×${(one / each).toFixed(2)})`,
  );
}
await Promise.all(clients.map((c) => c.end()));
