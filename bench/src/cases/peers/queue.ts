/**
 * @module bench/cases/peers/queue
 * What the side-by-side scenarios need from a job queue, Sluice or a peer: a producer that
 * enqueues one job or a batch, a consumer that runs a no-op handler with the library's defaults
 * or its documented tuning, and a way to tell how many jobs the queue itself has recorded as
 * completed. Every queue is driven by the same code (peer-shapes.ts), so they are timed alike.
 */

/** A worker at the library's documented defaults, or tuned as its documentation advises. */
export type Settings = 'defaults' | 'tuned';

/** The concurrency of the `defaults` runs, where the library's API takes one. */
export const DEFAULT_CONCURRENCY = 10;

export interface Producer {
  enqueue(job: number): Promise<void>;
  enqueueBatch(jobs: number[]): Promise<void>;
  close(): Promise<void>;
}

export interface Consumer {
  /** Starts taking jobs (the timed window of a process run starts just before). */
  start(): Promise<void>;
  /** Stops gracefully (running handlers finish) and closes its connections. */
  close(): Promise<void>;
}

export interface QueueUnderTest {
  /** As printed: the library and, for peers, its version. */
  readonly label: string;
  readonly store: 'PostgreSQL' | 'SQLite' | 'Redis';
  /**
   * PostgreSQL `application_name` prefixes of this queue's connections (the server counters of
   * a phase are read for these); undefined where the store is not PostgreSQL.
   */
  readonly applications: string[] | undefined;
  /**
   * The settings of its latency runs: of its two, the one with the lower latency that keeps up
   * with the offered rate.
   */
  readonly latency: Settings;
  /** Its schema or key space, migrations, queue: once per case run, before anything is timed. */
  prepare(): Promise<void>;
  producer(): Promise<Producer>;
  /** The handler calls `onStart(job)` first thing, then returns. */
  consumer(settings: Settings, onStart: (job: number) => void): Promise<Consumer>;
  /**
   * Jobs enqueued and not yet recorded as completed. Read from the queue's own store where the
   * library reports a job done before its completion is written (graphile-worker batches
   * completions, pg-boss does not await them), from the completion event where that event
   * follows the write (Sluice's `attempt`).
   */
  outstanding(): Promise<number>;
  /** The settings a run used, exactly, for the results file. */
  describe(settings: Settings): Record<string, string | number>;
  /** Removes what `prepare` and the runs created. */
  cleanup(): Promise<void>;
}

/** The payload every queue carries: the job's number (what the handler reports) and ~40 bytes more. */
export const payloadOf = (job: number) => ({ job, amount_cents: 100 + (job % 900), note: 'bench' });

/** A PostgreSQL identifier from the case run's tag (schema names take no `-`). */
export const identifierOf = (tag: string) =>
  tag
    .toLowerCase()
    .replace(/[^a-z0-9_]/g, '_')
    .slice(0, 48);

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
