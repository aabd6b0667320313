/**
 * @module drill/config
 * What a drill run is asked to do (`DrillOptions`, from the command line) and the plan derived
 * from it: the phases and their lengths (the duration scales them), the load each phase drives,
 * and the objectives the invariants hold it to.
 */
import { redact } from '../cli/open-store.js';
import { InvalidArgument } from '../core/errors/index.js';
import type { DrillBreak } from './serve-config.js';
import type { DrillSettings, PhaseName } from './types.js';

export type Scenario = DrillSettings['scenario'];

export interface DrillOptions {
  /** A SQLite path (must not exist yet) or a `postgres://` URL; default a fresh SQLite file in a temp folder. */
  db?: string;
  /** Worker processes. Default 3. */
  workers: number;
  /** The phases' total planned length (recovery may run longer, up to `recoveryBoundMs`). */
  durationMs: number;
  scenario: Scenario;
  /** Where `result.json` and the report go. */
  reportDir: string;
  /** Keep the temp folder (SQLite file, logs) and the PostgreSQL schema afterwards. */
  keep?: boolean;
  /** North's p95 under pressure ≤ `latencyMultiple` × its baseline p95 … */
  latencyMultiple: number;
  /** … but the objective is never tighter than this. */
  latencyFloorMs: number;
  /** After pressure stops, how long the deployment may take to return to its baseline. */
  recoveryBoundMs: number;
  /** Test-only: run a deliberately broken configuration (serve-config.ts). */
  break?: DrillBreak;
  /** Where the live progress goes. Default stderr. */
  progress?: NodeJS.WritableStream & { isTTY?: boolean; columns?: number };
}

export const DEFAULTS = {
  workers: 3,
  durationMs: 60_000,
  scenario: 'all' as Scenario,
  reportDir: 'drill-report',
  latencyMultiple: 3,
  latencyFloorMs: 400,
  recoveryBoundMs: 20_000,
};

/** The shortest run whose phases are still long enough to measure anything. */
export const MIN_DURATION_MS = 15_000;
/** The longest drill, and the longest of its other durations: a day (each phase's timer stays far below 2^31 ms). */
export const MAX_DURATION_MS = 24 * 3_600_000;

/** `60s`, `1.5m`, `90000ms`, or a bare number of seconds; at least `min` ms. */
export function parseDuration(text: string, min = MIN_DURATION_MS, max = MAX_DURATION_MS): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?\s*$/.exec(text);
  if (!m) throw new InvalidArgument(`bad duration ${JSON.stringify(text)}: use e.g. 60s, 2m, 45000ms`);
  const n = Number(m[1]);
  const ms = m[2] === 'ms' ? n : m[2] === 'm' ? n * 60_000 : n * 1000;
  if (ms < min) throw new InvalidArgument(`${JSON.stringify(text)} is too short: at least ${min / 1000}s`);
  if (ms > max) throw new InvalidArgument(`${JSON.stringify(text)} is too long: at most ${max / 60_000}m`);
  return Math.round(ms);
}

export interface PlannedPhase {
  name: PhaseName;
  ms: number;
}

/** Each scenario's phases, as fractions of the duration. */
const PLANS: Record<Scenario, Array<[PhaseName, number]>> = {
  all: [
    ['baseline', 0.2],
    ['pressure', 0.25],
    ['stall', 0.15],
    ['crash', 0.2],
    ['recovery', 0.2],
  ],
  pressure: [
    ['baseline', 0.25],
    ['pressure', 0.35],
    ['stall', 0.2],
    ['recovery', 0.2],
  ],
  crash: [
    ['baseline', 0.3],
    ['crash', 0.45],
    ['recovery', 0.25],
  ],
};

/**
 * The shortest stall: twice the longest a charge attempt may last (its timeout and the abort
 * grace, 3 s), so that an attempt whose timeout is not enforced outlasts the bound and is seen.
 */
export const MIN_STALL_MS = 6000;

export function planPhases(scenario: Scenario, durationMs: number): PlannedPhase[] {
  const plan = PLANS[scenario];
  if (!plan) throw new InvalidArgument(`--scenario must be one of ${Object.keys(PLANS).join(', ')}`);
  return plan.map(([name, f]) => ({
    name,
    ms: name === 'stall' ? Math.max(MIN_STALL_MS, Math.round(durationMs * f)) : Math.round(durationMs * f),
  }));
}

/**
 * The load, per phase. Rates are per second; the generators pace themselves with timers (a load
 * generator's job) and jitter each interval by ±30% so requests do not arrive in lockstep.
 */
export const LOAD = {
  /** North's interactive charges: the whole run. */
  northPerSec: 5,
  northAmountCents: { min: 100, max: 999 },
  /** How often a North client polls its operation until it succeeds. */
  northPollMs: 25,
  /** Bulk's export flood: in pressure, and lighter while the provider stalls and workers die. */
  floodPerSec: { pressure: 12, stall: 4, crash: 4 } as Partial<Record<PhaseName, number>>,
  /** An export's size and how long its subprocess holds the file. */
  exportBytes: { min: 1024 * 1024, max: 3 * 1024 * 1024 },
  exportHoldMs: { min: 300, max: 1200 },
  /** One export in this many is larger than the kind's `maxTempBytes`, and must be stopped. */
  oversizedEvery: 8,
  oversizedBytes: 16 * 1024 * 1024,
  /** Resubmissions of accepted operations (same id, same body): pressure only. */
  duplicatesPerSec: 6,
  /** Bursts of concurrent identical submissions of one new id: pressure only. */
  burstsPerSec: 1,
  burstSize: 4,
  /** Bulk's large charges, which run into its spend budget (fewer while the provider stalls). */
  spendPerSec: { pressure: 3, stall: 1 } as Partial<Record<PhaseName, number>>,
  spendAmountCents: 2500,
  /** Clients that disconnect mid-request and then cancel: pressure only. */
  walkawaysPerSec: 2.5,
  /** Cancels of a running export (its subprocess must be stopped): pressure only. */
  runningCancelsPerSec: 0.7,
  /** Random SIGKILLs of worker processes in the crash phase (at least one). */
  killsPerSec: 0.5,
};

/** A settings record for the result: the store with any password masked. */
export function maskDb(db: string): string {
  if (!/^postgres(ql)?:\/\//.test(db)) return db;
  try {
    const u = new URL(db);
    u.searchParams.delete('application_name');
    // The password, and one given as a query parameter, as the CLI hides them.
    return redact(u.toString());
  } catch {
    return 'postgres://…';
  }
}
