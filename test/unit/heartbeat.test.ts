/**
 * The heartbeat's clock rule (queue/heartbeat.ts), on fake timers: a lease nobody confirms is
 * given up early enough that its handler, its grace for stopping included, is stopped before the
 * lease the store granted runs out — counted from when the claim was sent, not when its answer
 * came — so no other worker can start the operation while this one still runs it.
 */
import pino from 'pino';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Heartbeat } from '../../src/queue/heartbeat.js';
import type { Store } from '../../src/store/store.js';

afterEach(() => {
  vi.useRealTimers();
});

/** A store whose lease extensions never answer (a connection the network dropped). */
const silentStore = { leaseExtendMany: () => new Promise(() => {}) } as unknown as Store;
const lease = { tenant: 'North', id: 'A', epoch: 1 };

describe('a lease the store stops confirming', () => {
  for (const [leaseMs, beatMs, graceMs] of [
    [30_000, 5000, 1000],
    [9000, 3000, 1000],
    [3000, 1000, 500],
  ] as const)
    it(`is given up with its grace to spare (lease ${leaseMs} ms, beat ${beatMs} ms, grace ${graceMs} ms)`, async () => {
      vi.useFakeTimers({ toFake: ['performance', 'setInterval', 'clearInterval', 'setTimeout'] });
      const heartbeat = new Heartbeat(silentStore, pino({ level: 'silent' }), beatMs, graceMs);
      let lostAt: number | undefined;
      // The claim was sent 1.5 s before its answer arrived: the store's lease started then.
      const claimSentAt = performance.now() - 1500;
      heartbeat.watch(
        {
          lease,
          leaseMs,
          onLost: () => {
            lostAt = performance.now();
          },
          onCancel: () => {},
        },
        claimSentAt,
      );
      heartbeat.start();
      await vi.advanceTimersByTimeAsync(leaseMs);
      // Its stop waits one beat at most for the beat still out.
      const stopped = heartbeat.stop();
      await vi.advanceTimersByTimeAsync(beatMs);
      await stopped;
      expect(lostAt).toBeDefined();
      // Stopped, grace included, before the lease ends: another worker can claim only after.
      expect(lostAt! + graceMs).toBeLessThanOrEqual(claimSentAt + leaseMs);
    });

  it('is kept while the beats answer, however close together the limit puts them', async () => {
    vi.useFakeTimers({ toFake: ['performance', 'setInterval', 'clearInterval', 'setTimeout'] });
    const answering = {
      leaseExtendMany: async ({ leases }: { leases: unknown[] }) => leases.map(() => ({ ok: true })),
    } as unknown as Store;
    // A short lease with a long grace: the limit is never below two beats.
    const heartbeat = new Heartbeat(answering, pino({ level: 'silent' }), 667, 1000);
    expect(heartbeat.unconfirmedLimitMs(2000)).toBe(1334);
    let lost = false;
    heartbeat.watch({ lease, leaseMs: 2000, onLost: () => (lost = true), onCancel: () => {} });
    heartbeat.start();
    await vi.advanceTimersByTimeAsync(20_000);
    await heartbeat.stop();
    expect(lost).toBe(false);
    expect(heartbeat.size).toBe(1);
  });
});
