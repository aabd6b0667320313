/**
 * @module retry/backoff
 * Full-jitter exponential back-off (AWS Architecture Blog, 2015) as a pure function:
 * `delay = random(0, min(cap, base · 2^attempt))`. Jitter spreads retries of many operations
 * that failed together, so a recovering dependency is not hit by synchronised waves.
 */

export interface BackoffOptions {
  /** Base delay in milliseconds (the seed's 0.2 s by default). */
  baseMs: number;
  /** Upper bound of any single delay in milliseconds (the seed's 10 s by default). */
  capMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 200, capMs: 10_000 };

/** The largest delay full jitter may choose after the `retryNumber`-th failure (0-based). */
export function backoffCeiling(retryNumber: number, options: BackoffOptions): number {
  // The exponent is clamped: 2 ** 1100 is Infinity, and 0 · Infinity (a zero base) is NaN.
  // 2^52 times any positive base is past every sensible cap.
  return Math.min(options.capMs, options.baseMs * 2 ** Math.min(52, Math.max(0, retryNumber)));
}

/**
 * The delay before the next attempt, after `retryNumber` failures counted from 0.
 * `random` returns a number in [0, 1), injectable for tests.
 */
export function fullJitterDelay(
  retryNumber: number,
  options: BackoffOptions,
  random: () => number = Math.random,
): number {
  return Math.floor(random() * backoffCeiling(retryNumber, options));
}
