/**
 * @module bench/cases/peers/graphile
 * graphile-worker 0.17.3 on PostgreSQL, in a schema of its own per case run.
 *
 * - producer: `makeWorkerUtils` (its own pool of 10), `addJob` / `addJobs`.
 * - defaults: `run({ concurrency: 10 })`, nothing else set (pool 10, poll 2 s, no local queue,
 *   completions one statement each).
 * - tuned: the configuration of the library's own performance page: `concurrency: 24`,
 *   `maxPoolSize: 25`, `localQueue: { size: 500 }`, `completeJobBatchDelay: 0`,
 *   `failJobBatchDelay: 0`.
 *
 * Its default logger prints a line per completed job; here it gets one that keeps warnings and
 * errors only (as Sluice's default does), so the bench's stdout pipe is not what is measured.
 * A completed job is deleted: what is outstanding is what is left in its table.
 */
import { Logger, makeWorkerUtils, type Runner, type RunnerOptions, run } from 'graphile-worker';
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

const TASK = 'noop';
const APP = 'bench-graphile';

const quietLogger = new Logger(() => (level, message) => {
  if (level === 'error' || level === 'warning') console.error(`graphile-worker ${level}: ${message}`);
});

const SETTINGS: Record<Settings, Partial<RunnerOptions>> = {
  defaults: { concurrency: DEFAULT_CONCURRENCY },
  tuned: {
    concurrency: 24,
    maxPoolSize: 25,
    preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
  },
};

function withApplication(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set('application_name', name);
  return u.toString();
}

export function graphileQueue(spec: CaseSpec): QueueUnderTest {
  const schema = identifierOf(spec.tag);
  const connectionString = withApplication(spec.databaseUrl, APP);
  const verify = new pg.Client({ connectionString: spec.databaseUrl, application_name: 'verify-graphile' });
  let connected = false;
  return {
    label: 'graphile-worker 0.17.3',
    store: 'PostgreSQL',
    applications: [APP],
    // Its local queue holds fetched jobs for the batch, which its docs warn can raise latency;
    // in trial runs here it did, several times over.
    latency: 'defaults',
    async prepare() {
      await verify.connect();
      connected = true;
      const utils = await makeWorkerUtils({ connectionString, schema, logger: quietLogger });
      try {
        await utils.migrate();
      } finally {
        await utils.release();
      }
    },
    async producer(): Promise<Producer> {
      const utils = await makeWorkerUtils({ connectionString, schema, logger: quietLogger });
      return {
        async enqueue(job) {
          await utils.addJob(TASK, payloadOf(job));
        },
        async enqueueBatch(jobs) {
          await utils.addJobs(jobs.map((job) => ({ identifier: TASK, payload: payloadOf(job) })));
        },
        close: async () => {
          await utils.release();
        },
      };
    },
    async consumer(settings, onStart): Promise<Consumer> {
      let runner: Runner | undefined;
      return {
        async start() {
          runner = await run({
            connectionString,
            schema,
            logger: quietLogger,
            noHandleSignals: true,
            taskList: {
              [TASK]: async (payload) => {
                onStart((payload as { job: number }).job);
              },
            },
            ...SETTINGS[settings],
          });
        },
        async close() {
          await runner?.stop();
        },
      };
    },
    async outstanding() {
      const r = await verify.query(`SELECT count(*)::int AS n FROM "${schema}"._private_jobs`);
      return r.rows[0].n as number;
    },
    describe(settings) {
      const s = SETTINGS[settings];
      return {
        concurrency: s.concurrency ?? 1,
        maxPoolSize: s.maxPoolSize ?? 10,
        pollInterval: 2000,
        worker: JSON.stringify(s.preset?.worker ?? {}),
      };
    },
    async cleanup() {
      if (!connected) return;
      await verify.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      await verify.end();
    },
  };
}
