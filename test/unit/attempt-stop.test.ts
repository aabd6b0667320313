/**
 * The attempt's stop (runtime/attempt-stop.ts): the `AbortSignal` a handler sees is made when first
 * read, and behaves as if it had existed from the start of the attempt.
 */
import { describe, expect, it } from 'vitest';
import { AttemptStop } from '../../src/runtime/attempt-stop.js';

describe('the attempt stop', () => {
  it('gives a signal read after the stop already fired, with the reason it was stopped for', () => {
    const stop = new AttemptStop();
    const why = new Error('lease lost');
    stop.abort(why);
    expect(stop.signal.aborted).toBe(true);
    expect(stop.signal.reason).toBe(why);
    expect(() => stop.signal.throwIfAborted()).toThrow(why);
  });

  it("fires a signal read before the stop, its listeners first, then the attempt's own wait", () => {
    const stop = new AttemptStop();
    const order: string[] = [];
    const signal = stop.signal;
    signal.addEventListener('abort', () => order.push(`listener:${String(signal.reason)}`));
    stop.afterAbort = () => order.push('afterAbort');
    stop.abort('timeout');
    expect(order).toEqual(['listener:timeout', 'afterAbort']);
    expect(stop.signal).toBe(signal);
  });

  it('keeps the first reason: a later abort changes nothing and runs nothing', () => {
    const stop = new AttemptStop();
    let after = 0;
    stop.afterAbort = () => after++;
    stop.abort('first');
    stop.abort('second');
    expect(stop.reason).toBe('first');
    expect(stop.signal.reason).toBe('first');
    expect(after).toBe(1);
    expect(() => stop.throwIfAborted()).toThrow();
  });

  it('makes no AbortController for an attempt that never reads its signal', () => {
    const made: AbortController[] = [];
    const Original = globalThis.AbortController;
    globalThis.AbortController = class extends Original {
      constructor() {
        super();
        made.push(this);
      }
    };
    try {
      const unread = new AttemptStop();
      unread.abort('shutdown');
      expect(unread.aborted).toBe(true);
      expect(made).toHaveLength(0);
      void new AttemptStop().signal;
      expect(made).toHaveLength(1);
    } finally {
      globalThis.AbortController = Original;
    }
  });
});
