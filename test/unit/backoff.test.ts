import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { backoffCeiling, fullJitterDelay } from '../../src/retry/backoff.js';

describe('full-jitter back-off', () => {
  it('stays within [0, min(cap, base · 2^n)] for every input', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2000 }),
        fc.integer({ min: 0, max: 100_000 }),
        fc.integer({ min: 0, max: 1_000_000 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (n, base, cap, r) => {
          const d = fullJitterDelay(n, { baseMs: base, capMs: cap }, () => r);
          // The bound as mathematics has it (a zero base gives zero, not 0 · ∞).
          const bound = base === 0 ? 0 : Math.min(cap, base * 2 ** n);
          return Number.isInteger(d) && d >= 0 && d <= bound && d <= cap;
        },
      ),
    );
  });

  it('grows with the attempt number until the cap (the seed: 0.2 s base, 10 s cap)', () => {
    const opts = { baseMs: 200, capMs: 10_000 };
    expect([0, 1, 2, 3, 4, 5, 6, 7].map((n) => backoffCeiling(n, opts))).toEqual([
      200, 400, 800, 1600, 3200, 6400, 10_000, 10_000,
    ]);
    expect(backoffCeiling(5000, opts)).toBe(10_000);
    // A zero base (retry at once) stays zero however many retries: never NaN.
    expect(backoffCeiling(2000, { baseMs: 0, capMs: 10_000 })).toBe(0);
  });

  it('uses the whole range: the jitter is not a fixed fraction', () => {
    const opts = { baseMs: 1000, capMs: 1000 };
    expect(fullJitterDelay(0, opts, () => 0)).toBe(0);
    expect(fullJitterDelay(0, opts, () => 0.999_999)).toBe(999);
  });
});
