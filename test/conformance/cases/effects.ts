/**
 * @module test/conformance/cases/effects
 * The effect journal (steps 3 and 5 of the effect protocol): `begin` writes the durable
 * `pending` row with the effect key and the first-sent time, or returns the row an earlier
 * attempt wrote, unchanged; sends are counted; the row ends `committed`, `failed` or `absent`.
 * `begin` is also the point of no return against cancel: refused while a cancel is pending, and
 * once it happened a cancel is `too_late`.
 */
import { expect } from 'vitest';
import {
  BOOM,
  claim,
  claimOne,
  expectNextEpoch,
  getRow,
  leaseOf,
  rejectionCode,
  submitCreated,
  submitParams,
} from '../fixtures.js';
import type { CaseRegistry } from '../store-suite.js';

const ref = { tenant: 'North', id: 'op-1' };

export function effectCases(t: CaseRegistry): void {
  t.group('effect journal', (g) => {
    g.test('begin writes pending with its key, first-sent time from the store clock', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      clock.advance(1_000);
      const now = clock.now();
      const begun = await store.effectBegin({
        lease,
        name: 'charge',
        key: 'sk_1',
        provider: 'stub',
        cost: 5000,
      });
      expect(begun.created).toBe(true);
      expect(begun.now).toBe(now);
      expect(begun.row).toEqual({
        tenant: 'North',
        id: 'op-1',
        name: 'charge',
        key: 'sk_1',
        state: 'pending',
        provider: 'stub',
        cost: 5000,
        firstSentAt: now,
        lastSentAt: now,
        sends: 1,
        committedAt: null,
        result: null,
        reference: null,
        error: null,
        epoch: lease.epoch,
      });
      expect(await store.effectList(ref)).toEqual([begun.row]);
      expect((await getRow(store, ref)).effectStartedAt).toBe(now);
    });

    g.test(
      'a cost is kept in whole units, alike on both stores, in the row returned and the row stored',
      async (fx) => {
        const { store } = fx;
        await submitCreated(store);
        const lease = leaseOf(await claimOne(store));
        const begun = await store.effectBegin({ lease, name: 'charge', key: 'sk_1', cost: 12.6 });
        expect(begun.row.cost).toBe(13);
        expect(await store.effectList(ref)).toEqual([begun.row]);
      },
    );

    g.test('begin again returns the existing row, created=false, first-sent time unchanged', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      const first = await store.effectBegin({ lease, name: 'charge', key: 'sk_1' });
      const startedAt = (await getRow(store, ref)).effectStartedAt;
      clock.advance(5_000);
      const again = await store.effectBegin({ lease, name: 'charge', key: 'sk_other' });
      expect(again.created).toBe(false);
      expect(again.now).toBe(clock.now());
      expect(again.row).toEqual(first.row);
      expect(await store.effectList(ref)).toEqual([first.row]);
      expect((await getRow(store, ref)).effectStartedAt).toBe(startedAt);
    });

    g.test('a later attempt finds the row an earlier attempt wrote', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const lease1 = leaseOf(await claimOne(store));
      const first = await store.effectBegin({ lease: lease1, name: 'charge', key: 'sk_1' });
      await store.attemptFinishMany([{ lease: lease1, outcome: 'retry', error: BOOM, delayMs: 0 }]);
      clock.advance(2_000);
      const lease2 = leaseOf(await claimOne(store));
      expectNextEpoch(lease2.epoch, lease1.epoch);
      const again = await store.effectBegin({ lease: lease2, name: 'charge', key: 'sk_1' });
      expect(again.created).toBe(false);
      expect(again.row).toEqual(first.row);
    });

    g.test('recordSend counts one more request and keeps the first-sent time', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      const first = await store.effectBegin({ lease, name: 'charge', key: 'sk_1' });
      clock.advance(2_000);
      const sent = await store.effectRecordSend({ lease, name: 'charge' });
      expect(sent.now).toBe(clock.now());
      expect(sent.row).toEqual({ ...first.row, sends: 2, lastSentAt: clock.now() });
      expect(await store.effectList(ref)).toEqual([sent.row]);
    });

    g.test('markCommitted stores result and reference, once', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      await store.effectBegin({ lease, name: 'charge', key: 'sk_1' });
      clock.advance(700);
      const result = { id: 'ch_1', amount_cents: 5000 };
      expect(await store.effectMarkCommitted({ lease, name: 'charge', result, reference: 'ch_1' })).toBe(
        true,
      );
      const [row] = await store.effectList(ref);
      expect(row).toMatchObject({ state: 'committed', result, reference: 'ch_1', committedAt: clock.now() });
      clock.advance(700);
      expect(
        await store.effectMarkCommitted({ lease, name: 'charge', result: 'other', reference: 'x' }),
      ).toBe(false);
      expect(await store.effectMarkFailed({ lease, name: 'charge', error: BOOM })).toBe(false);
      expect(await store.effectMarkAbsent({ lease, name: 'charge' })).toBe(false);
      expect(await store.effectList(ref)).toEqual([row]);
      expect(
        await store.effectMarkCommitted({ lease, name: 'never-begun', result: 1, reference: null }),
      ).toBe(false);
      expect(await store.effectList(ref)).toHaveLength(1);
    });

    g.test('markFailed records the refusal', async (fx) => {
      const { store } = fx;
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      await store.effectBegin({ lease, name: 'charge', key: 'sk_1' });
      const error = { code: 'card-declined', message: 'declined' };
      expect(await store.effectMarkFailed({ lease, name: 'charge', error })).toBe(true);
      expect((await store.effectList(ref))[0]).toMatchObject({ state: 'failed', error, committedAt: null });
    });

    g.test('markAbsent, then a new send restarts the retention window', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      await store.effectBegin({ lease, name: 'charge', key: 'sk_1' });
      expect(await store.effectMarkAbsent({ lease, name: 'charge' })).toBe(true);
      expect(await store.effectMarkAbsent({ lease, name: 'charge' })).toBe(false);
      expect((await store.effectList(ref))[0]?.state).toBe('absent');
      clock.advance(3_000);
      const sent = await store.effectRecordSend({ lease, name: 'charge' });
      expect(sent.row).toMatchObject({ state: 'pending', firstSentAt: clock.now(), sends: 2, key: 'sk_1' });
    });

    g.test(
      'a pending cancel refuses a new send from absent; a send needs a pending or absent effect',
      async (fx) => {
        const { store } = fx;
        await submitCreated(store);
        const lease = leaseOf(await claimOne(store));
        await store.effectBegin({ lease, name: 'charge', key: 'sk_1' });
        expect(await store.effectMarkAbsent({ lease, name: 'charge' })).toBe(true);
        expect((await store.operationCancel(ref))?.outcome).toBe('requested');
        const refused = await store.effectRecordSend({ lease, name: 'charge' }).catch((e) => e);
        expect(refused.code).toBe('cancel-requested');
        expect((await store.effectList(ref))[0]).toMatchObject({ state: 'absent', sends: 1 });
        const missing = await store.effectRecordSend({ lease, name: 'never-begun' }).catch((e) => e);
        expect(missing.code).toBe('cancel-requested');
        expect(await store.attemptFinishMany([{ lease, outcome: 'cancelled' }])).toEqual([true]);
        expect((await store.operationGet(ref))?.state).toBe('cancelled');
      },
    );

    g.test('a send under a committed effect is refused as an invalid state, not a lost lease', async (fx) => {
      const { store } = fx;
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      await store.effectBegin({ lease, name: 'charge', key: 'sk_1' });
      await store.effectMarkCommitted({ lease, name: 'charge', result: 1, reference: null });
      const refused = await store.effectRecordSend({ lease, name: 'charge' }).catch((e) => e);
      expect(refused.code).toBe('operation-state-invalid');
    });

    g.test('begins in a batch: each item answered alone, a refusal writes nothing for it', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany(['a', 'b', 'c', 'd'].map((id) => submitParams({ id })));
      const [a, b, c, d] = await claim(store, { limit: 4 });
      expect((await store.operationCancel({ tenant: 'North', id: 'c' }))?.outcome).toBe('requested');
      const stale = { ...leaseOf(b!), epoch: b!.epoch + 1 };
      const spendOver = [{ key: 'spend:p:*', limit: 10, windowMs: 60_000, cost: 11 }];
      const out = await store.effectBeginMany([
        { lease: leaseOf(a!), name: 'charge', key: 'k-a' },
        { lease: stale, name: 'charge', key: 'k-b' },
        { lease: leaseOf(c!), name: 'charge', key: 'k-c' },
        { lease: leaseOf(d!), name: 'charge', key: 'k-d', spend: spendOver },
        { lease: leaseOf(a!), name: 'charge', key: 'k-a' },
      ]);
      expect(
        out.map((o) =>
          o.ok ? (o.value.created ? 'created' : 'existing') : (o.error as { code: string }).code,
        ),
      ).toEqual(['created', 'lease-lost', 'cancel-requested', 'budget-exhausted', 'existing']);
      for (const id of ['b', 'c', 'd']) {
        expect(await store.effectList({ tenant: 'North', id })).toEqual([]);
        expect((await getRow(store, { tenant: 'North', id })).effectStartedAt).toBeNull();
      }
      expect((await store.effectList({ tenant: 'North', id: 'a' })).map((e) => [e.state, e.key])).toEqual([
        ['pending', 'k-a'],
      ]);
      expect(await store.budgetUsage({ prefix: 'spend:', since: 0 })).toEqual([]);
    });

    g.test('marks in a batch: committed, absent and failed, fenced item by item', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany(['a', 'b', 'c'].map((id) => submitParams({ id })));
      const rows = await claim(store, { limit: 3 });
      for (const row of rows) await store.effectBegin({ lease: leaseOf(row), name: 'charge', key: row.id });
      const [a, b, c] = rows;
      const out = await store.effectMarkMany([
        { lease: leaseOf(a!), name: 'charge', state: 'committed', result: { id: 'ch_1' }, reference: 'ch_1' },
        { lease: leaseOf(b!), name: 'charge', state: 'absent' },
        { lease: { ...leaseOf(c!), epoch: c!.epoch + 1 }, name: 'charge', state: 'failed', error: BOOM },
        { lease: leaseOf(a!), name: 'charge', state: 'failed', error: BOOM },
      ]);
      expect(out).toEqual([true, true, false, false]);
      const state = async (id: string) => (await store.effectList({ tenant: 'North', id }))[0]?.state;
      expect([await state('a'), await state('b'), await state('c')]).toEqual([
        'committed',
        'absent',
        'pending',
      ]);
      expect((await store.effectList({ tenant: 'North', id: 'a' }))[0]).toMatchObject({
        result: { id: 'ch_1' },
        reference: 'ch_1',
      });
    });

    g.test('effects are journaled per name', async (fx) => {
      const { store } = fx;
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      expect((await store.effectBegin({ lease, name: 'charge', key: 'k1' })).created).toBe(true);
      expect((await store.effectBegin({ lease, name: 'email', key: 'k2' })).created).toBe(true);
      await store.effectMarkCommitted({ lease, name: 'charge', result: 1, reference: null });
      const rows = await store.effectList(ref);
      expect(rows.map((r) => [r.name, r.key, r.state]).sort()).toEqual([
        ['charge', 'k1', 'committed'],
        ['email', 'k2', 'pending'],
      ]);
      expect(await store.effectList({ tenant: 'South', id: 'op-1' })).toEqual([]);
    });

    g.test(
      'begin is refused (cancel-requested) while a cancel is pending and no effect began',
      async (fx) => {
        const { store } = fx;
        await submitCreated(store);
        const lease = leaseOf(await claimOne(store));
        expect((await store.operationCancel(ref))?.outcome).toBe('requested');
        expect(await rejectionCode(store.effectBegin({ lease, name: 'charge', key: 'k' }))).toBe(
          'cancel-requested',
        );
        expect(await store.effectList(ref)).toEqual([]);
        expect(await getRow(store, ref)).toMatchObject({
          state: 'running',
          cancel: 'requested',
          effectStartedAt: null,
        });
      },
    );

    g.test('a begun effect is the point of no return: a later cancel is too late', async (fx) => {
      const { store } = fx;
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      await store.effectBegin({ lease, name: 'charge', key: 'k' });
      const out = await store.operationCancel(ref);
      expect(out?.outcome).toBe('too_late');
      expect(out?.row).toMatchObject({ state: 'running', cancel: 'too_late' });
      expect(await store.leaseExtendMany({ leases: [lease], leaseMs: 1_000 })).toEqual([
        { ok: true, cancelRequested: false },
      ]);
      // The operation runs to its end: later effects may still begin.
      expect((await store.effectBegin({ lease, name: 'email', key: 'k2' })).created).toBe(true);
      expect(await store.attemptFinishMany([{ lease, outcome: 'succeeded', result: 'charged' }])).toEqual([
        true,
      ]);
      expect(await getRow(store, ref)).toMatchObject({
        state: 'succeeded',
        cancel: 'too_late',
        result: 'charged',
      });
    });
  });
}
