/**
 * Deadlines and attempt timeouts. An operation whose deadline passed before it starts is never
 * started (failed, zero provider calls); a deadline that passes while an effect's outcome is
 * unknown leaves the operation waiting for reconciliation, never `failed`; an attempt timeout is
 * a retryable failure, also for a handler that ignores its signal (left behind after the grace).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ambiguous } from '../../src/index.js';
import { FakeClock, ProviderStub } from '../../src/testing/index.js';
import { defineCharge, O7 } from '../helpers/charge-kind.js';
import { settleOnFakeClock } from '../helpers/drive.js';
import { type Harness, harness } from '../helpers/engine.js';

describe('deadlines', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('never starts an operation whose deadline has passed: failed, zero provider calls', async () => {
    const clock = new FakeClock();
    const provider = new ProviderStub({ clock });
    h = await harness({ clock });
    defineCharge(h.sluice, provider);
    await h.sluice.submit({ tenant: 'North', id: 'O7', kind: 'charge', input: O7, deadlineMs: 5000 });
    clock.advance(5000);
    h.worker().start();
    const op = await h.sluice.wait({ tenant: 'North', id: 'O7' });
    expect([op.state, op.error?.code]).toEqual(['failed', 'deadline-exceeded']);
    expect(provider.calls).toBe(0);
  });

  it('does not schedule a retry that would start after the deadline', async () => {
    const clock = new FakeClock();
    const provider = new ProviderStub({ clock });
    provider.failNext(10, 'unavailable');
    h = await harness({ clock, sluice: { random: () => 0.99 } });
    defineCharge(h.sluice, provider, { limits: { backoff: { baseMs: 10_000, capMs: 10_000 } } });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'O7', kind: 'charge', input: O7, deadlineMs: 5000 });
    const op = await settleOnFakeClock(h.sluice, clock, { tenant: 'North', id: 'O7' });
    expect([op.state, op.error?.code, op.attempt]).toEqual(['failed', 'deadline-exceeded', 1]);
    expect(provider.calls).toBe(1);
  });

  it('a deadline passing while an effect outcome is unknown ends in needs_reconciliation, not failed', async () => {
    const clock = new FakeClock();
    // Jitter fixed at 90% of the ceiling: the second retry would start past the deadline (with
    // random jitter, five short delays could exhaust the attempts first, a different story).
    h = await harness({ clock, sluice: { random: () => 0.9 } });
    let calls = 0;
    h.sluice.define('charge', {
      input: z.object({}),
      limits: { backoff: { baseMs: 1000, capMs: 1000 } },
      async run(_i, ctx) {
        return ctx.effect('charge', {
          call: async () => {
            calls++;
            throw new Ambiguous('timeout after sending');
          },
        });
      },
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'X', kind: 'charge', input: {}, deadlineMs: 1500 });
    const op = await settleOnFakeClock(h.sluice, clock, { tenant: 'North', id: 'X' });
    expect([op.state, op.error?.code]).toEqual(['needs_reconciliation', 'deadline-exceeded']);
    expect(calls).toBeGreaterThanOrEqual(1);
    const full = await h.sluice.get({ tenant: 'North', id: 'X' }, { include: ['effects'] });
    expect(full?.effects?.map((e) => e.state)).toEqual(['pending']);
  });

  it('an attempt timeout fires the signal and the attempt is retried', async () => {
    h = await harness();
    const reasons: string[] = [];
    h.sluice.define('slow', {
      input: z.object({}),
      limits: { attemptTimeoutMs: 100, backoff: { baseMs: 0, capMs: 0 } },
      async run(_i, ctx) {
        if (ctx.attempt === 1) {
          await new Promise((_r, reject) =>
            ctx.signal.addEventListener('abort', () => {
              reasons.push((ctx.signal.reason as { code: string }).code);
              reject(ctx.signal.reason);
            }),
          );
        }
        return { attempt: ctx.attempt };
      },
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'S', kind: 'slow', input: {} });
    const op = await h.sluice.wait({ tenant: 'North', id: 'S' });
    expect([op.state, op.result]).toEqual(['succeeded', { attempt: 2 }]);
    expect(reasons).toEqual(['attempt-timeout']);
    const full = await h.sluice.get({ tenant: 'North', id: 'S' }, { include: ['attempts'] });
    expect(full?.attempts?.map((a) => [a.outcome, a.error?.code ?? null])).toEqual([
      ['retry', 'attempt-timeout'],
      ['succeeded', null],
    ]);
  });

  it('a handler that ignores its signal is left behind after the grace, and its slot freed', async () => {
    h = await harness();
    let ignored = 0;
    h.sluice.define('deaf', {
      input: z.object({}),
      limits: { attemptTimeoutMs: 100, backoff: { baseMs: 0, capMs: 0 } },
      run(_i, ctx) {
        // The first attempt never settles and never looks at its signal.
        if (ctx.attempt === 1) {
          ignored++;
          return new Promise(() => {});
        }
        return { attempt: ctx.attempt };
      },
    });
    // One slot: the retry can only run once the first attempt's slot is free again.
    const w = h.worker({ slots: { default: 1 }, abortGraceMs: 50 });
    w.start();
    await h.sluice.submit({ tenant: 'North', id: 'D', kind: 'deaf', input: {} });
    const op = await h.sluice.wait({ tenant: 'North', id: 'D' });
    expect([op.state, op.result, ignored]).toEqual(['succeeded', { attempt: 2 }, 1]);
    const full = await h.sluice.get({ tenant: 'North', id: 'D' }, { include: ['attempts'] });
    expect(full?.attempts?.map((a) => [a.outcome, a.error?.code ?? null])).toEqual([
      ['retry', 'attempt-timeout'],
      ['succeeded', null],
    ]);
    expect(w.running).toBe(0);
  });
});
