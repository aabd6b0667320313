/**
 * @module drill/invariants/service
 * The service under pressure and after it: North's latency objective, attempts against the
 * stalled provider bounded by their timeout, the return to baseline (temporary storage, running
 * attempts, database connections), and the deployment itself running as driven.
 */
import { atBaseline, type BaselineLevels, baselineLevels, type Metric, VALUE } from '../baseline.js';
import { DRILL_CHARGE_LIMITS } from '../serve-config.js';
import type { InvariantResult, PhaseName } from '../types.js';
import {
  bytes,
  countBy,
  describeCounts,
  type Evidence,
  int,
  listed,
  ms,
  percentile,
  phase,
  secs,
  WARMUP_MS,
} from './evidence.js';

/**
 * North's latencies of operations submitted in a phase: the baseline without its warm-up; a
 * later phase without its last `tailMs` (an operation submitted then may run into the next phase).
 */
export function northLatencies(e: Pick<Evidence, 'north' | 'phases'>, name: PhaseName, tailMs = 0): number[] {
  const p = e.phases.find((x) => x.name === name);
  const from = name === 'baseline' && p ? p.startMs + WARMUP_MS : Number.NEGATIVE_INFINITY;
  const to = p ? p.endMs - tailMs : Number.POSITIVE_INFINITY;
  return e.north
    .filter(
      (r) => r.phase === name && r.submittedAt >= from && r.submittedAt <= to && r.latencyMs !== undefined,
    )
    .map((r) => r.latencyMs!);
}

/**
 * North's objective and the measurements it is held to. Charges submitted in the last
 * `objective` ms of the pressure phase are left out: the stall that follows could catch them
 * before their objective elapsed, and that is the stall's doing, not the pressure's.
 */
export function northMeasurement(
  e: Pick<Evidence, 'north' | 'phases' | 'latencyMultiple' | 'latencyFloorMs'>,
) {
  const baseline = northLatencies(e, 'baseline');
  const p95Baseline = percentile(baseline, 95);
  const objectiveMs = Math.max(e.latencyMultiple * p95Baseline, e.latencyFloorMs);
  const pressure = northLatencies(e, 'pressure', objectiveMs);
  return { baseline, pressure, p95Baseline, p95Pressure: percentile(pressure, 95), objectiveMs };
}

export function northObjectiveMet(e: Evidence): InvariantResult | undefined {
  if (!phase(e, 'pressure')) return undefined;
  const m = northMeasurement(e);
  const submitted = e.north.filter((r) => r.phase === 'pressure');
  const refused = submitted.filter((r) => r.rejected);
  const notServed = submitted.filter((r) => !r.rejected && r.state !== 'succeeded');
  const enough = m.baseline.length >= 5 && m.pressure.length >= 5;
  const pass = enough && m.p95Pressure <= m.objectiveMs && refused.length === 0 && notServed.length === 0;
  return {
    name: "North's interactive latency objective under pressure",
    pass,
    figure:
      `p95 ${ms(m.p95Pressure)} under pressure vs ${ms(m.p95Baseline)} at baseline; objective ≤ ${ms(m.objectiveMs)} ` +
      `(max(${e.latencyMultiple} × baseline, ${ms(e.latencyFloorMs)})); ${int(submitted.length)} submitted under ` +
      `pressure, ${int(submitted.length - refused.length - notServed.length)} succeeded, ${int(refused.length)} refused`,
    detail:
      'Submit → succeeded as the polling client saw it, for North charges submitted during the pressure phase ' +
      `(${int(m.pressure.length)} measured; those submitted in its last ${ms(m.objectiveMs)} are left out, as the stall ` +
      `may catch them), against those submitted during the baseline (${int(m.baseline.length)}, its first ` +
      `${WARMUP_MS} ms left out), same run. Every North charge submitted under pressure must be accepted and succeed.` +
      (enough
        ? ''
        : ` Too few measurements (${m.baseline.length} baseline, ${m.pressure.length} under pressure).`) +
      (refused.length ? ` Refused: ${describeCounts(countBy(refused, (r) => r.rejected!))}.` : '') +
      (notServed.length
        ? ` Not succeeded: ${listed(notServed.map((r) => `${r.id} ${r.state ?? '?'}`))}.`
        : ''),
  };
}

/** The engine's grace for a handler that ignores its aborted signal, plus scheduling slack. */
const ABORT_SLACK_MS = 1500;

export function stallBounded(e: Evidence): InvariantResult | undefined {
  const stall = phase(e, 'stall');
  if (!stall) return undefined;
  const timeout = DRILL_CHARGE_LIMITS.attemptTimeoutMs;
  const bound = timeout + ABORT_SLACK_MS;
  let hit = 0;
  let longest = 0;
  const over: string[] = [];
  for (const [k, attempts] of e.chargeAttempts) {
    for (const a of attempts) {
      if (a.outcome === 'lease-expired' || a.outcome === 'released') continue;
      const start = a.startedAt - e.t0;
      const end = a.endedAt - e.t0;
      if (end < stall.startMs || start > stall.endMs) continue;
      const d = a.endedAt - a.startedAt;
      longest = Math.max(longest, d);
      if (a.error?.code === 'attempt-timeout') hit++;
      if (d > bound) over.push(`${k} attempt ${a.attempt}: ${ms(d)}`);
    }
  }
  const pass = hit > 0 && over.length === 0;
  return {
    name: 'Stalled provider: attempts stopped at their timeout, slots released',
    pass,
    figure:
      hit === 0
        ? 'no charge attempt ran into the stalled provider: nothing was proven'
        : `${int(hit)} charge attempts timed out against the stalled provider; longest attempt ${ms(longest)} ` +
          `(timeout ${ms(timeout)}, bound ${ms(bound)})`,
    detail:
      'The stub held every request during the stall. Each charge attempt overlapping it must end within its ' +
      `attempt timeout plus the abort grace; its slot is then free for the next (attempt history from the store).` +
      (over.length ? ` Over the bound: ${listed(over)}` : ''),
  };
}

interface Level {
  metric: Metric;
  name: string;
  unit: (n: number) => string;
  /** What "back" means for it, in words, given the levels. */
  means: (l: BaselineLevels) => string;
}

function backToBaseline(e: Evidence, level: Level, what: string): InvariantResult {
  const recovery = phase(e, 'recovery');
  const levels = baselineLevels(e.observations, phase(e, 'baseline')?.startMs ?? 0);
  const rec = e.observations.filter((o) => o.phase === 'recovery');
  if (!recovery || !levels || rec.length === 0) {
    return { name: level.name, pass: false, figure: 'no baseline or recovery samples: nothing was proven' };
  }
  const value = VALUE[level.metric];
  const peak = Math.max(0, ...e.observations.filter((o) => o.phase !== 'baseline').map(value));
  // The first recovery sample from which every later one is back at the baseline.
  let from = rec.length;
  while (from > 0 && atBaseline(level.metric, rec[from - 1]!, levels)) from--;
  const back = from < rec.length ? rec[from]!.sample.t - recovery.startMs : undefined;
  const pass = back !== undefined && back <= e.recoveryBoundMs;
  const end = value(rec.at(-1)!);
  return {
    name: level.name,
    pass,
    figure:
      back === undefined
        ? `not back by the end of recovery: ${level.unit(end)} (${level.means(levels)}; peak ${level.unit(peak)})`
        : `back ${secs(back)} after pressure stopped (bound ${secs(e.recoveryBoundMs)}): ${level.means(levels)}; ` +
          `peak ${level.unit(peak)}`,
    detail: `${what} Back means: from that sample to the end of the recovery phase, every sample is at the level.`,
  };
}

export function tempBack(e: Evidence): InvariantResult {
  return backToBaseline(
    e,
    {
      metric: 'temp',
      name: 'Temporary storage back to baseline',
      unit: bytes,
      means: (l) => `≤ ${bytes(l.level.temp)} (the baseline's maximum)`,
    },
    "Bytes under the workers' temp root; a killed worker's folder is swept by its replacement.",
  );
}

export function runningBack(e: Evidence): InvariantResult {
  return backToBaseline(
    e,
    {
      metric: 'running',
      name: 'Running attempts back to baseline',
      unit: int,
      means: (l) =>
        `Bulk has nothing running or waiting, and ≤ ${int(l.level.running)} running (baseline max ${int(l.max.running)} + 1)`,
    },
    "From the queue counters. North keeps its steady load throughout, so one more of its charges than the baseline's " +
      'maximum may overlap; none of the pressure may remain.',
  );
}

export function connectionsBack(e: Evidence): InvariantResult {
  const back = backToBaseline(
    e,
    {
      metric: 'connections',
      name: 'Database connections back to baseline',
      unit: int,
      means: (l) =>
        `≤ ${int(l.level.connections)} (baseline max ${int(l.max.connections)} + 10%, at least 2)`,
    },
    `Measured as ${e.connectionsMethod}. Pools open connections on demand and close them after 10 s idle, so ` +
      "the level allows 10% (at least two) above the baseline's maximum. In every sample the count must also stay " +
      "within what the deployment's processes may open (each process's pool and LISTEN connection; a killed " +
      "process's for a second).",
  );
  const over = e.observations
    .filter((o) => o.sample.dbConnections > o.connectionBound)
    .map((o) => `t=${secs(o.sample.t)}: ${o.sample.dbConnections} > ${o.connectionBound}`);
  const peakBound = Math.max(0, ...e.observations.map((o) => o.connectionBound));
  return {
    ...back,
    pass: back.pass && over.length === 0,
    figure: `${back.figure}; never over the processes' pools (at most ${peakBound})${over.length ? `: ${over.length} samples over` : ''}`,
    detail: `${back.detail}${over.length ? ` Over the bound: ${listed(over)}` : ''}`,
  };
}

/** The deployment itself: no process died unless the drill killed it, the sampler never failed. */
export function deploymentHealthy(e: Evidence): InvariantResult {
  const k = e.deployment.kills;
  const pass = e.runErrors.length === 0 && e.observations.length > 0;
  return {
    name: 'The deployment ran as driven',
    pass,
    figure:
      `${e.deployment.incarnations} worker processes started; ${k.byDrill} SIGKILLed by the drill, ` +
      `${k.byFailpoint} killed at failpoints, ${k.other} died otherwise; ${e.observations.length} samples; ` +
      `${e.runErrors.length} problems`,
    detail:
      'A process that dies on its own, a replacement that does not start, or a sample that cannot be read ' +
      `would make every other figure doubtful.${e.runErrors.length ? ` Problems: ${listed(e.runErrors, 8)}` : ''}`,
  };
}
