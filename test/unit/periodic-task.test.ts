/**
 * A worker's maintenance task (the rescuer, the purge) while the store is down and once it
 * answers again: it backs off 1, 3, 7… ticks after each failure, and the back-off ends as soon as
 * another call reaches the store, so expired leases are rescued at the next tick rather than up
 * to 63 ticks later. Fake timers: the ticks are the task's own setInterval.
 */
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { StoreError } from '../../src/core/errors/index.js';
import { PeriodicTask } from '../../src/queue/maintenance.js';

describe('PeriodicTask', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('backs off while the store fails, and runs at the next tick once the store answers', async () => {
    let down = true;
    let runs = 0;
    const task = new PeriodicTask(
      'rescue',
      100,
      async () => {
        runs++;
        if (down) throw new StoreError('unavailable', 'the disk is full');
      },
      pino({ level: 'silent' }),
    );
    task.start();
    // Six failures in a row: the sixth backs off 63 ticks.
    for (let i = 0; i < 6; i++) {
      const before = runs;
      while (runs === before) await vi.advanceTimersByTimeAsync(100);
    }
    expect(runs).toBe(6);
    down = false;
    await vi.advanceTimersByTimeAsync(100 * 10);
    expect(runs).toBe(6); // still backing off: nothing said the store is back
    task.storeAnswered();
    await vi.advanceTimersByTimeAsync(100);
    expect(runs).toBe(7);
    await vi.advanceTimersByTimeAsync(100);
    expect(runs).toBe(8); // succeeded: every tick again
    task.storeAnswered(); // no failure to end: changes nothing
    await vi.advanceTimersByTimeAsync(100);
    expect(runs).toBe(9);
    await task.stop();
  });
});
