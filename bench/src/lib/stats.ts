/**
 * @module bench/lib/stats
 * The summary of repeated runs: the median, the range, and the spread as half the range over
 * the median (±%). With three runs the median is the middle one, so one disturbed run moves it
 * less than it moves a mean.
 */

export interface Summary {
  median: number;
  min: number;
  max: number;
  /** Half the range, relative to the median (0.05 = ±5%). NaN with fewer than two runs. */
  spread: number;
  runs: number;
}

export function summarize(values: number[]): Summary | undefined {
  const xs = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (xs.length === 0) return undefined;
  const mid = Math.floor(xs.length / 2);
  const median = xs.length % 2 === 1 ? xs[mid]! : (xs[mid - 1]! + xs[mid]!) / 2;
  const min = xs[0]!;
  const max = xs[xs.length - 1]!;
  return { median, min, max, spread: xs.length < 2 ? Number.NaN : (max - min) / 2 / median, runs: xs.length };
}

export const median = (values: number[]): number => summarize(values)?.median ?? Number.NaN;
