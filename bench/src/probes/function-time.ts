/**
 * @module bench/probes/function-time
 * Where a draining worker's round goes on the PostgreSQL server: one `pg` connection ends a round
 * of `--batch` attempts (`finish_many`) and claims the next (`claim`), each function called alone,
 * both in one committed transaction, for `--rounds` rounds over one tenant's backlog. Per call it
 * prints the time seen from Node (round trip, parameters, the result's rows) and the time the
 * server spent inside each function (`pg_stat_user_functions` with `track_functions = 'all'`,
 * which takes a superuser; its figures are read before and after, so other users of the server
 * do not count). With `--against <dist/index.js>` the builds take turns pass by pass, each on a
 * schema of its own. With `--effect`, each operation of a round also has one journaled effect, as a
 * worker writes it: the round's begins (`effect_begin_many`) and then its `committed` marks
 * (`effect_mark_many`), each call its own committed transaction, before the ends and the claim.
 *
 *   node dist/probes/function-time.js [--batch 32] [--rounds 150] [--passes 3] [--effect] [--against PATH]
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import type { PgClient } from '../lib/drivers.js';
import {
  alternate,
  freshSchema,
  loadBuilds,
  pgOptions,
  quantile,
  type Sluice,
  schemaClient,
  submitBacklog,
} from './load.js';

const { values } = parseArgs({
  options: {
    batch: { type: 'string', default: '32' },
    rounds: { type: 'string', default: '150' },
    passes: { type: 'string', default: '3' },
    effect: { type: 'boolean', default: false },
    against: { type: 'string' },
  },
});
const batch = Number(values.batch);
const rounds = Number(values.rounds);
const builds = await loadBuilds(values.against);

interface Pass {
  clientBegin: number;
  clientMark: number;
  clientFinish: number;
  clientClaim: number;
  server: Map<string, { calls: number; total: number; self: number }>;
}

interface Counted {
  n: number;
}

/** Every item of the round took effect: otherwise the figures would be of refusals. */
function expectAll(what: string, n: number | undefined, round: number): void {
  if (n !== batch) throw new Error(`round ${round}: ${what} ${n}, not ${batch}`);
}

/** One call, timed from Node, and the count of its items that took effect. */
async function timedCount(
  client: PgClient,
  name: string,
  text: string,
  values: unknown[],
): Promise<{ n: number | undefined; ms: number }> {
  const t = performance.now();
  const { rows } = await client.query<Counted>({ name, text, values });
  return { n: rows[0]?.n, ms: performance.now() - t };
}

interface Claimed {
  tenant: string;
  id: string;
  epoch: number;
}

async function functionStats(client: PgClient, schema: string): Promise<Pass['server']> {
  // Statistics reach the shared view when a backend flushes them (at most once a second unless
  // forced); force this session's, then read.
  await client.query('SELECT pg_stat_force_next_flush()');
  await client.query('SELECT 1');
  const { rows } = await client.query<{
    funcname: string;
    calls: string;
    total_time: number;
    self_time: number;
  }>('SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions WHERE schemaname = $1', [
    schema,
  ]);
  return new Map(
    rows.map((r) => [r.funcname, { calls: Number(r.calls), total: r.total_time, self: r.self_time }]),
  );
}

async function pass(s: Sluice): Promise<Pass> {
  const schema = freshSchema('fntime');
  const store = s.postgresStore({ ...pgOptions(), schema });
  await store.migrate();
  const engine = new s.Sluice({ store });
  engine.define('noop', { input: z.object({ i: z.number() }), run: async () => undefined });
  const total = batch * (rounds + 1);
  await submitBacklog(engine, total);
  await engine.close();

  const client = await schemaClient(schema);
  await client.query(`SET track_functions = 'all'`);
  const claimSql = `SELECT c.* FROM claim('default', 'probe', ${batch}, 30000, now_ms(NULL), NULL, NULL) c`;
  const finishSql = `SELECT count(*)::integer AS n FROM finish_many(now_ms(NULL), $1, $2, $3, $4, $5, $6, $7, false)`;
  const beginSql = `SELECT count(*) FILTER (WHERE status = 'created')::integer AS n FROM effect_begin_many(now_ms(NULL), $1::jsonb)`;
  const markSql =
    'SELECT count(*) FILTER (WHERE ok)::integer AS n FROM effect_mark_many(now_ms(NULL), $1::jsonb)';
  let claimed = (await client.query<Claimed>({ name: 'claim', text: claimSql })).rows;
  const before = await functionStats(client, schema);
  let clientBegin = 0;
  let clientMark = 0;
  let clientFinish = 0;
  let clientClaim = 0;
  for (let r = 0; r < rounds; r++) {
    if (values.effect) {
      // What the engine sends for an effect without a provider's budgets (store/postgres/effects.ts).
      const lease = (x: Claimed) => ({ tenant: x.tenant, id: x.id, epoch: x.epoch, name: 'charge' });
      const begins = claimed.map((x) => ({
        ...lease(x),
        key: `k-${x.id}`,
        provider: null,
        cost: null,
        bKey: [],
        bLimit: [],
        bWindow: [],
        bCost: [],
        bSpend: [],
        maxCalls: null,
      }));
      const begun = await timedCount(client, 'begin', beginSql, [JSON.stringify(begins)]);
      expectAll('begins created', begun.n, r);
      clientBegin += begun.ms;
      const marks = claimed.map((x) => ({
        ...lease(x),
        state: 'committed',
        result: JSON.stringify({ id: `ch-${x.id}` }),
        reference: `ch-${x.id}`,
        error: null,
      }));
      const marked = await timedCount(client, 'mark', markSql, [JSON.stringify(marks)]);
      expectAll('marks taken', marked.n, r);
      clientMark += marked.ms;
    }
    await client.query('BEGIN');
    const ended = await timedCount(client, 'finish', finishSql, [
      claimed.map((x) => x.tenant),
      claimed.map((x) => x.id),
      claimed.map((x) => x.epoch),
      claimed.map(() => 'succeeded'),
      claimed.map(() => 'null'),
      claimed.map(() => null),
      claimed.map(() => null),
    ]);
    expectAll('ends accepted', ended.n, r);
    clientFinish += ended.ms;
    const t = performance.now();
    claimed = (await client.query<Claimed>({ name: 'claim', text: claimSql })).rows;
    clientClaim += performance.now() - t;
    await client.query('COMMIT');
    expectAll('claimed', claimed.length, r);
  }
  const after = await functionStats(client, schema);
  await client.end();
  const server = new Map<string, { calls: number; total: number; self: number }>();
  for (const [name, a] of after) {
    const b = before.get(name) ?? { calls: 0, total: 0, self: 0 };
    if (a.calls > b.calls)
      server.set(name, { calls: a.calls - b.calls, total: a.total - b.total, self: a.self - b.self });
  }
  return {
    clientBegin: clientBegin / rounds,
    clientMark: clientMark / rounds,
    clientFinish: clientFinish / rounds,
    clientClaim: clientClaim / rounds,
    server,
  };
}

const results = await alternate(builds, Number(values.passes), pass);
for (const [k, build] of builds.entries()) {
  const passes = results[k]!;
  const med = (f: (p: Pass) => number | undefined): string => {
    const xs = passes.map(f).filter((x): x is number => x !== undefined);
    return xs.length > 0 ? quantile(xs, 0.5).toFixed(3) : '-';
  };
  console.log(
    `${build.label}: a round of ${batch}, medians of ${passes.length} passes of ${rounds} rounds (ms per call)`,
  );
  const journal = values.effect
    ? `effect_begin_many ${med((p) => p.clientBegin)} (its own commit), effect_mark_many ${med((p) => p.clientMark)} (its own commit), `
    : '';
  console.log(
    `  seen from Node: ${journal}finish_many ${med((p) => p.clientFinish)}, claim ${med((p) => p.clientClaim)}`,
  );
  const names = [...new Set(passes.flatMap((p) => [...p.server.keys()]))].sort();
  for (const name of names) {
    const per = (p: Pass, field: 'total' | 'self'): number | undefined => {
      const x = p.server.get(name);
      return x ? x[field] / x.calls : undefined;
    };
    const calls = passes[0]?.server.get(name)?.calls ?? 0;
    console.log(
      `  in the server: ${name.padEnd(14)} ${(calls / rounds).toFixed(2)} calls a round, ` +
        `${med((p) => per(p, 'total'))} total, ${med((p) => per(p, 'self'))} self`,
    );
  }
}
