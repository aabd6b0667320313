import { describe, expect, it } from 'vitest';
import { bounded, MAX_TIMER_MS } from '../../src/core/bounds.js';

describe('bounded', () => {
  it('takes the fallback when the value is left out, and the value at both edges of its range', () => {
    expect(bounded('x', undefined, 7, { min: 1, max: 10 })).toBe(7);
    expect(bounded('x', 1, 7, { min: 1, max: 10 })).toBe(1);
    expect(bounded('x', 10, 7, { min: 1, max: 10 })).toBe(10);
    expect(bounded('x', MAX_TIMER_MS, 7, { min: 0, max: MAX_TIMER_MS })).toBe(MAX_TIMER_MS);
  });

  it('refuses one step past each edge, fractions where whole numbers are asked, and non-numbers', () => {
    const refused = (value: unknown, range: Parameters<typeof bounded>[3]) => {
      try {
        bounded('x', value as number, 0, range);
        return undefined;
      } catch (error) {
        return error as { code: string; message: string };
      }
    };
    expect(refused(0, { min: 1, max: 10 })).toMatchObject({
      code: 'invalid-argument',
      message: 'x must be a number from 1 to 10, not 0',
    });
    expect(refused(10.5, { min: 1, max: 10 })?.code).toBe('invalid-argument');
    expect(refused(MAX_TIMER_MS + 1, { min: 0, max: MAX_TIMER_MS })?.code).toBe('invalid-argument');
    expect(refused(2.5, { min: 0, integer: true })?.message).toBe('x must be a whole number ≥ 0, not 2.5');
    for (const bad of [Number.NaN, Number.POSITIVE_INFINITY, '5', null, true])
      expect(refused(bad, { min: 0 })?.code).toBe('invalid-argument');
    expect(refused(3, { min: 0, integer: true })).toBeUndefined();
  });
});
