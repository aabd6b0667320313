/**
 * @module bench/cases/peers/bullmq
 * BullMQ 6.7.0 on Redis (`REDIS_URL`, default redis://127.0.0.1:6379) through ioredis, the
 * driver BullMQ loads by default. Each case run gets a key prefix of its own, obliterated at the
 * end. Redis is not durable the way the PostgreSQL and SQLite figures are: as set up here it
 * keeps nothing on disk, so its figures are no commit at all; read them as the in-memory bound.
 *
 * - producer: a `Queue` (its own connection), `add` / `addBulk`.
 * - defaults: a `Worker` with `concurrency: 10`, nothing else set (completed jobs are kept).
 * - tuned: `concurrency: 50`, the value of the library's concurrency guide.
 *
 * BullMQ's completion is written by the same Lua script that fetches the next job, before the
 * worker moves on; what is outstanding is read from its own counts all the same, like the others.
 */
import { type ConnectionOptions, Queue, Worker, type WorkerOptions } from 'bullmq';
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
export const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

const SETTINGS: Record<Settings, Partial<WorkerOptions>> = {
  defaults: { concurrency: DEFAULT_CONCURRENCY },
  tuned: { concurrency: 50 },
};

function connectionOf(url: string): ConnectionOptions {
  const u = new URL(url);
  return {
    host: u.hostname,
    port: Number(u.port || 6379),
    ...(u.password ? { password: decodeURIComponent(u.password) } : {}),
    ...(u.pathname.length > 1 ? { db: Number(u.pathname.slice(1)) } : {}),
  };
}

export function bullmqQueue(spec: CaseSpec): QueueUnderTest {
  const connection = connectionOf(process.env.REDIS_URL || DEFAULT_REDIS_URL);
  const prefix = `sluice_bench_${identifierOf(spec.tag)}`;
  let admin: Queue | undefined;

  return {
    label: 'BullMQ 6.7.0',
    store: 'Redis',
    applications: undefined,
    // More concurrency does not start a job sooner when the worker is idle.
    latency: 'defaults',
    async prepare() {
      admin = new Queue(QUEUE, { connection, prefix });
      await admin.waitUntilReady();
    },
    async producer(): Promise<Producer> {
      const queue = new Queue(QUEUE, { connection, prefix });
      await queue.waitUntilReady();
      return {
        async enqueue(job) {
          await queue.add(QUEUE, payloadOf(job));
        },
        async enqueueBatch(jobs) {
          await queue.addBulk(jobs.map((job) => ({ name: QUEUE, data: payloadOf(job) })));
        },
        close: () => queue.close(),
      };
    },
    async consumer(settings, onStart): Promise<Consumer> {
      let worker: Worker | undefined;
      return {
        async start() {
          worker = new Worker<{ job: number }>(
            QUEUE,
            async (job) => {
              onStart(job.data.job);
            },
            { connection, prefix, ...SETTINGS[settings] },
          );
          worker.on('error', (e) => console.error(`BullMQ worker error: ${e.message}`));
          await worker.waitUntilReady();
        },
        async close() {
          await worker?.close();
        },
      };
    },
    async outstanding() {
      if (!admin) throw new Error('bullmq: prepare() first');
      const counts = await admin.getJobCounts('wait', 'active', 'delayed', 'prioritized', 'waiting-children');
      return Object.values(counts).reduce((a, b) => a + b, 0);
    },
    describe(settings) {
      return { concurrency: SETTINGS[settings].concurrency ?? 1, removeOnComplete: 'false (default)' };
    },
    async cleanup() {
      if (!admin) return;
      await admin.obliterate({ force: true });
      await admin.close();
    },
  };
}
