/**
 * @module test/conformance/cases/batches
 * Batches whose items each take a different path, all in one call: every item must get the
 * answer it would get alone, and the admission counters must stay true. PostgreSQL runs these
 * shapes set-based (several items per statement), while single items, repeated ids and budget
 * draws go item by item; the other cases cover those, these cover the set-based paths.
 */
import { expect } from 'vitest';
import {
  BOOM,
  claim,
  expectCountersTrue,
  getRow,
  leaseOf,
  submitCreated,
  submitParams,
} from '../fixtures.js';
import type { CaseRegistry } from '../store-suite.js';

export function batchCases(t: CaseRegistry): void {
  t.group('mixed batches', (g) => {
    g.test('submit: existing, conflict, expired, both caps and created, in item order', async (fx) => {
      const { store, clock } = fx;
      // An id whose operation was purged: a tombstone.
      const gone = await submitCreated(store, { tenant: 'West', id: 'gone' });
      const [goneRun] = await claim(store);
      expect(goneRun?.id).toBe(gone.id);
      await store.attemptFinishMany([{ lease: leaseOf(goneRun!), outcome: 'succeeded', result: null }]);
      clock.advance(10_001);
      expect(
        (await store.retentionPurge({ retentionMs: 10_000, tombstoneMs: 100_000, limit: 10 })).purged,
      ).toBe(1);
      await submitCreated(store, { tenant: 'North', id: 'old' });
      await submitCreated(store, { tenant: 'West', id: 'w-old' });

      const capped = { maxWaiting: 2, maxQueued: 5 };
      const out = await store.operationSubmitMany([
        submitParams({ tenant: 'North', id: 'old', limits: capped }),
        submitParams({ tenant: 'North', id: 'n1', limits: capped }),
        submitParams({ tenant: 'West', id: 'gone', limits: capped }),
        submitParams({ tenant: 'North', id: 'n2', limits: capped }),
        submitParams({ tenant: 'North', id: 'n3', limits: capped }),
        submitParams({ tenant: 'South', id: 's1', limits: capped }),
        submitParams({ tenant: 'South', id: 's2', limits: capped }),
        submitParams({ tenant: 'East', id: 'e1', limits: capped }),
        submitParams({ tenant: 'West', id: 'w-old', input: { invoice: 1, amount_cents: 1 }, limits: capped }),
        submitParams({ tenant: 'East', id: 'e2', class: 'bulk', limits: capped }),
      ]);
      expect(out.map((o) => o.status)).toEqual([
        'existing',
        'created',
        'expired',
        'rejected',
        'rejected',
        'created',
        'created',
        'rejected',
        'conflict',
        'created',
      ]);
      // North had `old` waiting, then n1: its cap of 2 is full for n2 and n3.
      expect(out[3]).toMatchObject({ reason: 'tenant-queue-full', waiting: 2, running: 0 });
      expect(out[4]).toMatchObject({ reason: 'tenant-queue-full', waiting: 2 });
      // old, w-old, n1, s1 and s2 fill the class bound of 5: it counts the batch's own additions.
      expect(out[7]).toMatchObject({ reason: 'class-queue-full', waiting: 5 });
      expect(out[2]).toEqual({ status: 'expired', digestMatches: true });
      const created = out
        .filter((o) => o.status === 'created')
        .map((o) => (o as { row: { id: string } }).row.id);
      expect(created).toEqual(['n1', 's1', 's2', 'e2']);
      expect((out[0] as { row: { id: string; state: string } }).row).toMatchObject({
        id: 'old',
        state: 'queued',
      });
      expect((out[8] as { row: { id: string } }).row.id).toBe('w-old');
      expect(await store.operationGet({ tenant: 'North', id: 'n2' })).toBeUndefined();
      expect(await store.operationGet({ tenant: 'West', id: 'gone' })).toBeUndefined();
      await expectCountersTrue(store);
    });

    g.test('submit without limits: created in order, counters true', async ({ store }) => {
      const out = await store.operationSubmitMany([
        submitParams({ tenant: 'B', id: '1' }),
        submitParams({ tenant: 'A', id: '1' }),
        submitParams({ tenant: 'B', id: '2', delayMs: 60_000 }),
        submitParams({ tenant: 'A', id: '2', class: 'bulk' }),
      ]);
      expect(out.map((o) => [o.status, (o as { row: { tenant: string; id: string } }).row.id])).toEqual([
        ['created', '1'],
        ['created', '1'],
        ['created', '2'],
        ['created', '2'],
      ]);
      expect(out.map((o) => (o as { row: { tenant: string } }).row.tenant)).toEqual(['B', 'A', 'B', 'A']);
      await expectCountersTrue(store);
      // The delayed one is not claimable yet; the others are.
      expect((await claim(store, { limit: 10 })).map((r) => `${r.tenant}/${r.id}`).sort()).toEqual([
        'A/1',
        'B/1',
      ]);
      await expectCountersTrue(store);
    });

    g.test('effect begins: created, existing, lease-lost, cancel-requested, call-limit', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany(['a', 'b', 'c', 'd', 'e'].map((id) => submitParams({ id })));
      const [a, b, c, d, e] = await claim(store, { limit: 5 });
      expect((await store.operationCancel({ tenant: 'North', id: c!.id }))?.outcome).toBe('requested');
      // d already made its one allowed request; e began its effect in an earlier attempt's call.
      await store.effectBegin({ lease: leaseOf(d!), name: 'first', key: 'k-d1' });
      await store.effectBegin({ lease: leaseOf(e!), name: 'charge', key: 'k-e' });
      // A refused item writes nothing: its row keeps the time of its last write, though the clock moved.
      const before = await Promise.all([b!, c!, d!].map((row) => getRow(store, row)));
      fx.clock.advance(1000);
      const out = await store.effectBeginMany([
        { lease: leaseOf(a!), name: 'charge', key: 'k-a', provider: 'pay', cost: 120, maxCalls: 5 },
        { lease: { ...leaseOf(b!), epoch: b!.epoch + 1 }, name: 'charge', key: 'k-b', maxCalls: 5 },
        { lease: leaseOf(c!), name: 'charge', key: 'k-c', maxCalls: 5 },
        { lease: leaseOf(d!), name: 'second', key: 'k-d2', maxCalls: 1 },
        { lease: leaseOf(e!), name: 'charge', key: 'k-e-again', maxCalls: 5 },
      ]);
      expect(
        out.map((o) =>
          o.ok ? (o.value.created ? 'created' : 'existing') : (o.error as { code: string }).code,
        ),
      ).toEqual(['created', 'lease-lost', 'cancel-requested', 'provider-call-limit-exceeded', 'existing']);
      const aRow = out[0]!.ok ? out[0]!.value.row : undefined;
      expect(aRow).toMatchObject({
        name: 'charge',
        key: 'k-a',
        state: 'pending',
        provider: 'pay',
        cost: 120,
        sends: 1,
      });
      // The rows answered are the rows stored, a created one and an existing one alike.
      expect(await store.effectList(a!)).toEqual([aRow]);
      expect(await store.effectList(e!)).toEqual([out[4]!.ok && out[4]!.value.row]);
      // The existing row comes back as it was: its own key, not the one asked for again.
      expect(out[4]!.ok && out[4]!.value.row.key).toBe('k-e');
      expect((await getRow(store, a!)).effectStartedAt).not.toBeNull();
      expect((await getRow(store, e!)).effectStartedAt).not.toBeNull();
      for (const row of [b!, c!]) {
        expect(await store.effectList(row)).toEqual([]);
        expect((await getRow(store, row)).effectStartedAt).toBeNull();
      }
      expect((await store.effectList(d!)).map((x) => x.name)).toEqual(['first']);
      expect(await Promise.all([b!, c!, d!].map((row) => getRow(store, row)))).toEqual(before);
    });

    g.test('effect begins with a budget draw: the over-budget item is refused alone', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany(['a', 'b'].map((id) => submitParams({ id })));
      const [a, b] = await claim(store, { limit: 2 });
      const spend = (cost: number) => [{ key: 'spend:p:*', limit: 10, windowMs: 60_000, cost }];
      const out = await store.effectBeginMany([
        { lease: leaseOf(a!), name: 'charge', key: 'k-a', spend: spend(11) },
        { lease: leaseOf(b!), name: 'charge', key: 'k-b', spend: spend(4) },
      ]);
      expect(out.map((o) => (o.ok ? 'created' : (o.error as { code: string }).code))).toEqual([
        'budget-exhausted',
        'created',
      ]);
      expect(await store.effectList(a!)).toEqual([]);
      expect((await getRow(store, a!)).effectStartedAt).toBeNull();
      expect((await getRow(store, b!)).effectStartedAt).not.toBeNull();
      expect((await store.budgetUsage({ prefix: 'spend:', since: 0 })).map((u) => u.reserved)).toEqual([4]);
    });

    g.test('effect begins with budget draws: a window no item drew on is not left behind', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany(['a', 'b', 'c'].map((id) => submitParams({ id })));
      const [a, b, c] = await claim(store, { limit: 3 });
      const spend = (key: string, cost: number) => [{ key, limit: 10, windowMs: 60_000, cost }];
      const out = await store.effectBeginMany([
        {
          lease: leaseOf(a!),
          name: 'charge',
          key: 'k-a',
          spend: [...spend('spend:x', 11), ...spend('spend:y', 1)],
        },
        { lease: leaseOf(b!), name: 'charge', key: 'k-b', spend: spend('spend:y', 2) },
        {
          lease: { ...leaseOf(c!), epoch: c!.epoch + 1 },
          name: 'charge',
          key: 'k-c',
          spend: spend('spend:z', 1),
        },
      ]);
      expect(out.map((o) => (o.ok ? 'created' : (o.error as { code: string }).code))).toEqual([
        'budget-exhausted',
        'created',
        'lease-lost',
      ]);
      expect(
        (await store.budgetUsage({ prefix: 'spend:', since: 0 })).map((u) => [
          u.key,
          u.reserved,
          u.committed,
        ]),
      ).toEqual([['spend:y', 2, 0]]);
    });

    g.test('effect marks: two effects of one operation, fenced and state-checked per item', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany(['a', 'b', 'c'].map((id) => submitParams({ id })));
      const [a, b, c] = await claim(store, { limit: 3 });
      for (const [row, name] of [
        [a!, 'charge'],
        [a!, 'email'],
        [b!, 'charge'],
        [b!, 'refund'],
        [c!, 'charge'],
      ] as const)
        await store.effectBegin({ lease: leaseOf(row), name, key: `${row.id}-${name}` });
      await store.effectMarkAbsent({ lease: leaseOf(b!), name: 'refund' });
      await store.effectMarkCommitted({ lease: leaseOf(c!), name: 'charge', result: 1, reference: null });
      const out = await store.effectMarkMany([
        { lease: leaseOf(a!), name: 'charge', state: 'committed', result: { id: 'ch_a' }, reference: 'ch_a' },
        { lease: leaseOf(a!), name: 'email', state: 'absent' },
        { lease: { ...leaseOf(b!), epoch: b!.epoch + 1 }, name: 'charge', state: 'failed', error: BOOM },
        { lease: leaseOf(b!), name: 'refund', state: 'failed', error: BOOM },
        { lease: leaseOf(c!), name: 'charge', state: 'failed', error: BOOM },
        { lease: leaseOf(c!), name: 'missing', state: 'absent' },
      ]);
      expect(out).toEqual([true, true, false, true, false, false]);
      const states = async (row: { tenant: string; id: string }) =>
        Object.fromEntries((await store.effectList(row)).map((x) => [x.name, x.state]));
      expect(await states(a!)).toEqual({ charge: 'committed', email: 'absent' });
      expect(await states(b!)).toEqual({ charge: 'pending', refund: 'failed' });
      expect(await states(c!)).toEqual({ charge: 'committed' });
      const [charge] = (await store.effectList(a!)).filter((x) => x.name === 'charge');
      expect(charge).toMatchObject({ result: { id: 'ch_a' }, reference: 'ch_a' });
      expect(charge?.committedAt).not.toBeNull();
      const [refund] = (await store.effectList(b!)).filter((x) => x.name === 'refund');
      expect(refund?.error).toMatchObject({ code: 'boom' });
    });

    g.test('finish: every outcome in one batch, the same lease twice, counters true', async (fx) => {
      const { store, clock } = fx;
      const ids = [
        'ok',
        'fail',
        'failpending',
        'retry',
        'release',
        'cancelled',
        'latecancel',
        'stale',
        'dead',
      ];
      await store.operationSubmitMany(
        ids.map((id) => submitParams({ id, tenant: id === 'dead' ? 'South' : 'North' })),
      );
      const rows = Object.fromEntries((await claim(store, { limit: ids.length })).map((r) => [r.id, r]));
      expect(Object.keys(rows).sort()).toEqual([...ids].sort());
      await store.effectBegin({ lease: leaseOf(rows.failpending!), name: 'charge', key: 'k1' });
      await store.effectBegin({ lease: leaseOf(rows.latecancel!), name: 'charge', key: 'k2' });
      await store.effectMarkCommitted({
        lease: leaseOf(rows.latecancel!),
        name: 'charge',
        result: 1,
        reference: null,
      });
      clock.advance(1_000);
      const now = clock.now();
      const out = await store.attemptFinishMany([
        { lease: leaseOf(rows.ok!), outcome: 'succeeded', result: { n: 1 } },
        { lease: leaseOf(rows.fail!), outcome: 'failed', error: BOOM },
        { lease: leaseOf(rows.failpending!), outcome: 'failed', error: BOOM },
        { lease: leaseOf(rows.retry!), outcome: 'retry', error: BOOM, delayMs: 5_000 },
        { lease: leaseOf(rows.release!), outcome: 'released' },
        { lease: leaseOf(rows.cancelled!), outcome: 'cancelled' },
        { lease: leaseOf(rows.latecancel!), outcome: 'cancelled' },
        { lease: { ...leaseOf(rows.stale!), epoch: rows.stale!.epoch + 1 }, outcome: 'succeeded', result: 1 },
        { lease: leaseOf(rows.dead!), outcome: 'dead', error: BOOM },
        { lease: leaseOf(rows.ok!), outcome: 'failed', error: BOOM },
      ]);
      expect(out).toEqual([true, true, true, true, true, true, true, false, true, false]);
      const at = async (id: string) => getRow(store, { tenant: id === 'dead' ? 'South' : 'North', id });
      expect(await at('ok')).toMatchObject({
        state: 'succeeded',
        result: { n: 1 },
        finishedAt: now,
        attempt: 1,
      });
      expect(await at('fail')).toMatchObject({ state: 'failed', error: BOOM, finishedAt: now });
      expect(await at('failpending')).toMatchObject({ state: 'needs_reconciliation' });
      expect(await at('retry')).toMatchObject({
        state: 'queued',
        runAfter: now + 5_000,
        attempt: 1,
        error: BOOM,
      });
      expect(await at('release')).toMatchObject({
        state: 'queued',
        runAfter: now,
        attempt: 0,
        finishedAt: null,
      });
      expect(await at('cancelled')).toMatchObject({ state: 'cancelled', finishedAt: now });
      // Past the point of no return a cancel cannot end it: released back to the queue.
      expect(await at('latecancel')).toMatchObject({ state: 'queued', attempt: 0 });
      expect(await at('stale')).toMatchObject({ state: 'running', leaseOwner: 'w1' });
      expect(await at('dead')).toMatchObject({ state: 'dead', error: BOOM });
      expect((await store.attemptList({ tenant: 'North', id: 'retry' })).map((x) => x.outcome)).toEqual([
        'retry',
      ]);
      expect((await store.attemptList({ tenant: 'North', id: 'ok' })).map((x) => x.outcome)).toEqual([
        'succeeded',
      ]);
      expect((await store.attemptList({ tenant: 'North', id: 'latecancel' })).map((x) => x.outcome)).toEqual([
        'released',
      ]);
      expect(await store.attemptList({ tenant: 'North', id: 'stale' })).toEqual([]);
      await expectCountersTrue(store);
    });
  });
}
