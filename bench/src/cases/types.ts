/**
 * @module bench/cases/types
 * What the runner hands a case (one scenario on one store or variant, run once in a process of
 * its own) and what the case reports back.
 */

export const SCENARIOS = [
  'limit-pg',
  'limit-sqlite',
  'submit-one',
  'process-effect',
  'process-plain',
  // Side by side with the peer queues (peer-shapes.ts).
  'enqueue-one',
  'enqueue-batch',
  'process-defaults',
  'process-tuned',
  'latency',
  'http-submit',
  'admission-caps',
  'backlog',
] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

/** Too slow to repeat every round (it builds a million-operation backlog): run in the first only. */
export const ONCE_PER_RUN: ReadonlySet<ScenarioName> = new Set(['backlog']);

export interface CaseSpec {
  scenario: ScenarioName;
  /**
   * limit-pg: client count ('1', '16'); limit-sqlite: 'FULL' | 'NORMAL'; side by side with the
   * peers: the queue ('sluice-pg', 'sluice-sqlite', 'graphile', 'pg-boss', 'bullmq'); the
   * others: 'sqlite' | 'pg'.
   */
  variant: string;
  quick: boolean;
  /** Operations (or commits) to time; each case has its own default. */
  ops?: number;
  /** Tenants the operations are spread over (round robin). */
  tenants: number;
  /** Concurrent submitters in the process-* scenarios' submit phase. */
  submitters: number;
  /** The server's admin database (counters are read there). */
  serverUrl: string;
  /** The bench run's own database. */
  databaseUrl: string;
  /** A folder of this case run (SQLite files). */
  dir: string;
  /** Unique per case run: the PostgreSQL schema name. */
  tag: string;
  /** What-if runs only: worker slots per class instead of the engine's default. */
  slots?: number;
  /** What-if runs only: the PostgreSQL store's pool size instead of its default. */
  poolSize?: number;
  /** Diagnostic runs: sample the server backends' wait events during the process phase. */
  sampleWaits?: boolean;
  /** process-*: run the warm-up and submit phase only, the process phase only, or all (default). */
  phase: 'all' | 'submit' | 'process';
  /** backlog: waiting operations to build before the claim is timed. */
  backlog?: number;
}

export interface CaseResult {
  /** Rates (operations or commits per second), by figure name. */
  figures: Record<string, number>;
  /** Measured per-operation costs, by `<phase>.<counter>`. */
  perOp: Record<string, number>;
  /** Facts of the run: operation counts, seconds. */
  info: Record<string, number | string>;
  /** process phase: its start and end on the monotonic clock, in µs (to cut a CPU profile). */
  window?: { startUs: number; endUs: number };
}
