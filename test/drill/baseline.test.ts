/**
 * The levels "back to baseline" is judged by (drill/baseline.ts), at their edges: the connections
 * level allows 10% above the baseline's maximum and never fewer than two; the baseline's first
 * second (warm-up) does not count.
 */
import { describe, expect, it } from 'vitest';
import { atBaseline, baselineLevels, WARMUP_MS } from '../../src/drill/baseline.js';
import type { Observation } from '../../src/drill/sampler.js';
import type { PhaseName } from '../../src/drill/types.js';
import { zeroSample } from '../helpers/drill-sample.js';

/** What the levels read of an observation: its phase and its sample. */
function observation(t: number, phase: PhaseName, dbConnections: number): Observation {
  return { phase, sample: zeroSample(t, { workersAlive: 3, dbConnections }) } as unknown as Observation;
}

const baseline = (...counts: number[]) =>
  counts.map((n, i) => observation(WARMUP_MS + i * 200, 'baseline', n));

describe('drill baseline levels: database connections', () => {
  it.each([
    [1, 3],
    [10, 12],
    [20, 22],
    [21, 24],
    [35, 39],
  ])('a baseline maximum of %i allows %i', (max, level) => {
    const levels = baselineLevels(baseline(1, max, 1), 0)!;
    expect(levels.max.connections).toBe(max);
    expect(levels.level.connections).toBe(level);
    expect(atBaseline('connections', observation(99_000, 'recovery', level), levels)).toBe(true);
    expect(atBaseline('connections', observation(99_000, 'recovery', level + 1), levels)).toBe(false);
  });

  it('leaves the warm-up second out of the maximum', () => {
    const warm = observation(WARMUP_MS - 1, 'baseline', 40);
    const levels = baselineLevels([warm, ...baseline(5, 6)], 0)!;
    expect(levels.max.connections).toBe(6);
  });

  it('has no levels without a sample after the warm-up', () => {
    expect(baselineLevels([observation(WARMUP_MS - 1, 'baseline', 4)], 0)).toBeUndefined();
  });
});
