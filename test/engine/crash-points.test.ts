/**
 * Crash points C0–C4 of the effect protocol, each on its own, with in-process failpoints: the
 * worker "dies" at the point (it writes nothing more and its lease is left to expire), then the
 * operation is redelivered. In every case: exactly one charge at the provider, nothing lost,
 * the operation succeeds with that charge. The same points are killed for real (SIGKILL of a
 * worker process) in test/process/crash-points.test.ts.
 */
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { CRASH_POINTS, FakeClock, failpoints, ProviderStub } from '../../src/testing/index.js';
import { defineCharge, O7 } from '../helpers/charge-kind.js';
import { type Harness, harness } from '../helpers/engine.js';

const LEASE_MS = 30_000;
const ref = { tenant: 'North', id: 'O7' };

describe('crash points with in-process failpoints', () => {
  let h: Harness;
  afterEach(async () => {
    failpoints.reset();
    await h?.close();
  });

  async function crashAt(point: keyof typeof CRASH_POINTS) {
    const clock = new FakeClock();
    const provider = new ProviderStub({ clock });
    h = await harness({ clock });
    defineCharge(h.sluice, provider);
    const worker = h.worker({ leaseMs: LEASE_MS });
    failpoints.enable(CRASH_POINTS[point], 'crash');
    worker.start();
    const ended = once(worker, 'attempt');
    await h.sluice.submit({ ...ref, kind: 'charge', input: O7 });
    expect((await ended)[0].report.outcome).toBe('crashed');
    expect(failpoints.fired(CRASH_POINTS[point])).toBe(1);
    const atCrash = await h.sluice.get(ref, { include: ['effects'] });
    return { clock, provider, worker, atCrash: atCrash! };
  }

  async function redeliver(clock: FakeClock) {
    clock.advance(LEASE_MS + 1);
    return h.sluice.rescueExpiredLeases();
  }

  it('C0, before pending: nothing was sent; redelivery charges once', async () => {
    const { clock, provider, atCrash } = await crashAt('C0');
    expect(atCrash.state).toBe('running');
    expect(atCrash.effects).toEqual([]);
    expect(provider.calls).toBe(0);
    expect(await redeliver(clock)).toBe(1);
    const op = await h.sluice.wait(ref);
    expect(op.state).toBe('succeeded');
    expect([provider.calls, provider.ledger().length]).toEqual([1, 1]);
  });

  it('C1, after pending, before the call: redelivery sends under the same key once', async () => {
    const { clock, provider, atCrash } = await crashAt('C1');
    expect(atCrash.effects?.map((e) => e.state)).toEqual(['pending']);
    expect(provider.calls).toBe(0);
    expect(await redeliver(clock)).toBe(1);
    const op = await h.sluice.wait(ref, { until: (o) => o.state === 'succeeded' });
    expect(op.result).toEqual({ charge: 'ch_1' });
    expect([provider.calls, provider.ledger().length]).toEqual([1, 1]);
    const full = await h.sluice.get(ref, { include: ['effects'] });
    expect(full?.effects?.[0]).toMatchObject({
      state: 'committed',
      sends: 2,
      key: atCrash.effects?.[0]?.key,
    });
  });

  it('C2, after the provider committed, before committed: the same key returns the same charge', async () => {
    const { clock, provider, atCrash } = await crashAt('C2');
    expect(atCrash.effects?.map((e) => e.state)).toEqual(['pending']);
    expect([provider.calls, provider.ledger().length]).toEqual([1, 1]);
    expect(await redeliver(clock)).toBe(1);
    const op = await h.sluice.wait(ref);
    expect(op.state).toBe('succeeded');
    expect(op.result).toEqual({ charge: 'ch_1' });
    expect([provider.calls, provider.ledger().length]).toEqual([2, 1]);
  });

  it('C3, after committed, before the operation completes: no call at all on redelivery', async () => {
    const { clock, provider, atCrash } = await crashAt('C3');
    expect(atCrash.state).toBe('running');
    expect(atCrash.effects?.map((e) => e.state)).toEqual(['committed']);
    expect(await redeliver(clock)).toBe(1);
    const op = await h.sluice.wait(ref);
    expect(op.state).toBe('succeeded');
    expect(op.result).toEqual({ charge: 'ch_1' });
    expect([provider.calls, provider.ledger().length]).toEqual([1, 1]);
  });

  it('C4, after completion, before anyone hears: the result is durable, nothing is redelivered', async () => {
    const { clock, provider, atCrash } = await crashAt('C4');
    expect(atCrash.state).toBe('succeeded');
    expect(atCrash.result).toEqual({ charge: 'ch_1' });
    expect(await redeliver(clock)).toBe(0);
    // The client that never heard asks again with the same id: it gets the same operation.
    const again = await h.sluice.submit({ ...ref, kind: 'charge', input: O7 });
    expect(again.created).toBe(false);
    expect(again.operation.state).toBe('succeeded');
    expect([provider.calls, provider.ledger().length]).toEqual([1, 1]);
  });

  it('a crashed attempt that keeps running writes nothing after its "death"', async () => {
    // The failpoint fires, but the handler swallows the error and tries to go on.
    const clock = new FakeClock();
    const provider = new ProviderStub({ clock });
    h = await harness({ clock });
    let secondEffect: unknown;
    h.sluice.define('stubborn', {
      input: z.object({}),
      async run(_input, ctx) {
        try {
          await ctx.effect('a', { call: ({ key }) => provider.charge({ key, params: { amount_cents: 1 } }) });
        } catch {
          secondEffect = await ctx
            .effect('b', { call: ({ key }) => provider.charge({ key, params: { amount_cents: 2 } }) })
            .catch((e) => e);
        }
        return 'done';
      },
    });
    const worker = h.worker({ leaseMs: LEASE_MS });
    failpoints.enable('effect.after-call', { action: 'crash', when: (i) => i.effect === 'a' });
    worker.start();
    const ended = once(worker, 'attempt');
    await h.sluice.submit({ tenant: 'North', id: 'S1', kind: 'stubborn', input: {} });
    expect((await ended)[0].report.outcome).toBe('crashed');
    expect((secondEffect as Error).message).toMatch(/simulated crash/);
    const op = await h.sluice.get({ tenant: 'North', id: 'S1' }, { include: ['effects'] });
    expect(op?.state).toBe('running');
    expect(op?.effects?.map((e) => [e.name, e.state])).toEqual([['a', 'pending']]);
    expect(provider.calls).toBe(1);
  });
});
