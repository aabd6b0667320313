/**
 * Cancellation is a state question: a queued operation is cancelled without effect; a running
 * one is stopped only while no effect has begun; after that the operation runs to its end and
 * the cancel is reported `too_late` with the result.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isCancelRequested, Sluice, sqliteStore } from '../../src/index.js';
import { FakeClock, ProviderStub } from '../../src/testing/index.js';
import { defineCharge, O7 } from '../helpers/charge-kind.js';
import { type Harness, harness, silent } from '../helpers/engine.js';
import { Gate } from '../helpers/gate.js';

describe('cancellation', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('a cancelled queued operation never reaches its handler', async () => {
    h = await harness();
    const seen: string[] = [];
    h.sluice.define('job', { input: z.object({}), run: (_i, ctx) => void seen.push(ctx.id) });
    await h.sluice.submit({ tenant: 'North', id: 'A', kind: 'job', input: {} });
    const out = await h.sluice.cancel({ tenant: 'North', id: 'A' });
    expect(out.cancel).toBe('cancelled');
    expect(out.operation.state).toBe('cancelled');
    // B is behind A in the same tenant's FIFO: once B has run, A would have run before it.
    await h.sluice.submit({ tenant: 'North', id: 'B', kind: 'job', input: {} });
    h.worker().start();
    expect((await h.sluice.wait({ tenant: 'North', id: 'B' })).state).toBe('succeeded');
    expect(seen).toEqual(['B']);
    expect((await h.sluice.get({ tenant: 'North', id: 'A' }))?.state).toBe('cancelled');
    expect(await h.store.queueStats()).toEqual([
      { class: 'default', tenant: 'North', waiting: 0, running: 0 },
    ]);
  });

  it('a running operation with no effect begun is stopped through its signal and ends cancelled', async () => {
    h = await harness();
    const gate = new Gate();
    let reason: unknown;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_i, ctx) {
        await gate.wait(ctx.signal).catch((e) => {
          reason = e;
          throw e;
        });
      },
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'A', kind: 'job', input: {} });
    await gate.arrived;
    const out = await h.sluice.cancel({ tenant: 'North', id: 'A' });
    expect(out.cancel).toBe('requested');
    const op = await h.sluice.wait({ tenant: 'North', id: 'A' });
    expect(op.state).toBe('cancelled');
    expect(isCancelRequested(reason)).toBe(true);
  });

  it('a handler that first reads its signal after the cancel finds it fired, with CancelRequested', async () => {
    h = await harness();
    const gate = new Gate();
    let seen: { aborted: boolean; reason: unknown } | undefined;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_i, ctx) {
        await gate.wait(); // not the signal: the attempt's signal is made only below
        seen = { aborted: ctx.signal.aborted, reason: ctx.signal.reason };
        ctx.signal.throwIfAborted();
      },
    });
    // A grace long enough that the handler, not the grace timer, ends the attempt.
    h.worker({ abortGraceMs: 60_000 }).start();
    await h.sluice.submit({ tenant: 'North', id: 'A', kind: 'job', input: {} });
    await gate.arrived;
    expect((await h.sluice.cancel({ tenant: 'North', id: 'A' })).cancel).toBe('requested');
    gate.open();
    const op = await h.sluice.wait({ tenant: 'North', id: 'A' });
    expect(op.state).toBe('cancelled');
    expect(seen?.aborted).toBe(true);
    expect(isCancelRequested(seen?.reason)).toBe(true);
  });

  it('a cancel after the effect committed is too late: the operation reports its charge', async () => {
    h = await harness();
    const provider = new ProviderStub();
    const gate = new Gate();
    h.sluice.define('charge', {
      input: z.object({ amount_cents: z.number() }),
      async run(input, ctx) {
        const c = await ctx.effect('charge', { call: ({ key }) => provider.charge({ key, params: input }) });
        await gate.wait(); // e.g. the receipt e-mail is still to be sent
        return { charge: c.id };
      },
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'A', kind: 'charge', input: { amount_cents: 5000 } });
    await gate.arrived;
    const out = await h.sluice.cancel({ tenant: 'North', id: 'A' });
    expect(out.cancel).toBe('too_late');
    gate.open();
    const op = await h.sluice.wait({ tenant: 'North', id: 'A' });
    expect(op.state).toBe('succeeded');
    expect(op.cancel).toBe('too_late');
    expect(op.result).toEqual({ charge: 'ch_1' });
    expect(provider.ledger()).toHaveLength(1);
    // Asking again after the end answers the same way, with the result.
    const again = await h.sluice.cancel({ tenant: 'North', id: 'A' });
    expect([again.cancel, again.operation.result]).toEqual(['too_late', { charge: 'ch_1' }]);
  });

  it('a queued retry whose earlier attempt committed an effect cannot be cancelled', async () => {
    const clock = new FakeClock();
    h = await harness({ clock, sluice: { random: () => 0.5 } });
    const provider = new ProviderStub();
    let runs = 0;
    h.sluice.define('charge', {
      input: z.object({ amount_cents: z.number() }),
      limits: { backoff: { baseMs: 1000, capMs: 1000 } },
      async run(input, ctx) {
        const c = await ctx.effect('charge', { call: ({ key }) => provider.charge({ key, params: input }) });
        if (++runs === 1) throw new Error('the receipt service is down');
        return { charge: c.id };
      },
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'A', kind: 'charge', input: { amount_cents: 5000 } });
    // The retry waits 500 ms of store time, which does not pass until the test moves the clock.
    const queued = await h.sluice.wait(
      { tenant: 'North', id: 'A' },
      { until: (o) => o.attempt === 1 && o.state === 'queued' },
    );
    expect(queued.error?.message).toBe('the receipt service is down');
    const out = await h.sluice.cancel({ tenant: 'North', id: 'A' });
    expect(out.cancel).toBe('too_late');
    clock.advance(1000);
    const op = await h.sluice.wait({ tenant: 'North', id: 'A' });
    expect([op.state, op.cancel, op.result]).toEqual(['succeeded', 'too_late', { charge: 'ch_1' }]);
    expect(provider.ledger()).toHaveLength(1);
  });

  it('an operation retrying after definite refusals (503) can still be cancelled: nothing happened', async () => {
    const clock = new FakeClock();
    h = await harness({ clock, sluice: { random: () => 0.5 } });
    const provider = new ProviderStub();
    provider.failNext(1, 'unavailable');
    defineCharge(h.sluice, provider, { limits: { backoff: { baseMs: 1000, capMs: 1000 } } });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'O7', kind: 'charge', input: O7 });
    await h.sluice.wait(
      { tenant: 'North', id: 'O7' },
      { until: (o) => o.attempt === 1 && o.state === 'queued' },
    );
    const journal = await h.sluice.get({ tenant: 'North', id: 'O7' }, { include: ['effects'] });
    expect(journal?.effects?.map((e) => [e.state, e.sends])).toEqual([['absent', 1]]);
    const out = await h.sluice.cancel({ tenant: 'North', id: 'O7' });
    expect([out.cancel, out.operation.state]).toEqual(['cancelled', 'cancelled']);
    clock.advance(1000);
    expect(provider.calls).toBe(1);
    expect(provider.ledger()).toHaveLength(0);
  });

  it('a cancel made by another process reaches the running handler through the heartbeat', async () => {
    h = await harness();
    const gate = new Gate();
    h.sluice.define('job', { input: z.object({}), run: (_i, ctx) => gate.wait(ctx.signal) });
    const worker = h.worker({ leaseMs: 120_000, heartbeatMs: 60_000 });
    worker.start();
    await h.sluice.submit({ tenant: 'North', id: 'A', kind: 'job', input: {} });
    await gate.arrived;
    // A second engine on the same file (another process, as far as the worker can tell).
    const other = new Sluice({ store: sqliteStore({ path: h.dbPath }), logger: silent });
    expect((await other.cancel({ tenant: 'North', id: 'A' })).cancel).toBe('requested');
    await other.close();
    await worker.heartbeatNow();
    expect((await h.sluice.wait({ tenant: 'North', id: 'A' })).state).toBe('cancelled');
  });

  it('cancelling a charge that succeeded answers too_late with the result; undoing it is a refund', async () => {
    h = await harness();
    const provider = new ProviderStub();
    defineCharge(h.sluice, provider);
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'O7', kind: 'charge', input: O7 });
    await h.sluice.wait({ tenant: 'North', id: 'O7' });
    const out = await h.sluice.cancel({ tenant: 'North', id: 'O7' });
    expect(out.cancel).toBe('too_late');
    expect(out.operation.state).toBe('succeeded');
    expect(out.operation.result).toEqual({ charge: 'ch_1' });
  });
});
