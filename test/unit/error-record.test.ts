/**
 * An error as stored (core/errors toErrorRecord): never a throw, whatever was thrown, and details
 * kept as JSON up to MAX_ERROR_DETAILS_BYTES, at the edge and one byte over.
 */
import { describe, expect, it } from 'vitest';
import { Ambiguous, MAX_ERROR_DETAILS_BYTES, Permanent, Retryable, toErrorRecord } from '../../src/index.js';

/** Details whose JSON is exactly `bytes` long: `{"s":"xxx…"}` is 8 bytes around the string. */
const detailsOf = (bytes: number) => ({ s: 'x'.repeat(bytes - 8) });

describe('toErrorRecord', () => {
  it('keeps details of exactly the limit and replaces one byte more', () => {
    expect(JSON.stringify(detailsOf(MAX_ERROR_DETAILS_BYTES)).length).toBe(MAX_ERROR_DETAILS_BYTES);
    const at = toErrorRecord(new Permanent('at', { details: detailsOf(MAX_ERROR_DETAILS_BYTES) }));
    expect(at.details).toEqual(detailsOf(MAX_ERROR_DETAILS_BYTES));
    const over = toErrorRecord(new Permanent('over', { details: detailsOf(MAX_ERROR_DETAILS_BYTES + 1) }));
    expect(over.details).toEqual({
      omitted: expect.stringContaining(`${MAX_ERROR_DETAILS_BYTES + 1} bytes`),
    });
  });

  it('never throws: cycles, BigInt, objects without a string form, throwing getters', () => {
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    const getter = Object.defineProperty(new Error('g'), 'details', {
      get() {
        throw new Error('no');
      },
    });
    for (const thrown of [
      Object.assign(new Error('c'), { details: cycle }),
      Object.assign(new Error('b'), { details: 10n }),
      Object.create(null),
      getter,
    ]) {
      const record = toErrorRecord(thrown);
      expect(typeof record.message).toBe('string');
      expect(() => JSON.stringify(record)).not.toThrow();
    }
  });

  it('never throws on values whose every read throws: revoked proxies, traps that throw proxies', () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const abyss = (target: object): object =>
      new Proxy(
        target,
        new Proxy(
          {},
          {
            get: () => () => {
              throw abyss(target);
            },
          },
        ),
      );
    const tag = {
      get [Symbol.toStringTag]() {
        throw new Error('tag');
      },
      toString: null,
    };
    for (const thrown of [proxy, abyss({}), abyss(() => {}), tag]) {
      const record = toErrorRecord(thrown, 'retryable');
      expect(record).toMatchObject({ code: 'unclassified-error', outcome: 'retryable' });
      expect(typeof record.message).toBe('string');
      expect(() => JSON.stringify(record)).not.toThrow();
    }
  });

  it('keeps a code that is one, and bounds one that is not, saying what it was', () => {
    for (const code of ['card_declined', 'Card.Declined-2', '402', 'x'.repeat(100)])
      expect(toErrorRecord(new Permanent('declined', { code })).code).toBe(code);
    for (const [code, said] of [
      [42, '42'],
      [{ a: 1 }, 'an object'],
      ['nul\u0000code', '"nul\\u0000code"'],
      ['c'.repeat(5_000_000), '(5000000 characters)'],
      ['x'.repeat(101), '(101 characters)'],
      ['-leading', '"-leading"'],
      ['', '""'],
    ] as const) {
      const permanent = toErrorRecord(new Permanent('declined', { code: code as string }));
      expect(permanent.code).toBe('permanent-failure');
      expect(permanent.message).toMatch(/^declined \(its code .* is not a code: /);
      expect(permanent.message).toContain(said);
      expect(permanent.message).not.toContain('\u0000');
      expect(permanent.message.length).toBeLessThanOrEqual(2000);
      expect(toErrorRecord(new Retryable('x', { code: code as string })).code).toBe('retryable-failure');
      expect(toErrorRecord(new Ambiguous('x', { code: code as string })).code).toBe('ambiguous-outcome');
    }
    // Not an outcome of a handler's: the code of anything else thrown.
    const forged = Object.defineProperty({ code: 7 }, Symbol.for('sluice.error'), { value: true });
    expect(toErrorRecord(forged).code).toBe('unclassified-error');
  });
});
