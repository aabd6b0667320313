/**
 * @module drill/report/scale
 * The arithmetic under the charts: linear scales, "nice" ticks (1-2-5 steps for values, whole
 * seconds and minutes for time, round numbers of the binary unit for bytes), and tick labels in
 * the axis's unit. Pure and total: any input, including empty, constant, huge or non-finite
 * ranges, gives finite ticks, so nothing downstream has to guard against `NaN`.
 */
import { byteUnit, formatCompact, formatMs } from './format.js';

/** How an axis's values are labelled. `offset`: milliseconds since the start, shown as time. */
export type ValueFormat = 'count' | 'bytes' | 'ms' | 'offset';

/** Values are clamped to ±LIMIT, so `(v - min) / (max - min)` can never overflow. */
const LIMIT = 1e300;

export interface Ticks {
  /** The axis range (for a `nice` axis, extended to a whole step). */
  min: number;
  max: number;
  values: number[];
}

export function clampValue(v: number): number {
  return Math.max(-LIMIT, Math.min(LIMIT, v));
}

/** Min and max of finite values, by a loop: a spread (`Math.min(...xs)`) overflows the stack on long runs. */
export function extent(values: Iterable<number>): { min: number; max: number } | null {
  let min = Number.POSITIVE_INFINITY;
  let max = Number.NEGATIVE_INFINITY;
  for (const v of values) {
    if (!Number.isFinite(v)) continue;
    if (v < min) min = v;
    if (v > max) max = v;
  }
  return min <= max ? { min, max } : null;
}

/** A 1-2-5 step near `raw`; at least 1 for `integer` axes. */
function niceStep(raw: number, integer: boolean): number {
  if (!(raw > 0) || !Number.isFinite(raw)) return 1;
  const exponent = Math.floor(Math.log10(raw));
  const base = 10 ** exponent;
  const fraction = raw / base;
  const nice = fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10;
  const step = nice * base;
  return integer ? Math.max(1, Math.round(step)) : step;
}

// Steps for time axes in ms: whole seconds, then 15 s, 30 s, minutes, 5/15/30 minutes, hours.
const TIME_STEPS = [
  1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 15_000, 30_000, 60_000, 120_000, 300_000,
  600_000, 900_000, 1_800_000, 3_600_000,
];

/**
 * Ticks for a value axis (`extend`: the range grows to a whole step, so a value axis starts and
 * ends on a labelled tick) or a time axis (the range stays as given; steps from `TIME_STEPS`).
 */
export function niceTicks(
  min: number,
  max: number,
  options: { target?: number; integer?: boolean; extend?: boolean; time?: boolean } = {},
): Ticks {
  const target = options.target ?? 5;
  let lo = Number.isFinite(min) ? clampValue(min) : 0;
  let hi = Number.isFinite(max) ? clampValue(max) : lo + 1;
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi === lo) hi = lo + (lo === 0 ? 1 : Math.abs(lo));
  const raw = (hi - lo) / target;
  let step: number;
  if (options.time) {
    // The time step nearest to the raw one (on a log scale), so a 60 s run gets 5 s ticks.
    step =
      raw > TIME_STEPS[TIME_STEPS.length - 1]!
        ? niceStep(raw / 3_600_000, true) * 3_600_000
        : TIME_STEPS.reduce((best, s) =>
            Math.abs(Math.log(s / raw)) < Math.abs(Math.log(best / raw)) ? s : best,
          );
  } else {
    step = niceStep(raw, options.integer ?? false);
  }
  if (options.extend !== false && !options.time) {
    const extendedLo = Math.floor(lo / step) * step;
    const extendedHi = Math.ceil(hi / step) * step;
    if (Number.isFinite(extendedLo)) lo = extendedLo;
    if (Number.isFinite(extendedHi)) hi = extendedHi;
  }
  const values: number[] = [];
  const first = Math.ceil(lo / step);
  for (let k = first; values.length < 1000; k++) {
    const v = k * step;
    if (!Number.isFinite(v) || v > hi + step * 1e-9) break;
    values.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  }
  return { min: lo, max: hi, values };
}

/** A tick label in the axis's format; `scaleMax` fixes the unit so every tick uses the same one. */
export function formatTick(value: number, format: ValueFormat, scaleMax: number): string {
  if (value === 0) return format === 'offset' ? '0 s' : '0';
  switch (format) {
    case 'count':
      return formatCompact(value);
    case 'bytes': {
      const { unit, size } = byteUnit(scaleMax);
      return `${formatCompact(value / size)} ${unit}`;
    }
    case 'ms':
      return formatMs(value);
    case 'offset': {
      if (scaleMax < 120_000) return `${formatCompact(value / 1000)} s`;
      const minutes = Math.floor(value / 60_000);
      const seconds = Math.round((value % 60_000) / 1000);
      return `${minutes}:${String(seconds).padStart(2, '0')}`;
    }
  }
}

export function yTicks(min: number, max: number, format: ValueFormat): Ticks {
  if (format === 'bytes') {
    // Ticks at round numbers of the unit the axis is labelled in (0.5 MiB, 1 MiB…), not of bytes.
    const { size } = byteUnit(Math.max(Math.abs(min), Math.abs(max)));
    const t = niceTicks(min / size, max / size, { integer: size === 1 });
    return { min: t.min * size, max: t.max * size, values: t.values.map((v) => v * size) };
  }
  return niceTicks(min, max, { integer: format === 'count' });
}

export type Scale = (value: number) => number;

export function linearScale(d0: number, d1: number, r0: number, r1: number): Scale {
  const span = d1 - d0;
  return (value) => {
    if (!(span > 0) || !Number.isFinite(span)) return (r0 + r1) / 2;
    return r0 + ((clampValue(value) - d0) / span) * (r1 - r0);
  };
}
