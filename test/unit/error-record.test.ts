/**
 * An error as stored (core/errors toErrorRecord): never a throw, whatever was thrown, and details
 * kept as JSON up to MAX_ERROR_DETAILS_BYTES, at the edge and one byte over.
 */
import { describe, expect, it } from 'vitest';
import { MAX_ERROR_DETAILS_BYTES, Permanent, toErrorRecord } from '../../src/index.js';

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
});
