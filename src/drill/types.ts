/**
 * @module drill/types
 * The data the drill produces and its report consumes: the run's settings, its phases, the
 * sampled time series, the invariants checked with their figures, and a summary. The running side
 * (drill/run.ts and friends) fills a `DrillResult`; the report side (drill/report/) renders it.
 */

export type PhaseName = 'baseline' | 'pressure' | 'stall' | 'crash' | 'recovery';

export interface DrillSettings {
  store: 'sqlite' | 'postgres';
  /** The store, with any password masked. */
  db: string;
  workers: number;
  durationMs: number;
  scenario: 'all' | 'crash' | 'pressure';
  startedAt: string;
  /** Set when the run used a deliberately broken configuration (test-only, `SLUICE_DRILL_BREAK`). */
  break?: string;
  /** Caps and objectives the invariants were checked against. */
  limits: {
    maxRunning: Record<string, Record<string, number>>; // class → tenant → cap
    slotsPerWorker: Record<string, number>; // class → slots
    latencyMultiple: number; // North's p95 under pressure ≤ multiple × baseline p95 (with a floor)
    latencyFloorMs: number;
    spendLimit: Record<string, number>; // budget key → limit per window
  };
}

export interface Phase {
  name: PhaseName;
  /** Milliseconds since the drill started. */
  startMs: number;
  endMs: number;
}

/** One sample of the deployment, every 100–250 ms. Times in ms since the drill started. */
export interface Sample {
  t: number;
  workersAlive: number;
  /** class → tenant → running attempts. */
  running: Record<string, Record<string, number>>;
  /** class → tenant → waiting operations. */
  waiting: Record<string, Record<string, number>>;
  /** Database connections in use (pool or server-side count; see the drill docs). */
  dbConnections: number;
  tempBytes: number;
  providerCalls: number;
  providerCharges: number;
  /** Submissions refused, by reason (cumulative). */
  rejections: Record<string, number>;
  retryDenials: number;
  /** North's interactive latency, submit → succeeded, of operations finished since the last sample. */
  northLatencyMs: number[];
}

export interface InvariantResult {
  name: string;
  pass: boolean;
  /** The measured figure, in words ("0 double charges over 812 succeeded charges"). */
  figure: string;
  /** More detail, shown when it fails (offending operations, samples…). */
  detail?: string;
}

export interface DrillResult {
  settings: DrillSettings;
  phases: Phase[];
  samples: Sample[];
  invariants: InvariantResult[];
  summary: {
    accepted: number;
    succeeded: number;
    failed: number;
    cancelled: number;
    dead: number;
    needsReconciliation: number;
    duplicatesAnswered: number;
    kills: number;
    northP95BaselineMs: number;
    northP95PressureMs: number;
  };
  /** True when every invariant passed. */
  passed: boolean;
}
