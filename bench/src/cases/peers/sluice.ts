/**
 * @module bench/cases/peers/sluice
 * Sluice in the side-by-side scenarios, at its defaults: `new Sluice({ store })`, `submit`, and
 * `sluice.worker()` with nothing set (32 slots, 500 ms poll, the store's default pool of 10).
 * There is nothing to tune: a `tuned` run is the same defaults.
 *
 * A batch is one `submitMany` call: one store call and one commit for its 1,000 operations.
 *
 * On PostgreSQL the producer and the worker are separate engines (own pools), as an API process
 * and a worker process would be: a submit reaches the worker by NOTIFY, like the peers' jobs
 * reach theirs. On SQLite they share one engine, as a SQLite deployment does (the process that
 * owns the file submits and works; another process's submits would be found by the 500 ms poll).
 */
import { Sluice } from 'sluice';
import { z } from 'zod';
import { pg } from '../../lib/drivers.js';
import { openStore, type StoreName, type StoreTarget } from '../../lib/engine.js';
import type { CaseSpec } from '../types.js';
import { type Consumer, identifierOf, type Producer, payloadOf, type QueueUnderTest } from './queue.js';

const KIND = 'bench.noop';
/**
 * Sluice's default admission lets one tenant hold at most 10,000 waiting operations; a backlog of
 * 20,000 goes round robin to 4 tenants (5,000 each) rather than raising that bound.
 */
const TENANTS = 4;
const tenantOf = (job: number) => `t${job % TENANTS}`;
const input = z.object({
  job: z.number().int().nonnegative(),
  amount_cents: z.number().int(),
  note: z.string(),
});

export function sluiceQueue(spec: CaseSpec, store: StoreName): QueueUnderTest {
  const target: StoreTarget = {
    store,
    databaseUrl: spec.databaseUrl,
    schema: identifierOf(spec.tag),
    dir: spec.dir,
    poolSize: spec.poolSize,
  };
  let enqueued = 0;
  let completed = 0;
  let live: Sluice | undefined;

  const engine = (onStart?: (job: number) => void) => {
    const sluice = new Sluice({ store: openStore(target).store });
    sluice.define(KIND, {
      input,
      run: (x) => {
        if (!onStart) throw new Error('this engine runs no worker');
        onStart(x.job);
      },
    });
    return sluice;
  };
  const request = (job: number) => ({
    tenant: tenantOf(job),
    id: `j${job}`,
    kind: KIND,
    input: payloadOf(job),
  });
  const submit = async (sluice: Sluice, job: number) => {
    const r = await sluice.submit(request(job));
    if (!r.created) throw new Error(`operation ${tenantOf(job)}/j${job} already existed`);
    enqueued++;
  };

  return {
    label: 'Sluice',
    store: store === 'pg' ? 'PostgreSQL' : 'SQLite',
    applications: store === 'pg' ? ['sluice'] : undefined,
    latency: 'defaults',
    async prepare() {
      const sluice = engine();
      await sluice.migrate();
      await sluice.close();
    },
    async producer(): Promise<Producer> {
      const shared = store === 'sqlite' ? live : undefined;
      const sluice = shared ?? engine();
      return {
        enqueue: (job) => submit(sluice, job),
        async enqueueBatch(jobs) {
          const results = await sluice.submitMany(jobs.map(request));
          results.forEach((r, i) => {
            if (!r.ok || !r.created)
              throw new Error(`operation j${jobs[i]}: ${r.ok ? 'already existed' : r.error.code}`);
          });
          enqueued += results.length;
        },
        close: async () => {
          if (!shared) await sluice.close();
        },
      };
    },
    async consumer(_settings, onStart): Promise<Consumer> {
      const sluice = engine(onStart);
      live = sluice;
      const worker = sluice.worker();
      worker.on('attempt', (e) => {
        if (e.report.outcome === 'written' && e.report.end === 'succeeded') completed++;
        else console.error(`operation ${e.id}: ${JSON.stringify(e.report)}`);
      });
      return {
        async start() {
          worker.start();
        },
        async close() {
          if (live === sluice) live = undefined;
          await sluice.close();
        },
      };
    },
    // The `attempt` event follows the write of the attempt's end.
    outstanding: async () => enqueued - completed,
    describe: () => ({
      worker: 'sluice.worker() with no options: 32 slots, 500 ms poll',
      pool: 'default (10)',
    }),
    async cleanup() {
      if (store !== 'pg') return;
      const c = new pg.Client({ connectionString: spec.databaseUrl, application_name: 'verify-sluice' });
      await c.connect();
      try {
        await c.query(`DROP SCHEMA IF EXISTS "${target.schema}" CASCADE`);
      } finally {
        await c.end();
      }
    },
  };
}
