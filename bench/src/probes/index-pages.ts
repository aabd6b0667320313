/**
 * @module bench/probes/index-pages
 * What a worker draining one tenant's backlog reads from each index of the PostgreSQL store, per
 * operation: pages from cache or disk (`pg_statio_user_indexes`), counted, not timed, so a
 * change's effect shows on this noisy machine in one run. Every operation claimed leaves its entry
 * in the ready index until a VACUUM (on a server whose autovacuum is off, as this one's is, until
 * the end of the run); a read that starts at the front of a tenant's range steps over all of them.
 * With `--against <dist/index.js>` it runs another build the same way, one after the other.
 *
 *   node dist/probes/index-pages.js [--ops 30000] [--against PATH]
 */
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { type PgClient, pg } from '../lib/drivers.js';
import { databaseUrl, freshSchema, loadBuilds, pgOptions, type Sluice, submitBacklog } from './load.js';

const { values } = parseArgs({
  options: {
    ops: { type: 'string', default: '30000' },
    against: { type: 'string' },
  },
});
const n = Number(values.ops);
const builds = await loadBuilds(values.against);

async function pagesByIndex(client: PgClient, schema: string): Promise<Map<string, number>> {
  const { rows } = await client.query<{ name: string; pages: string }>(
    `SELECT s.indexrelname AS name, (s.idx_blks_hit + s.idx_blks_read)::bigint AS pages
       FROM pg_statio_user_indexes s WHERE s.schemaname = $1`,
    [schema],
  );
  return new Map(rows.map((r) => [r.name, Number(r.pages)]));
}

async function drain(s: Sluice): Promise<{ rate: number; pages: Map<string, number> }> {
  const schema = freshSchema('pages');
  // One tenant's whole backlog: the default admission bounds would refuse it.
  const engine = () => {
    const e = new s.Sluice({
      store: s.postgresStore({ ...pgOptions(), schema }),
      classes: { default: { maxQueued: null, tenant: { maxWaiting: null } } },
    });
    e.define('noop', { input: z.object({ i: z.number() }), run: () => undefined });
    return e;
  };
  // The backlog from an engine of its own, closed before counting: a backend publishes what it
  // read when its transaction ends, at most once a second, and at the latest when it exits.
  const submitter = engine();
  await submitter.migrate();
  await submitBacklog(submitter, n);
  await submitter.close();
  const admin = new pg.Client({ connectionString: databaseUrl() });
  await admin.connect();
  try {
    await settle(admin);
    const before = await pagesByIndex(admin, schema);
    const working = engine();
    const worker = working.worker();
    let done = 0;
    const started = performance.now();
    await new Promise<void>((resolve) => {
      worker.on('attempt', () => {
        if (++done === n) resolve();
      });
      worker.start();
    });
    const rate = n / ((performance.now() - started) / 1000);
    await working.close();
    await settle(admin);
    const after = await pagesByIndex(admin, schema);
    const pages = new Map([...after].map(([name, p]) => [name, (p - (before.get(name) ?? 0)) / n]));
    return { rate, pages };
  } finally {
    await admin.end();
  }
}

/** Waits for exited backends' counters to reach the statistics views, and reads them afresh. */
async function settle(admin: PgClient): Promise<void> {
  await new Promise((r) => setTimeout(r, 1500));
  await admin.query('SELECT pg_stat_clear_snapshot()');
}

for (const build of builds) {
  const { rate, pages } = await drain(build.sluice);
  const read = [...pages]
    .filter(([, p]) => p >= 0.01)
    .sort((a, b) => b[1] - a[1])
    .map(([name, p]) => `${name} ${p.toFixed(2)}`)
    .join(', ');
  console.log(`${build.label}: ${Math.round(rate)} ops/s; index pages read per operation: ${read}`);
}
