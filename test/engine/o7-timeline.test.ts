/**
 * The seed's timeline for operation O7, on a fake clock shared by the store and the provider:
 *
 *   12:00 W1 sends key O7; the provider commits charge C9
 *   12:01 W1 crashes before saving C9
 *   12:02 the queue redelivers O7
 *
 * Inside the provider's 24 h window the redelivery gets C9 back: one charge. Past the window a
 * blind retry would charge again, so Sluice does not call: without `lookup` the operation waits
 * in `needs_reconciliation`; with `lookup` it reconciles to C9 and succeeds.
 */
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import { FakeClock, failpoints, ProviderStub, SimulatedCrash } from '../../src/testing/index.js';
import { defineCharge, O7 } from '../helpers/charge-kind.js';
import { type Harness, harness } from '../helpers/engine.js';

const LEASE_MS = 30_000;
const ref = { tenant: 'North', id: 'O7' };

describe('the O7 timeline', () => {
  let h: Harness;
  afterEach(async () => {
    failpoints.reset();
    await h?.close();
  });

  async function crashAt1201(options: { withLookup?: boolean }) {
    const clock = new FakeClock('2026-03-02T12:00:00Z');
    const provider = new ProviderStub({ clock, chargeId: (n) => `C${n + 8}` });
    h = await harness({ clock });
    // No overall deadline here: the retention window, not the deadline, must decide.
    defineCharge(h.sluice, provider, { limits: { deadlineMs: null }, withLookup: options.withLookup });
    const worker = h.worker({ leaseMs: LEASE_MS });
    failpoints.enable('effect.after-call', () => {
      clock.set('2026-03-02T12:01:00Z');
      throw new SimulatedCrash('W1 crashes before saving C9');
    });
    worker.start();
    const crashed = once(worker, 'attempt');
    await h.sluice.submit({ ...ref, kind: 'charge', input: O7 });
    expect((await crashed)[0].report.outcome).toBe('crashed');
    expect(provider.ledger().map((c) => [c.id, new Date(c.createdAt).toISOString()])).toEqual([
      ['C9', '2026-03-02T12:00:00.000Z'],
    ]);
    const journal = await h.sluice.get(ref, { include: ['effects'] });
    expect(journal?.effects?.map((e) => e.state)).toEqual(['pending']);
    return { clock, provider };
  }

  it('12:02 redelivery inside the window returns the same charge C9: one charge', async () => {
    const { clock, provider } = await crashAt1201({});
    clock.set('2026-03-02T12:02:00Z');
    expect(await h.sluice.rescueExpiredLeases()).toBe(1);
    const op = await h.sluice.wait(ref);

    expect(op.state).toBe('succeeded');
    expect(op.result).toEqual({ charge: 'C9' });
    expect(provider.ledger()).toHaveLength(1);
    expect(provider.calls).toBe(2);
    const full = await h.sluice.get(ref, { include: ['attempts', 'effects'] });
    expect(full?.attempts?.map((a) => a.outcome)).toEqual(['lease-expired', 'succeeded']);
    expect(full?.effects?.[0]).toMatchObject({ state: 'committed', reference: 'C9', sends: 2 });
  });

  it('redelivery after the 24 h window, without lookup: needs_reconciliation and no call', async () => {
    const { clock, provider } = await crashAt1201({});
    clock.set('2026-03-03T12:02:00Z');
    expect(await h.sluice.rescueExpiredLeases()).toBe(1);
    const op = await h.sluice.wait(ref);

    expect(op.state).toBe('needs_reconciliation');
    expect(op.error?.code).toBe('effect-outcome-unknown');
    expect(provider.calls).toBe(1);
    expect(provider.ledger()).toHaveLength(1);

    // A person checks the provider and reconciles: the charge exists, C9.
    const reconciled = await h.sluice.reconcile(ref, {
      by: 'ops@example.com',
      reason: 'provider dashboard shows C9 for this key',
      effects: [{ name: 'charge', outcome: 'committed', result: provider.ledger()[0], reference: 'C9' }],
      resolution: 'requeue',
    });
    expect(reconciled.state).toBe('queued');
    const done = await h.sluice.wait(ref);
    expect(done.state).toBe('succeeded');
    expect(done.result).toEqual({ charge: 'C9' });
    expect(provider.calls).toBe(1);
    const events = (await h.sluice.get(ref, { include: ['events'] }))?.events;
    expect(events?.map((e) => [e.action, e.by])).toEqual([['reconcile', 'ops@example.com']]);
  });

  it('redelivery after the 24 h window, with lookup: reconciled to C9, no new charge', async () => {
    const { clock, provider } = await crashAt1201({ withLookup: true });
    clock.set('2026-03-03T12:02:00Z');
    expect(await h.sluice.rescueExpiredLeases()).toBe(1);
    const op = await h.sluice.wait(ref);

    expect(op.state).toBe('succeeded');
    expect(op.result).toEqual({ charge: 'C9' });
    expect(provider.calls).toBe(1);
    expect(provider.lookups).toBe(1);
    expect(provider.ledger()).toHaveLength(1);
  });
});
