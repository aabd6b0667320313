/**
 * @module bench/cases/peer-shapes
 * Sluice side by side with the peer job queues (graphile-worker, pg-boss, BullMQ): the same
 * five shapes, driven by the same code for every queue (variants `sluice-pg`, `sluice-sqlite`,
 * `graphile`, `pg-boss`, `bullmq`), each case run with a store of its own (a schema in the
 * bench database, a temp folder, or a Redis key prefix) that is removed afterwards.
 *
 * - enqueue-one: one client awaits one enqueue at a time.
 * - enqueue-batch: one client, batches of 1,000, one batch at a time.
 * - process-defaults / process-tuned: a backlog of no-op jobs is enqueued first (untimed); then
 *   a worker starts and the clock runs from just before its start until the queue has recorded
 *   every job as completed. A run that has not finished after the time box is measured over
 *   the box (jobs completed ÷ box) and says so in its results.
 * - latency: a worker idles; jobs are enqueued at a steady rate, open loop (each on its
 *   schedule, not waiting for the previous one); per job, the handler's start minus the moment
 *   just before its enqueue call, both `performance.now()` in this one process.
 *
 * Every run checks afterwards that each job's handler ran exactly once and that the queue has
 * none left outstanding; the case fails otherwise.
 */
import { pg } from '../lib/drivers.js';
import { PhaseMeter } from '../lib/meter.js';
import { databaseOf, PgObserver } from '../lib/pg-admin.js';
import { bullmqQueue } from './peers/bullmq.js';
import { graphileQueue } from './peers/graphile.js';
import { pgBossQueue } from './peers/pg-boss.js';
import { type Producer, type QueueUnderTest, type Settings, sleep } from './peers/queue.js';
import { sluiceQueue } from './peers/sluice.js';
import type { CaseResult, CaseSpec } from './types.js';

/** The variants of every side-by-side scenario; the first two are Sluice. */
export const PEER_SHAPE_VARIANTS = ['sluice-pg', 'sluice-sqlite', 'graphile', 'pg-boss', 'bullmq'] as const;

/**
 * Jobs enqueued one at a time before the timed ones, on the same producer. A client's first
 * few thousand calls run slower than the rest while V8 compiles (and, for a client opened after
 * another, recompiles: its closures are new call targets) the call's path: Sluice's submit ran
 * at about half its rate for the first ~3,000 after a new engine opened in a warm process
 * (blocks of 500: 1,121/s and 373 µs of CPU a submit, then 1,800/s and ~120 µs). A warm-up on a
 * client of its own, then a new one timed, measured that recompilation.
 */
const ENQUEUE_WARM = 5000;

/** Warm-up jobs are numbered from here, apart from the timed ones (0 … n−1). */
const WARM_BASE = 10_000_000;
const BATCH = 1000;
const WARM_BOX_MS = 5000;
const LATENCY_RATE = 200;

function queueOf(spec: CaseSpec): QueueUnderTest {
  switch (spec.variant) {
    case 'sluice-pg':
      return sluiceQueue(spec, 'pg');
    case 'sluice-sqlite':
      return sluiceQueue(spec, 'sqlite');
    case 'graphile':
      return graphileQueue(spec);
    case 'pg-boss':
      return pgBossQueue(spec);
    case 'bullmq':
      return bullmqQueue(spec);
    default:
      throw new Error(`unknown queue ${spec.variant}: one of ${PEER_SHAPE_VARIANTS.join(', ')}`);
  }
}

/** Handler starts of jobs base … base+n−1: when each started, and whether any started twice. */
class Tally {
  readonly starts: Float64Array;
  seen = 0;
  duplicates = 0;
  strays = 0;
  readonly all: Promise<void>;
  private done: () => void = () => {};

  constructor(
    readonly n: number,
    readonly base = 0,
  ) {
    this.starts = new Float64Array(n);
    this.all = new Promise((resolve) => {
      this.done = resolve;
      if (n === 0) resolve();
    });
  }

  readonly onStart = (job: number): void => {
    const now = performance.now();
    const i = job - this.base;
    if (!(i >= 0 && i < this.n)) {
      this.strays++;
      return;
    }
    if (this.starts[i]! > 0) {
      this.duplicates++;
      return;
    }
    this.starts[i] = now;
    if (++this.seen === this.n) this.done();
  };

  check(what: string): void {
    if (this.duplicates > 0 || this.strays > 0 || this.seen !== this.n)
      throw new Error(
        `${what}: ${this.seen} of ${this.n} jobs ran, ${this.duplicates} more than once, ${this.strays} not of this phase`,
      );
  }
}

const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);

async function enqueueAll(p: Producer, jobs: number[]): Promise<void> {
  for (let i = 0; i < jobs.length; i += BATCH) await p.enqueueBatch(jobs.slice(i, i + BATCH));
}

/** Resolves when the queue has nothing outstanding (polled every 2 ms), or at `deadline`. */
async function untilDrained(q: QueueUnderTest, deadline: number): Promise<number> {
  for (;;) {
    const left = await q.outstanding();
    if (left === 0 || performance.now() >= deadline) return left;
    await sleep(2);
  }
}

/**
 * Statistics for the backlog just inserted, as autovacuum would gather soon after such a burst.
 * Without them the planner of a table it has never seen can pick plans no long-running
 * deployment would: pg-boss's completion of 1,000 jobs by id measured 110 ms (a nested loop
 * over every job of the queue per id) before and 18 ms after.
 */
async function analyze(databaseUrl: string): Promise<void> {
  const c = new pg.Client({ connectionString: databaseUrl, application_name: 'verify-analyze' });
  await c.connect();
  try {
    await c.query('ANALYZE');
  } finally {
    await c.end();
  }
}

const within = (ms: number) => new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), ms));

/**
 * One measured phase: its connections open after `meter.open()` and close before
 * `meter.close()`, so the server counters cover exactly this phase's work.
 */
async function phase<T>(
  q: QueueUnderTest,
  observer: PgObserver | undefined,
  open: () => Promise<T>,
  body: (t: T) => Promise<void>,
  close: (t: T) => Promise<void>,
  warmUp?: { ops: number; run: (t: T) => Promise<void> },
): Promise<PhaseMeter> {
  const meter = new PhaseMeter(observer, q.applications);
  await meter.open();
  const t = await open();
  try {
    if (warmUp) {
      await warmUp.run(t);
      await meter.startAfter(warmUp.ops);
    } else meter.start();
    await body(t);
    meter.stop();
    await meter.sampleServerCpu();
  } finally {
    await close(t);
  }
  await meter.close();
  return meter;
}

async function enqueue(spec: CaseSpec, q: QueueUnderTest, observer: PgObserver | undefined) {
  const batched = spec.scenario === 'enqueue-batch';
  const n = spec.ops ?? (spec.quick ? (batched ? 3000 : 1000) : 20_000);
  const warm = batched ? BATCH : spec.quick ? 50 : ENQUEUE_WARM;
  const send = async (p: Producer, jobs: number[]) => {
    if (batched) await enqueueAll(p, jobs);
    else for (const job of jobs) await p.enqueue(job);
  };
  // The warm-up runs on the producer that is then timed: see ENQUEUE_WARM.
  const meter = await phase(
    q,
    observer,
    () => q.producer(),
    (p) => send(p, range(0, n)),
    (p) => p.close(),
    { ops: warm, run: (p) => send(p, range(WARM_BASE, warm)) },
  );
  const outstanding = await q.outstanding();
  if (outstanding !== warm + n) throw new Error(`${warm + n} jobs enqueued, the queue holds ${outstanding}`);
  return {
    figures: { jobs: meter.rate(n) },
    perOp: meter.perOp(n, 'enqueue'),
    info: { n, seconds: meter.seconds, ...(batched ? { batch: BATCH } : {}) },
  };
}

async function processBacklog(
  spec: CaseSpec,
  q: QueueUnderTest,
  observer: PgObserver | undefined,
  settings: Settings,
): Promise<CaseResult> {
  const n = spec.ops ?? (spec.quick ? 2000 : 20_000);
  const warm = spec.quick ? 200 : 500;
  const boxMs = spec.quick ? 10_000 : 30_000;
  {
    // Warm-up: the same code paths end to end, then the timed backlog, all enqueued untimed.
    const p = await q.producer();
    await enqueueAll(p, range(WARM_BASE, warm));
    await p.close();
    const t = new Tally(warm, WARM_BASE);
    const c = await q.consumer(settings, t.onStart);
    const until = performance.now() + WARM_BOX_MS;
    await c.start();
    await Promise.race([t.all, within(WARM_BOX_MS)]);
    let left = await untilDrained(q, until);
    await c.close();
    if (left > 0) {
      // A poll-bound shape (pg-boss's defaults: 10 jobs per 2 s) has run its code paths by now;
      // the rest of the warm-up is drained with the tuned settings, so that it ends.
      const d = await q.consumer('tuned', t.onStart);
      await d.start();
      left = await untilDrained(q, performance.now() + boxMs);
      await d.close();
    }
    if (left > 0) throw new Error(`warm-up: ${t.seen} of ${warm} ran, ${left} outstanding`);
    t.check('warm-up');
    const b = await q.producer();
    await enqueueAll(b, range(0, n));
    await b.close();
    if (q.store === 'PostgreSQL') await analyze(spec.databaseUrl);
  }
  const tally = new Tally(n);
  let boxed = false;
  let completed = 0;
  let handlersDone = 0;
  let drained = 0;
  const meter = await phase(
    q,
    observer,
    () => q.consumer(settings, tally.onStart),
    async (c) => {
      const deadline = performance.now() + boxMs;
      await c.start();
      await Promise.race([tally.all, within(boxMs)]);
      handlersDone = performance.now();
      const left = await untilDrained(q, deadline);
      drained = performance.now();
      boxed = left > 0;
      completed = n - left;
    },
    (c) => c.close(),
  );
  if (tally.duplicates > 0 || tally.strays > 0)
    throw new Error(`${tally.duplicates} jobs ran more than once, ${tally.strays} not of this phase`);
  const left = await q.outstanding();
  if (!boxed) {
    tally.check('process');
    if (left !== 0) throw new Error(`${left} jobs still outstanding`);
  } else if (n - left > tally.seen || n - left < completed) {
    // Time-boxed: no job recorded that the handler did not run, none recorded at the box's end
    // lost since. (A job fetched just before the stop may stay uncompleted: pg-boss writes
    // completions without awaiting them and stops without them.)
    throw new Error(`time box: ${tally.seen} jobs ran, ${completed} then ${n - left} recorded as completed`);
  }
  return {
    figures: { jobs: completed / meter.seconds },
    perOp: meter.perOp(completed, 'process'),
    info: {
      n,
      completed,
      seconds: meter.seconds,
      // From the last handler's start to the last completion recorded.
      completionLagSeconds: (drained - handlersDone) / 1000,
      ...(boxed ? { timeBoxedSeconds: boxMs / 1000 } : {}),
      ...Object.fromEntries(Object.entries(q.describe(settings)).map(([k, v]) => [`settings.${k}`, v])),
    },
    window: { startUs: meter.startUs, endUs: meter.endUs },
  };
}

/**
 * Enqueues `jobs` at `perSecond`, each on its own schedule; `sent[k]` = just before job k's call,
 * `acked[k]` = when the call returned.
 */
async function openLoop(
  p: Producer,
  jobs: number[],
  perSecond: number,
  sent: Float64Array,
  acked = new Float64Array(jobs.length),
) {
  const interval = 1000 / perSecond;
  const pending: Promise<unknown>[] = [];
  const errors: unknown[] = [];
  let maxLateMs = 0;
  const t0 = performance.now();
  for (let k = 0; k < jobs.length; k++) {
    const due = t0 + k * interval;
    const wait = due - performance.now();
    if (wait >= 1) await sleep(wait);
    const now = performance.now();
    maxLateMs = Math.max(maxLateMs, now - due);
    sent[k] = now;
    pending.push(
      p.enqueue(jobs[k]!).then(
        () => {
          acked[k] = performance.now();
        },
        (e) => errors.push(e),
      ),
    );
  }
  await Promise.all(pending);
  if (errors.length > 0) throw errors[0];
  return { maxLateMs };
}

const percentile = (sorted: Float64Array, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;

async function latency(spec: CaseSpec, q: QueueUnderTest, settings: Settings): Promise<CaseResult> {
  const seconds = spec.quick ? 3 : 10;
  const m = LATENCY_RATE * seconds;
  const warm = LATENCY_RATE / 2;
  const warmTally = new Tally(warm, WARM_BASE);
  const tally = new Tally(m);
  const c = await q.consumer(settings, (job) => (job >= WARM_BASE ? warmTally : tally).onStart(job));
  await c.start();
  const p = await q.producer();
  try {
    await sleep(300);
    await openLoop(p, range(WARM_BASE, warm), LATENCY_RATE, new Float64Array(warm));
    if ((await Promise.race([warmTally.all, within(30_000)])) === 'timeout')
      throw new Error(`warm-up: ${warmTally.seen} of ${warm} jobs ran`);
    await sleep(300);
    const meter = new PhaseMeter(undefined);
    const sent = new Float64Array(m);
    const acked = new Float64Array(m);
    meter.start();
    const { maxLateMs } = await openLoop(p, range(0, m), LATENCY_RATE, sent, acked);
    if ((await Promise.race([tally.all, within(60_000)])) === 'timeout')
      throw new Error(`${tally.seen} of ${m} jobs ran`);
    meter.stop();
    const left = await untilDrained(q, performance.now() + 30_000);
    if (left > 0) throw new Error(`${left} jobs still outstanding`);
    tally.check('latency');
    warmTally.check('latency warm-up');
    const ms = tally.starts.map((t, k) => t - sent[k]!).sort();
    // How long the enqueue call itself took: the part of the latency before the worker's.
    const call = acked.map((t, k) => t - sent[k]!).sort();
    return {
      figures: { p50: percentile(ms, 0.5), p99: percentile(ms, 0.99) },
      perOp: meter.perOp(m, 'latency'),
      info: {
        n: m,
        perSecond: LATENCY_RATE,
        maxMs: ms[ms.length - 1]!,
        meanMs: ms.reduce((a, b) => a + b, 0) / m,
        maxScheduleLateMs: maxLateMs,
        enqueueCallP50Ms: percentile(call, 0.5),
        enqueueCallP99Ms: percentile(call, 0.99),
        ...Object.fromEntries(Object.entries(q.describe(settings)).map(([k, v]) => [`settings.${k}`, v])),
      },
    };
  } finally {
    await p.close();
    await c.close();
  }
}

export async function peerShape(spec: CaseSpec): Promise<CaseResult> {
  const q = queueOf(spec);
  const observer = q.applications
    ? await PgObserver.open(spec.serverUrl, databaseOf(spec.databaseUrl))
    : undefined;
  try {
    await q.prepare();
    const result = await (async (): Promise<CaseResult> => {
      switch (spec.scenario) {
        case 'enqueue-one':
        case 'enqueue-batch':
          return enqueue(spec, q, observer);
        case 'process-defaults':
          return processBacklog(spec, q, observer, 'defaults');
        case 'process-tuned':
          return processBacklog(spec, q, observer, 'tuned');
        case 'latency':
          return latency(spec, q, q.latency);
        default:
          throw new Error(`${spec.scenario} is not a side-by-side scenario`);
      }
    })();
    result.info.queue = `${q.label} on ${q.store}`;
    return result;
  } finally {
    // A failed cleanup is reported, not thrown: it must not hide why the run failed.
    await q.cleanup().catch((e) => console.error(`cleanup of ${spec.variant} failed: ${e}`));
    await observer?.close();
  }
}
