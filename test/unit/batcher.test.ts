/**
 * The group-commit batcher (runtime/batcher.ts): calls of one turn go as one batch; a batch the
 * store refuses outright goes again item by item, so that one bad item fails only its caller; a
 * batch that failed for a reason that would fail any batch (the store unreachable) is answered
 * as it failed, without a call per item.
 */
import { describe, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors/index.js';
import { Batcher } from '../../src/runtime/batcher.js';

/** A flush that refuses any batch holding `bad` with `error`, and records every batch it got. */
function refusing(error: unknown) {
  const batches: string[][] = [];
  const batcher = new Batcher<string, string>(async (items) => {
    batches.push(items);
    if (items.includes('bad')) throw error;
    return items.map((i) => `${i}: done`);
  });
  return { batcher, batches };
}

describe('the batcher', () => {
  it('sends a batch refused outright again item by item: one bad item fails only its caller', async () => {
    const bad = new TypeError('SQLite3 can only bind numbers, strings, bigints, buffers, and null');
    const { batcher, batches } = refusing(bad);
    const answers = await Promise.allSettled(['a', 'bad', 'c'].map((i) => batcher.add(i)));
    expect(answers).toEqual([
      { status: 'fulfilled', value: 'a: done' },
      { status: 'rejected', reason: bad },
      { status: 'fulfilled', value: 'c: done' },
    ]);
    expect(batches).toEqual([['a', 'bad', 'c'], ['a'], ['bad'], ['c']]);
  });

  it('answers a batch that failed retryably as it failed, without a call per item', async () => {
    const down = new StoreError('unavailable', 'PostgreSQL unreachable (ECONNREFUSED)');
    const { batcher, batches } = refusing(down);
    const answers = await Promise.allSettled(['a', 'bad', 'c'].map((i) => batcher.add(i)));
    expect(answers.map((a) => (a.status === 'rejected' ? a.reason : a.value))).toEqual([down, down, down]);
    expect(batches).toEqual([['a', 'bad', 'c']]);
  });
});
