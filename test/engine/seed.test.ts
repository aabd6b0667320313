/**
 * The seed's four tests of worker B, ported to Sluice with the same scenarios and figures.
 * The seed's "queue" is Sluice's own: redelivery is a lease that expires after a crash.
 */
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { deriveEffectKey, isOperationConflict } from '../../src/index.js';
import { FakeClock, failpoints, ProviderStub } from '../../src/testing/index.js';
import { defineCharge, O7 } from '../helpers/charge-kind.js';
import { settleOnFakeClock } from '../helpers/drive.js';
import { type Harness, harness } from '../helpers/engine.js';

const LEASE_MS = 30_000;

describe('the seed tests, ported', () => {
  let h: Harness;
  let clock: FakeClock;
  afterEach(async () => {
    failpoints.reset();
    await h?.close();
  });

  async function setup(provider: ProviderStub) {
    clock = new FakeClock('2026-01-01T12:00:00Z');
    h = await harness({ clock });
    defineCharge(h.sluice, provider);
    const worker = h.worker({ leaseMs: LEASE_MS });
    worker.start();
    return worker;
  }

  it('crash after the charge, then redelivery, charges once (provider calls 2, charges 1)', async () => {
    const provider = new ProviderStub({ clock: new FakeClock() });
    const worker = await setup(provider);
    failpoints.enable('effect.after-call', 'crash');
    const crashed = once(worker, 'attempt');
    await h.sluice.submit({ tenant: 'North', id: 'O7', kind: 'charge', input: O7 });
    expect((await crashed)[0].report.outcome).toBe('crashed');

    clock.advance(LEASE_MS + 1);
    expect(await h.sluice.rescueExpiredLeases()).toBe(1);
    const op = await h.sluice.wait({ tenant: 'North', id: 'O7' });

    expect(op.state).toBe('succeeded');
    expect(op.result).toEqual({ charge: 'ch_1' });
    expect([provider.calls, provider.ledger().length]).toEqual([2, 1]);
  });

  it('rejects a changed amount under the same id, and changes nothing', async () => {
    const provider = new ProviderStub();
    await setup(provider);
    await h.sluice.submit({ tenant: 'North', id: 'O7', kind: 'charge', input: O7 });
    const first = await h.sluice.wait({ tenant: 'North', id: 'O7' });

    const conflict = await h.sluice
      .submit({ tenant: 'North', id: 'O7', kind: 'charge', input: { ...O7, amount_cents: 9000 } })
      .catch((e) => e);
    expect(isOperationConflict(conflict)).toBe(true);
    expect(conflict.code).toBe('idempotency-key-reused');

    const after = await h.sluice.get({ tenant: 'North', id: 'O7' });
    expect(after).toEqual(first);
    expect(provider.calls).toBe(1);
  });

  it('retries two transient failures with full-jitter back-off, then succeeds', async () => {
    const provider = new ProviderStub();
    provider.failNext(2, 'unavailable');
    await setup(provider);
    await h.sluice.submit({ tenant: 'North', id: 'O8', kind: 'charge', input: O7 });
    const op = await settleOnFakeClock(h.sluice, clock, { tenant: 'North', id: 'O8' });

    expect(op.state).toBe('succeeded');
    expect(op.result).toEqual({ charge: 'ch_1' });
    const full = await h.sluice.get({ tenant: 'North', id: 'O8' }, { include: ['attempts'] });
    const delays = full!.attempts!.filter((a) => a.outcome === 'retry').map((a) => a.retryDelayMs!);
    expect(delays).toHaveLength(2);
    // Seed bounds: 0 ≤ d ≤ 10 s; full jitter also bounds the nth by base · 2^n (0.2 s, 0.4 s).
    expect(delays.every((d) => d >= 0 && d <= 10_000)).toBe(true);
    expect(delays[0]).toBeLessThanOrEqual(200);
    expect(delays[1]).toBeLessThanOrEqual(400);
  });

  it('sends a persistent failure and a conflict to the dead-letter state, in that order', async () => {
    const provider = new ProviderStub();
    await setup(provider);
    provider.failNext(99, 'unavailable');
    await h.sluice.submit({ tenant: 'North', id: 'O9', kind: 'charge', input: O7 });
    const o9 = await settleOnFakeClock(h.sluice, clock, { tenant: 'North', id: 'O9' });
    expect(o9.state).toBe('dead');
    expect(o9.error?.code).toBe('attempts-exhausted');
    expect(o9.attempt).toBe(5);
    provider.reset();

    // The seed's conflicting redelivery: key O7 already carries a charge for other parameters
    // (amount 1). Sluice refuses to reuse it with amount 5000 and parks the operation.
    const key = deriveEffectKey('North', 'O7', 'charge');
    await provider.charge({ key, params: { tenant: 'North', ...O7, amount_cents: 1 } });
    await h.sluice.submit({ tenant: 'North', id: 'O7', kind: 'charge', input: O7 });
    const o7 = await settleOnFakeClock(h.sluice, clock, { tenant: 'North', id: 'O7' });
    expect(o7.state).toBe('dead');
    expect(o7.error?.code).toBe('effect-key-conflict');

    const dead = await h.sluice.list({ tenant: 'North', state: 'dead' });
    expect(dead.operations.map((o) => o.id)).toEqual(['O9', 'O7']);
    expect(provider.ledger()).toHaveLength(1);
  });
});
