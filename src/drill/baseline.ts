/**
 * @module drill/baseline
 * The deployment's baseline, and what "back to the baseline" means, metric by metric. The
 * recovery phase waits on these tests (drill/run.ts) and the invariants judge by them
 * (drill/invariants/service.ts), so both mean the same thing.
 *
 * The levels come from the baseline phase's samples (its first second left out):
 * - **temporary storage**: at most the baseline's maximum (North's charges use none: 0 bytes);
 * - **running**: the pressure tenant (Bulk) has nothing running or waiting, and the total running
 *   is at most the baseline's maximum plus one — North's steady load is a random process, and a
 *   second of its charges overlapping is not pressure;
 * - **database connections**: at most the baseline's maximum plus 10% (at least two): pools open
 *   connections on demand and close them after 10 s idle, so each keeps the peak concurrency of
 *   its last 10 s. A short drill's baseline (7 s after the warm-up in a 40 s run) is shorter than
 *   that window and under-reads the steady state of four pools by one now and then (seen: 12
 *   against a level of 11 after 20 s of North's load alone); one more is that jitter, not a leak.
 */
import type { Observation } from './sampler.js';
import { DRILL_TENANTS } from './serve-config.js';

/** The start of the baseline phase left out of its levels: processes and pools warming up. */
export const WARMUP_MS = 1000;

export type Metric = 'temp' | 'running' | 'connections';

export interface BaselineLevels {
  /** The baseline's maximum of each metric. */
  max: Record<Metric, number>;
  /** The level each metric must be back at or below. */
  level: Record<Metric, number>;
}

const sum = (r: Record<string, Record<string, number>>) =>
  Object.values(r).reduce((s, t) => s + Object.values(t).reduce((a, b) => a + b, 0), 0);

/** Running + waiting of the pressure tenant, all classes. */
export function pressureWork(o: Observation): number {
  let n = 0;
  for (const t of Object.values(o.sample.running)) n += t[DRILL_TENANTS.bulk] ?? 0;
  for (const t of Object.values(o.sample.waiting)) n += t[DRILL_TENANTS.bulk] ?? 0;
  return n;
}

export const VALUE: Record<Metric, (o: Observation) => number> = {
  temp: (o) => o.sample.tempBytes,
  running: (o) => sum(o.sample.running),
  connections: (o) => o.sample.dbConnections,
};

/** Levels from the baseline phase's samples; undefined when there are none after the warm-up. */
export function baselineLevels(
  observations: Observation[],
  baselineStartMs: number,
): BaselineLevels | undefined {
  const base = observations.filter(
    (o) => o.phase === 'baseline' && o.sample.t >= baselineStartMs + WARMUP_MS,
  );
  if (base.length === 0) return undefined;
  const max = {
    temp: Math.max(...base.map(VALUE.temp)),
    running: Math.max(...base.map(VALUE.running)),
    connections: Math.max(...base.map(VALUE.connections)),
  };
  return {
    max,
    level: {
      temp: max.temp,
      running: max.running + 1,
      connections: max.connections + Math.max(2, Math.ceil(max.connections * 0.1)),
    },
  };
}

/** Whether a sample is back at the baseline for `metric`. */
export function atBaseline(metric: Metric, o: Observation, levels: BaselineLevels): boolean {
  if (metric === 'running' && pressureWork(o) > 0) return false;
  return VALUE[metric](o) <= levels.level[metric];
}
