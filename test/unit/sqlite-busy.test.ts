/**
 * The SQLite store's wait for another connection's lock (store/sqlite/busy.ts), on timers: one
 * call of the process tries on the timer, the others that found the lock taken wait their turn,
 * and a call still refused when its time is up fails store-busy.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { StoreError } from '../../src/core/errors/index.js';
import { BUSY_SPIN_MS, BusyQueue } from '../../src/store/sqlite/busy.js';

afterEach(() => {
  vi.useRealTimers();
});

/** A call that fails store-busy while `lock.held`, counting its tries. */
function call(lock: { held: boolean }, name: string) {
  const tries = { n: 0 };
  const fn = () => {
    tries.n++;
    if (lock.held) throw new StoreError('busy', 'SQLite: database is locked');
    return name;
  };
  return { fn, tries };
}

describe('the wait for a SQLite lock', () => {
  it('has one call try on the timer while the others wait, then lets them through in order', async () => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
    const queue = new BusyQueue(10_000);
    const lock = { held: true };
    const a = call(lock, 'a');
    const b = call(lock, 'b');
    const order: string[] = [];
    const first = queue.run(a.fn).then((v) => order.push(v));
    const second = queue.run(b.fn).then((v) => order.push(v));
    expect([a.tries.n, b.tries.n]).toEqual([1, 1]);
    await vi.advanceTimersByTimeAsync(500);
    // The first tried again and again; the second waited behind it.
    expect(a.tries.n).toBeGreaterThan(5);
    expect(b.tries.n).toBe(1);
    lock.held = false;
    await vi.advanceTimersByTimeAsync(50);
    await Promise.all([first, second]);
    expect(order).toEqual(['a', 'b']);
    expect(b.tries.n).toBe(2);
  });

  it('fails store-busy once the timeout has passed, and passes any other error at once', async () => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout'] });
    const queue = new BusyQueue(1000);
    const held = call({ held: true }, 'x');
    const refused = queue.run(held.fn).catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(1000);
    expect(await refused).toMatchObject({ code: 'store-busy', retryable: true });
    const tries = held.tries.n;
    await vi.advanceTimersByTimeAsync(1000);
    expect(held.tries.n).toBe(tries);
    await expect(
      queue.run(() => {
        throw new StoreError('unavailable', 'gone');
      }),
    ).rejects.toMatchObject({ code: 'store-unavailable' });
  });

  it('leaves a timeout no longer than its own wait to SQLite', async () => {
    const queue = new BusyQueue(BUSY_SPIN_MS);
    const held = call({ held: true }, 'x');
    await expect(queue.run(held.fn)).rejects.toMatchObject({ code: 'store-busy' });
    expect(held.tries.n).toBe(1);
  });
});
