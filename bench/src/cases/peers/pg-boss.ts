/**
 * @module bench/cases/peers/pg-boss
 * pg-boss 10.4.2 on PostgreSQL, in a schema of its own per case run, one queue (`noop`, the
 * default `standard` policy).
 *
 * - producer: its own `PgBoss` instance (pool of 10), `send` / `insert`.
 * - defaults: 10 workers (`work()` called 10 times: each call is one polling worker, which is how
 *   the library takes concurrency), each with the documented defaults: `batchSize: 1`,
 *   `pollingIntervalSeconds: 2`. A worker fetches, runs the batch, and waits out the rest of
 *   the interval before the next fetch, so this shape is bound at 10 jobs per 2 s.
 * - tuned: the same 10 workers with `batchSize: 1000` and `pollingIntervalSeconds: 0.5` (the
 *   smallest interval the library accepts): the two knobs its documentation gives for
 *   throughput.
 *
 * A worker's handler returns before pg-boss writes the completion (`complete` is not awaited),
 * so what is outstanding is read from its job table: jobs of the queue not yet `completed`.
 */
import PgBoss from 'pg-boss';
import { pg } from '../../lib/drivers.js';
import type { CaseSpec } from '../types.js';
import {
  type Consumer,
  DEFAULT_CONCURRENCY,
  identifierOf,
  type Producer,
  payloadOf,
  type QueueUnderTest,
  type Settings,
} from './queue.js';

const QUEUE = 'noop';
const APP = 'bench-pgboss';

const SETTINGS: Record<Settings, PgBoss.WorkOptions> = {
  defaults: {},
  tuned: { batchSize: 1000, pollingIntervalSeconds: 0.5 },
};

export function pgBossQueue(spec: CaseSpec): QueueUnderTest {
  const schema = identifierOf(spec.tag);
  const open = async () => {
    const boss = new PgBoss({ connectionString: spec.databaseUrl, schema, application_name: APP });
    boss.on('error', (e) => console.error(`pg-boss error: ${e instanceof Error ? e.message : e}`));
    await boss.start();
    return boss;
  };
  const verify = new pg.Client({ connectionString: spec.databaseUrl, application_name: 'verify-pgboss' });
  let connected = false;

  return {
    label: 'pg-boss 10.4.2',
    store: 'PostgreSQL',
    applications: [APP],
    // At its defaults it runs 10 jobs per 2 s, far below the 200/s offered: the queue would grow.
    latency: 'tuned',
    async prepare() {
      await verify.connect();
      connected = true;
      const boss = await open();
      try {
        await boss.createQueue(QUEUE);
      } finally {
        await boss.stop({ graceful: true, wait: true });
      }
    },
    async producer(): Promise<Producer> {
      const boss = await open();
      return {
        async enqueue(job) {
          await boss.send(QUEUE, payloadOf(job));
        },
        async enqueueBatch(jobs) {
          await boss.insert(jobs.map((job) => ({ name: QUEUE, data: payloadOf(job) })));
        },
        close: () => boss.stop({ graceful: true, wait: true }),
      };
    },
    async consumer(settings, onStart): Promise<Consumer> {
      const boss = await open();
      return {
        async start() {
          for (let w = 0; w < DEFAULT_CONCURRENCY; w++) {
            await boss.work<{ job: number }>(QUEUE, SETTINGS[settings], async (jobs) => {
              for (const j of jobs) onStart(j.data.job);
            });
          }
        },
        close: () => boss.stop({ graceful: true, wait: true }),
      };
    },
    async outstanding() {
      const r = await verify.query(
        `SELECT count(*)::int AS n FROM "${schema}".job WHERE name = $1 AND state <> 'completed'`,
        [QUEUE],
      );
      return r.rows[0].n as number;
    },
    describe(settings) {
      const s = SETTINGS[settings];
      return {
        workers: DEFAULT_CONCURRENCY,
        batchSize: s.batchSize ?? 1,
        pollingIntervalSeconds: s.pollingIntervalSeconds ?? 2,
        pool: 10,
      };
    },
    async cleanup() {
      if (!connected) return;
      await verify.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await verify.end();
    },
  };
}
