import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  assertPlainJson,
  canonicalJson,
  digestOfCanonical,
  MAX_JSON_DEPTH,
  operationDigest,
} from '../../src/core/digest.js';
import { isInputNotJson } from '../../src/core/errors/index.js';

describe('operation digest', () => {
  it('ignores key order and number spelling (RFC 8785)', () => {
    const a = operationDigest('charge', { tenant: 'North', invoice: 7, amount_cents: 5000 });
    const b = operationDigest('charge', { amount_cents: 5.0e3, invoice: 7.0, tenant: 'North' });
    expect(a).toBe(b);
    expect(a).toMatch(/^[0-9a-f]{64}$/);
  });

  it('changes with any material field, and with the kind', () => {
    const base = operationDigest('charge', { invoice: 7, amount_cents: 5000 });
    expect(operationDigest('charge', { invoice: 7, amount_cents: 5001 })).not.toBe(base);
    expect(operationDigest('charge', { invoice: 8, amount_cents: 5000 })).not.toBe(base);
    expect(operationDigest('refund', { invoice: 7, amount_cents: 5000 })).not.toBe(base);
  });

  it('computes the same digest from pre-canonicalized input (the submit fast path)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.constantFrom('charge', 'export', 'a.b-c_d'), (input, kind) => {
        const value = JSON.parse(JSON.stringify(input));
        return digestOfCanonical(kind, canonicalJson(value)) === operationDigest(kind, value);
      }),
    );
  });

  it('refuses what is not plain JSON', () => {
    const bads = [
      undefined,
      () => 1,
      1n,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      new Date(),
      { a: undefined },
      [1, Symbol('x')],
    ];
    for (const [i, bad] of bads.entries()) {
      let error: unknown;
      try {
        assertPlainJson(bad);
      } catch (e) {
        error = e;
      }
      expect(isInputNotJson(error), `case ${i}`).toBe(true);
    }
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => assertPlainJson(cyclic)).toThrow(/cycle/);
    expect(() => assertPlainJson({ a: [1, 'x', null, true, { b: 2 }] })).not.toThrow();
  });

  it('names the class of an object that is not plain, which says what to do about it', () => {
    const reason = (value: unknown) => {
      try {
        assertPlainJson(value);
      } catch (e) {
        return isInputNotJson(e) ? e.reason : String(e);
      }
      return 'taken';
    };
    class Charge {}
    expect([
      reason({ at: new Date(0) }),
      reason([new Map()]),
      reason(new Charge()),
      reason({ a: Object.create({}) }),
    ]).toEqual([
      'at is a Date, not a plain object',
      '[0] is a Map, not a plain object',
      '(root) is a Charge, not a plain object',
      'a is not a plain object',
    ]);
  });

  it(`takes nesting ${MAX_JSON_DEPTH} levels deep and refuses one more, however deep, as not JSON`, () => {
    const nested = (levels: number): unknown => {
      let v: unknown = 1;
      for (let i = 0; i < levels; i++) v = i % 2 ? [v] : { a: v };
      return v;
    };
    expect(() => assertPlainJson(nested(MAX_JSON_DEPTH))).not.toThrow();
    for (const levels of [MAX_JSON_DEPTH + 1, 100_000]) {
      let error: unknown;
      try {
        assertPlainJson(nested(levels));
      } catch (e) {
        error = e;
      }
      // Not a RangeError from an overflowed stack: the engine's stable code, naming the bound.
      expect(isInputNotJson(error), `${levels} levels`).toBe(true);
      expect((error as Error).message).toContain(`more than ${MAX_JSON_DEPTH} levels deep`);
    }
  });
});

describe('the JSON size bound of the plain-JSON check', () => {
  it('is never below the bytes of the JSON text', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(assertPlainJson(value)).toBeGreaterThanOrEqual(Buffer.byteLength(JSON.stringify(value)));
      }),
      { numRuns: 500 },
    );
    // The texts that take the most bytes a unit: control characters and the longest numbers.
    for (const value of [
      '\u0000\u001f',
      -0.0000012345678901234567,
      -1.7976931348623157e308,
      ['é', { 'k\n': 5e-324 }],
    ])
      expect(assertPlainJson(value)).toBeGreaterThanOrEqual(Buffer.byteLength(JSON.stringify(value)));
  });
});
