/**
 * @module bench/probes/tx-submit
 * Transactional submits on PostgreSQL, the outbox shape: `--clients` application connections, each
 * looping `BEGIN; INSERT` of its own row; `sluice.submit(request, { tx })`; `--hold-ms` of other
 * work in the transaction (`pg_sleep`, server side); `COMMIT`. Each client submits for a tenant of
 * its own, all in one class. Submits per second, and the p99 of one transaction. With `--against`
 * the two builds take turns round by round, each round on a fresh schema of its own.
 *
 *   node dist/probes/tx-submit.js [--clients 8] [--ops 4000] [--hold-ms 0] [--rounds 3] [--against PATH]
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { type PgClient, pg } from '../lib/drivers.js';
import {
  alternate,
  databaseUrl,
  freshStore,
  loadBuilds,
  quantile,
  roundRatios,
  type Sluice,
} from './load.js';

const { values } = parseArgs({
  options: {
    clients: { type: 'string', default: '8' },
    ops: { type: 'string', default: '4000' },
    'hold-ms': { type: 'string', default: '0' },
    rounds: { type: 'string', default: '3' },
    against: { type: 'string' },
  },
});
const clients = Number(values.clients);
const perClient = Math.round(Number(values.ops) / clients);
const holdSeconds = Number(values['hold-ms']) / 1000;
const builds = await loadBuilds(values.against);

async function round(s: Sluice): Promise<{ rate: number; p99: number }> {
  const store = freshStore(s, 'pg', 'txsubmit');
  await store.migrate();
  const engine = new s.Sluice({ store });
  engine.define('bench.noop', { input: z.object({ i: z.number().int() }), run: () => undefined });
  const apps = await Promise.all(
    Array.from({ length: clients }, async () => {
      const c = new pg.Client({ connectionString: databaseUrl() });
      await c.connect();
      await c.query('CREATE TEMP TABLE app_rows (id integer PRIMARY KEY)');
      return c;
    }),
  );
  const times: number[] = [];
  const one = async (c: PgClient, tenant: string, i: number) => {
    const t0 = performance.now();
    await c.query('BEGIN');
    await c.query('INSERT INTO app_rows (id) VALUES ($1)', [i]);
    await engine.submit({ tenant, id: `j${i}`, kind: 'bench.noop', input: { i } }, { tx: c });
    if (holdSeconds > 0) await c.query('SELECT pg_sleep($1)', [holdSeconds]);
    await c.query('COMMIT');
    times.push(performance.now() - t0);
  };
  // Warm-up: 50 per client, untimed.
  await Promise.all(
    apps.map(async (c, k) => {
      for (let i = 0; i < 50; i++) await one(c, `w${k}`, -1 - i);
    }),
  );
  times.length = 0;
  const started = performance.now();
  await Promise.all(
    apps.map(async (c, k) => {
      for (let i = 0; i < perClient; i++) await one(c, `t${k}`, i);
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  await Promise.all(apps.map((c) => c.end()));
  await engine.close();
  return { rate: (perClient * clients) / seconds, p99: quantile(times, 0.99) };
}

const results = await alternate(builds, Number(values.rounds), round);
for (const [i, build] of builds.entries()) {
  const rates = results[i]!.map((r) => r.rate);
  const p99s = results[i]!.map((r) => r.p99);
  console.log(
    `${build.label} ${clients} clients, hold ${values['hold-ms']} ms: ${Math.round(quantile(rates, 0.5))} ` +
      `submits/s (${rates.map(Math.round).join(', ')}), transaction p99 ${quantile(p99s, 0.5).toFixed(1)} ms`,
  );
}
if (builds.length === 2)
  console.log(
    roundRatios(
      results[0]!.map((r) => r.rate),
      results[1]!.map((r) => r.rate),
    ),
  );
