/**
 * Wake-ups of idle claim loops (queue/wakeup.ts): a wake that comes while the loop is busy is
 * remembered until its next claim, and only for the classes a loop here claims for.
 */
import { describe, expect, it } from 'vitest';
import { Wakeup } from '../../src/queue/wakeup.js';

describe('Wakeup', () => {
  it("remembers a wake for a served class until the loop's next claim", async () => {
    const wakeup = new Wakeup();
    wakeup.consume('bulk'); // the loop, before its first claim
    wakeup.notify('bulk'); // while it claims
    expect(wakeup.remembered).toBe(1);
    await wakeup.wait('bulk', 60_000); // resolves at once: the wake was not lost
    wakeup.consume('bulk');
    expect(wakeup.remembered).toBe(0);
  });

  it('wakes a loop that waits', async () => {
    const wakeup = new Wakeup();
    const woken = wakeup.wait('bulk', 60_000);
    wakeup.notify('bulk');
    await woken;
  });

  it('remembers nothing for classes no loop here claims for, however many are announced', () => {
    const wakeup = new Wakeup();
    wakeup.consume('bulk');
    for (let i = 0; i < 10_000; i++) wakeup.notify(`retired${i}`);
    expect(wakeup.remembered).toBe(0);
    wakeup.notify('bulk');
    expect(wakeup.remembered).toBe(1);
  });
});
