/**
 * @module test/conformance/cases/leases
 * Claims, leases and fencing. A claim moves an operation to `running` under a new epoch and a
 * lease stamped by the store clock; the heartbeat extends only the lease it names; the rescuer
 * redelivers or parks operations whose lease expired; and every write of an attempt whose epoch
 * is no longer current is refused and changes nothing.
 */
import { expect } from 'vitest';
import type { FinishParams, LeaseRef, OperationRow } from '../../../src/store/types.js';
import {
  BOOM,
  claim,
  claimOne,
  expectCountersTrue,
  expectNextEpoch,
  expireAndRescue,
  getRow,
  LEASE_MS,
  leaseOf,
  RESCUE,
  rejectionCode as rejectionCodeOf,
  type StoreFixture,
  submitCreated,
  submitParams,
} from '../fixtures.js';
import type { CaseRegistry } from '../store-suite.js';

const ref = { tenant: 'North', id: 'op-1' };

/** One operation claimed, its lease expired and rescued, then claimed again under a new epoch. */
async function staleAndCurrent(fx: StoreFixture): Promise<{ stale: LeaseRef; current: LeaseRef }> {
  await submitCreated(fx.store);
  const first = await claimOne(fx.store, { owner: 'paused' });
  expect(await expireAndRescue(fx)).toMatchObject([{ ...ref, to: 'queued' }]);
  const second = await claimOne(fx.store, { owner: 'w2' });
  expectNextEpoch(second.epoch, first.epoch);
  return { stale: leaseOf(first), current: leaseOf(second) };
}

const EVERY_OUTCOME = (lease: LeaseRef): FinishParams[] => [
  { lease, outcome: 'succeeded', result: 'late' },
  { lease, outcome: 'failed', error: BOOM },
  { lease, outcome: 'retry', error: BOOM, delayMs: 0 },
  { lease, outcome: 'dead', error: BOOM },
  { lease, outcome: 'needs_reconciliation', error: BOOM },
  { lease, outcome: 'cancelled' },
  { lease, outcome: 'released' },
];

export function leaseCases(t: CaseRegistry): void {
  t.group('states and counters', (g) => {
    g.test('a claim moves queued → running: attempt and epoch +1, lease from the store clock', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      clock.advance(500);
      const now = clock.now();
      const result = await store.operationClaimMany({
        class: 'default',
        owner: 'w1',
        limit: 10,
        leaseMs: 30_000,
      });
      expect(result.now).toBe(now);
      expect(result.rows).toHaveLength(1);
      expect(result.rows[0]).toMatchObject({
        state: 'running',
        attempt: 1,
        leaseOwner: 'w1',
        leaseExpiresAt: now + 30_000,
        startedAt: now,
        finishedAt: null,
      });
      expectNextEpoch(result.rows[0]!.epoch, 0);
      expect(await getRow(store, ref)).toEqual(result.rows[0]);
      expect(await store.queueStats()).toEqual([
        { class: 'default', tenant: 'North', waiting: 0, running: 1 },
      ]);
    });

    g.test(
      'a claim returns nothing when nothing is ready, and never a running operation',
      async ({ store }) => {
        expect(await claim(store, { limit: 5 })).toEqual([]);
        await submitCreated(store);
        await claimOne(store, { owner: 'w1' });
        expect(await claim(store, { owner: 'w2', limit: 5 })).toEqual([]);
      },
    );

    g.test('every claim takes a new epoch; the attempt counts claims of the current count', async (fx) => {
      const { store } = fx;
      await submitCreated(store);
      const first = await claimOne(store);
      await store.attemptFinishMany([{ lease: leaseOf(first), outcome: 'retry', error: BOOM, delayMs: 0 }]);
      const second = await claimOne(store);
      expectNextEpoch(second.epoch, first.epoch);
      expect(second.attempt).toBe(2);
      await store.attemptFinishMany([{ lease: leaseOf(second), outcome: 'released' }]);
      const third = await claimOne(store);
      expectNextEpoch(third.epoch, second.epoch);
      expect(third.attempt).toBe(2);
    });

    g.test('queueStats follows every move between queued, running and the end states', async (fx) => {
      const { store } = fx;
      const stats = async () =>
        (await store.queueStats()).filter((s) => s.waiting !== 0 || s.running !== 0).map((s) => ({ ...s }));
      await store.operationSubmitMany(
        ['a', 'b', 'c', 'd'].map((id) => submitParamsFor(id)).concat(submitParamsFor('e', 'South')),
      );
      expect(await stats()).toEqual([
        { class: 'default', tenant: 'North', waiting: 4, running: 0 },
        { class: 'default', tenant: 'South', waiting: 1, running: 0 },
      ]);
      const rows = await claim(store, { limit: 5 });
      expect(rows).toHaveLength(5);
      const north = rows.filter((r) => r.tenant === 'North');
      await store.attemptFinishMany([
        { lease: leaseOf(north[0]!), outcome: 'succeeded', result: 1 },
        { lease: leaseOf(north[1]!), outcome: 'retry', error: BOOM, delayMs: 60_000 },
        { lease: leaseOf(north[2]!), outcome: 'released' },
      ]);
      await store.operationCancel({ tenant: 'North', id: north[3]!.id });
      expect(await stats()).toEqual([
        { class: 'default', tenant: 'North', waiting: 2, running: 1 },
        { class: 'default', tenant: 'South', waiting: 0, running: 1 },
      ]);
      expect(await expireAndRescue(fx)).toHaveLength(2);
      // The running North operation had a cancel pending: it ends cancelled; South's is redelivered.
      expect(await stats()).toEqual([
        { class: 'default', tenant: 'North', waiting: 2, running: 0 },
        { class: 'default', tenant: 'South', waiting: 1, running: 0 },
      ]);
    });
  });

  t.group('leases', (g) => {
    g.test('leaseExtendMany extends only leases matching tenant, id, epoch and running', async (fx) => {
      const { store, clock } = fx;
      await store.operationSubmitMany(['a', 'b', 'c', 'd'].map((id) => submitParamsFor(id)));
      const claimed = await claim(store, { limit: 3 });
      const [a, b, c] = claimed;
      const d = ['a', 'b', 'c', 'd'].find((id) => !claimed.some((r) => r.id === id))!;
      await store.operationCancel({ tenant: 'North', id: b!.id });
      await store.attemptFinishMany([{ lease: leaseOf(c!), outcome: 'succeeded', result: null }]);
      const before = await getRow(store, a!);
      clock.advance(10_000);
      const now = clock.now();
      const statuses = await store.leaseExtendMany({
        leaseMs: 45_000,
        leases: [
          leaseOf(a!),
          leaseOf(b!),
          { ...leaseOf(a!), epoch: a!.epoch - 1 },
          { ...leaseOf(a!), epoch: a!.epoch + 1 },
          { ...leaseOf(a!), tenant: 'South' },
          leaseOf(c!),
          { tenant: 'North', id: d, epoch: 0 },
          { tenant: 'North', id: 'nope', epoch: 1 },
        ],
      });
      expect(statuses).toEqual([
        { ok: true, cancelRequested: false },
        { ok: true, cancelRequested: true },
        { ok: false, cancelRequested: false },
        { ok: false, cancelRequested: false },
        { ok: false, cancelRequested: false },
        { ok: false, cancelRequested: false },
        { ok: false, cancelRequested: false },
        { ok: false, cancelRequested: false },
      ]);
      expect(await getRow(store, a!)).toMatchObject({
        state: 'running',
        epoch: before.epoch,
        leaseExpiresAt: now + 45_000,
      });
      expect((await getRow(store, b!)).leaseExpiresAt).toBe(now + 45_000);
      expect(await getRow(store, c!)).toMatchObject({ state: 'succeeded', leaseExpiresAt: null });
      expect(await getRow(store, { tenant: 'North', id: d })).toMatchObject({
        state: 'queued',
        leaseExpiresAt: null,
      });
      expect(await store.leaseExtendMany({ leases: [], leaseMs: 1 })).toEqual([]);
    });

    g.test(
      "leasesHeld lists an owner's running leases of one class; a release gives the attempt back",
      async (fx) => {
        const { store } = fx;
        await store.operationSubmitMany([
          ...['a', 'b', 'c'].map((id) => submitParamsFor(id)),
          submitParams({ id: 'x', class: 'bulk' }),
        ]);
        const mine = await claim(store, { owner: 'w1', limit: 2 });
        const theirs = await claim(store, { owner: 'w2', limit: 1 });
        await claim(store, { owner: 'w1', class: 'bulk', limit: 1 });
        const byId = (a: LeaseRef, b: LeaseRef) => a.id.localeCompare(b.id);
        expect([...(await store.leasesHeld({ owner: 'w1', class: 'default' }))].sort(byId)).toEqual(
          mine.map(leaseOf).sort(byId),
        );
        expect(await store.leasesHeld({ owner: 'w2', class: 'default' })).toEqual(theirs.map(leaseOf));
        expect(await store.leasesHeld({ owner: 'w3', class: 'default' })).toEqual([]);
        // An ended attempt holds nothing; a released one goes back to the queue, its attempt given back.
        const [ended, lost] = mine;
        await store.attemptFinishMany([{ lease: leaseOf(ended!), outcome: 'succeeded', result: null }]);
        expect(await store.attemptFinishMany([{ lease: leaseOf(lost!), outcome: 'released' }])).toEqual([
          true,
        ]);
        expect(await store.leasesHeld({ owner: 'w1', class: 'default' })).toEqual([]);
        expect(await getRow(store, lost!)).toMatchObject({ state: 'queued', attempt: 0, leaseOwner: null });
        await expectCountersTrue(store);
      },
    );

    g.test('no rescue while the lease holds; a heartbeat keeps it holding', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const row = await claimOne(store);
      clock.advance(LEASE_MS - 1);
      expect(await store.leaseRescue(RESCUE)).toEqual([]);
      expect(await store.leaseExtendMany({ leases: [leaseOf(row)], leaseMs: LEASE_MS })).toEqual([
        { ok: true, cancelRequested: false },
      ]);
      clock.advance(LEASE_MS - 1); // past the first expiry, inside the extended one
      expect(await store.leaseRescue(RESCUE)).toEqual([]);
      expect((await getRow(store, ref)).state).toBe('running');
    });

    g.test(
      'an expired lease is rescued back to the queue, recorded as a lease-expired attempt',
      async (fx) => {
        const { store, clock } = fx;
        await submitCreated(store);
        const startedAt = clock.now();
        const { epoch } = await claimOne(store, { owner: 'crashed' });
        expect(await expireAndRescue(fx)).toMatchObject([{ ...ref, to: 'queued' }]);
        const now = clock.now();
        expect(await getRow(store, ref)).toMatchObject({
          state: 'queued',
          attempt: 1,
          epoch,
          leaseExpiries: 1,
          leaseOwner: null,
          leaseExpiresAt: null,
          runAfter: now,
          finishedAt: null,
        });
        const attempts = await store.attemptList(ref);
        expect(attempts).toHaveLength(1);
        expect(attempts[0]).toMatchObject({
          attempt: 1,
          epoch,
          owner: 'crashed',
          startedAt,
          endedAt: now,
          outcome: 'lease-expired',
          error: { code: 'lease-expired', message: 'lease held by crashed expired' },
        });
        // Redelivery: the next claim gets it under a new epoch.
        const again = await claimOne(store, { owner: 'w2' });
        expect(again).toMatchObject({ attempt: 2, leaseOwner: 'w2' });
        expectNextEpoch(again.epoch, epoch);
      },
    );

    g.test('an operation that keeps expiring its lease is dead-lettered as a crash loop', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store, { maxAttempts: 10 });
      const epochs: number[] = [];
      for (const expected of ['queued', 'queued', 'dead']) {
        epochs.push((await claimOne(store)).epoch);
        expect(await expireAndRescue(fx, { maxLeaseExpiries: 3 })).toMatchObject([{ ...ref, to: expected }]);
      }
      const row = await getRow(store, ref);
      expect(row).toMatchObject({
        state: 'dead',
        leaseExpiries: 3,
        finishedAt: clock.now(),
        leaseOwner: null,
      });
      expect(row.error?.code).toBe('crash-loop');
      const attempts = await store.attemptList(ref);
      expect(attempts.map((a) => [a.epoch, a.outcome])).toEqual([
        [epochs[0], 'lease-expired'],
        [epochs[1], 'lease-expired'],
        [epochs[2], 'lease-expired'],
      ]);
      expect(await claim(store)).toEqual([]);
    });

    /** Claims everything ready, expires the leases and rescues, keeping every operation queued. */
    const crashAll = async (fx: StoreFixture) => {
      await claim(fx.store, { limit: 100 });
      await expireAndRescue(fx, { maxLeaseExpiries: 10 });
    };
    const idsOf = (rows: OperationRow[]) => rows.map((r) => `${r.tenant}/${r.id}`).sort();

    g.test(
      'a claim told to pass over operations on their last chance leaves them for others: one tenant',
      async (fx) => {
        const { store } = fx;
        await submitCreated(store, { maxAttempts: 10 });
        await crashAll(fx);
        await crashAll(fx);
        await submitCreated(store, { id: 'op-2', maxAttempts: 10 });
        const passing = { class: 'default', owner: 'w1', limit: 10, leaseMs: LEASE_MS, passOver: 2 };
        const first = await store.operationClaimMany(passing);
        expect(first.rows.map((r) => [r.id, r.leaseExpiries])).toEqual([['op-2', 0]]);
        // Nothing else it may take: an empty claim, not one that says work was left under a lock;
        // alone, and riding with an end.
        const second = await store.operationClaimMany(passing);
        expect([second.rows, second.contended ?? false]).toEqual([[], false]);
        const ended = await store.attemptFinishAndClaim(
          [{ lease: leaseOf(first.rows[0]!), outcome: 'succeeded', result: null }],
          passing,
        );
        expect([ended.finished, ended.claim.rows, ended.claim.contended ?? false]).toEqual([
          [true],
          [],
          false,
        ]);
        expect(await getRow(store, ref)).toMatchObject({ state: 'queued', leaseExpiries: 2, attempt: 2 });
        await expectCountersTrue(store);
        // A claim passing over nothing (or over 3 and more) takes it.
        expect((await claimOne(store, { owner: 'w2' })).id).toBe('op-1');
        await expectCountersTrue(store);
      },
    );

    g.test(
      'a claim told to pass over operations on their last chance leaves them for others: many tenants',
      async (fx) => {
        const { store } = fx;
        await submitCreated(store, { maxAttempts: 10 });
        await crashAll(fx);
        await submitCreated(store, { tenant: 'South', id: 'op-3', maxAttempts: 10 });
        await crashAll(fx);
        await submitCreated(store, { id: 'op-2', maxAttempts: 10 });
        await submitCreated(store, { tenant: 'South', id: 'op-4', maxAttempts: 10 });
        // North/op-1 has 2 lease expiries, South/op-3 has 1, the others none.
        const claimed = await store.operationClaimMany({
          class: 'default',
          owner: 'w1',
          limit: 10,
          leaseMs: LEASE_MS,
          passOver: 2,
        });
        expect(idsOf(claimed.rows)).toEqual(['North/op-2', 'South/op-3', 'South/op-4']);
        expect(claimed.contended ?? false).toBe(false);
        expect(await getRow(store, ref)).toMatchObject({ state: 'queued', leaseExpiries: 2 });
        await expectCountersTrue(store);
        await expireAndRescue(fx, { maxLeaseExpiries: 10 });
        // Now North/op-1 and South/op-3 have 2, the others 1: passing over 1 and more leaves all.
        expect(
          (
            await store.operationClaimMany({
              class: 'default',
              owner: 'w1',
              limit: 10,
              leaseMs: LEASE_MS,
              passOver: 1,
            })
          ).rows,
        ).toEqual([]);
        expect(idsOf(await claim(store, { limit: 10 }))).toEqual([
          'North/op-1',
          'North/op-2',
          'South/op-3',
          'South/op-4',
        ]);
        await expectCountersTrue(store);
      },
    );

    g.test('a lease expiry on the last attempt dead-letters: attempts exhausted', async (fx) => {
      await submitCreated(fx.store, { maxAttempts: 2 });
      await claimOne(fx.store);
      expect(await expireAndRescue(fx, { maxLeaseExpiries: 10 })).toMatchObject([{ ...ref, to: 'queued' }]);
      await claimOne(fx.store);
      expect(await expireAndRescue(fx, { maxLeaseExpiries: 10 })).toMatchObject([{ ...ref, to: 'dead' }]);
      expect((await getRow(fx.store, ref)).error?.code).toBe('attempts-exhausted');
    });

    g.test('a lease expiry past the deadline fails the operation', async (fx) => {
      await submitCreated(fx.store, { deadlineMs: 10_000 });
      await claimOne(fx.store);
      expect(await expireAndRescue(fx)).toMatchObject([{ ...ref, to: 'failed' }]);
      const row = await getRow(fx.store, ref);
      expect(row).toMatchObject({ state: 'failed', finishedAt: fx.clock.now() });
      expect(row.error?.code).toBe('deadline-exceeded');
    });

    g.test(
      'a lease expiry past the deadline after effects happened fails the operation, naming them',
      async (fx) => {
        await submitCreated(fx.store, { deadlineMs: 10_000 });
        const lease = leaseOf(await claimOne(fx.store));
        for (const name of ['refund', 'charge', 'absent-one'])
          await fx.store.effectBegin({ lease, name, key: name });
        for (const name of ['refund', 'charge'])
          expect(
            await fx.store.effectMarkCommitted({ lease, name, result: { ok: true }, reference: null }),
          ).toBe(true);
        expect(await fx.store.effectMarkAbsent({ lease, name: 'absent-one' })).toBe(true);
        expect(await expireAndRescue(fx)).toMatchObject([{ ...ref, to: 'failed' }]);
        expect((await getRow(fx.store, ref)).error).toEqual({
          code: 'deadline-exceeded',
          message: 'the operation passed its deadline (after effects that happened: charge, refund)',
          details: { effectsHappened: ['charge', 'refund'] },
        });
      },
    );

    g.test('a lease expiry past the deadline with an effect pending needs reconciliation', async (fx) => {
      await submitCreated(fx.store, { deadlineMs: 10_000 });
      const row = await claimOne(fx.store);
      await fx.store.effectBegin({ lease: leaseOf(row), name: 'charge', key: 'k' });
      expect(await expireAndRescue(fx)).toMatchObject([{ ...ref, to: 'needs_reconciliation' }]);
      expect((await getRow(fx.store, ref)).error?.code).toBe('deadline-exceeded');
      expect((await fx.store.effectList(ref)).map((e) => e.state)).toEqual(['pending']);
    });

    g.test('a lease expiry with a cancel requested ends cancelled', async (fx) => {
      await submitCreated(fx.store);
      await claimOne(fx.store);
      expect((await fx.store.operationCancel(ref))?.outcome).toBe('requested');
      expect(await expireAndRescue(fx)).toMatchObject([{ ...ref, to: 'cancelled' }]);
      expect(await getRow(fx.store, ref)).toMatchObject({ state: 'cancelled', finishedAt: fx.clock.now() });
    });

    g.test('a rescue reports kind, class and, for an end, the time from acceptance', async (fx) => {
      const { store, clock } = fx;
      const accepted = clock.now();
      await submitCreated(store, { maxAttempts: 2, kind: 'export', class: 'bulk' });
      await claimOne(store, { class: 'bulk' });
      clock.advance(LEASE_MS + 1);
      expect(await store.leaseRescue(RESCUE)).toEqual([
        { ...ref, kind: 'export', class: 'bulk', to: 'queued', endToEndMs: null },
      ]);
      await claimOne(store, { class: 'bulk' });
      clock.advance(LEASE_MS + 1);
      expect(await store.leaseRescue(RESCUE)).toEqual([
        { ...ref, kind: 'export', class: 'bulk', to: 'dead', endToEndMs: clock.now() - accepted },
      ]);
    });

    g.test('one rescue of two tenants re-queues them in the order their leases expired', async (fx) => {
      const { store, clock } = fx;
      // A is served five times, B once: A's virtual time is ahead of B's.
      await store.operationSubmitMany([1, 2, 3, 4, 5].map((i) => submitParams({ tenant: 'A', id: `a${i}` })));
      await store.operationSubmitMany([submitParams({ tenant: 'B', id: 'b1' })]);
      const rows = await claim(store, { limit: 6, leaseMs: LEASE_MS });
      expect(rows.map((r) => r.tenant)).toEqual(['A', 'B', 'A', 'A', 'A', 'A']);
      const a = rows.filter((r) => r.tenant === 'A');
      // A's last one is heartbeated later, so B's lease expires first; A's other four end.
      clock.advance(1000);
      expect((await store.leaseExtendMany({ leases: [leaseOf(a[4]!)], leaseMs: LEASE_MS }))[0]?.ok).toBe(
        true,
      );
      expect(
        await store.attemptFinishMany(
          a.slice(0, 4).map((r) => ({ lease: leaseOf(r), outcome: 'succeeded', result: 1 })),
        ),
      ).toEqual([true, true, true, true]);
      clock.advance(LEASE_MS + 1);
      const rescued = await store.leaseRescue(RESCUE);
      expect(rescued.map((r) => `${r.tenant}/${r.id}:${r.to}`)).toEqual(['B/b1:queued', 'A/a5:queued']);
      // B re-entered first, behind fewer claims: it is served first.
      expect((await claim(store, { limit: 1 })).map((r) => r.tenant)).toEqual(['B']);
    });

    g.test('the rescuer works in bounded batches', async (fx) => {
      await fx.store.operationSubmitMany(['a', 'b', 'c'].map((id) => submitParamsFor(id)));
      expect(await claim(fx.store, { limit: 3 })).toHaveLength(3);
      fx.clock.advance(LEASE_MS + 1);
      expect(await fx.store.leaseRescue({ maxLeaseExpiries: 3, limit: 2 })).toHaveLength(2);
      expect(await fx.store.leaseRescue({ maxLeaseExpiries: 3, limit: 2 })).toHaveLength(1);
      expect(await fx.store.leaseRescue({ maxLeaseExpiries: 3, limit: 2 })).toEqual([]);
    });
  });

  t.group('fencing', (g) => {
    g.test('finish with a stale epoch is refused for every outcome and changes nothing', async (fx) => {
      const { stale, current } = await staleAndCurrent(fx);
      const before = await getRow(fx.store, ref);
      const attempts = await fx.store.attemptList(ref);
      expect(await fx.store.attemptFinishMany(EVERY_OUTCOME(stale))).toEqual(Array(7).fill(false));
      expect(await getRow(fx.store, ref)).toEqual(before);
      expect(await fx.store.attemptList(ref)).toEqual(attempts);
      expect(await fx.store.attemptFinishMany([{ lease: current, outcome: 'succeeded', result: 1 }])).toEqual(
        [true],
      );
    });

    g.test('effectBegin with a stale epoch is refused (lease-lost) and writes nothing', async (fx) => {
      const { stale, current } = await staleAndCurrent(fx);
      const before = await getRow(fx.store, ref);
      expect(await rejectionCodeOf(fx.store.effectBegin({ lease: stale, name: 'charge', key: 'k' }))).toBe(
        'lease-lost',
      );
      expect(await fx.store.effectList(ref)).toEqual([]);
      expect(await getRow(fx.store, ref)).toEqual(before);
      expect((await fx.store.effectBegin({ lease: current, name: 'charge', key: 'k' })).created).toBe(true);
    });

    g.test('effect journal writes with a stale epoch are refused; the row is unchanged', async (fx) => {
      const { stale, current } = await staleAndCurrent(fx);
      await fx.store.effectBegin({ lease: current, name: 'charge', key: 'k' });
      const [row] = await fx.store.effectList(ref);
      fx.clock.advance(1_000);
      expect(await rejectionCodeOf(fx.store.effectRecordSend({ lease: stale, name: 'charge' }))).toBe(
        'lease-lost',
      );
      const name = 'charge';
      expect(await fx.store.effectMarkCommitted({ lease: stale, name, result: 1, reference: 'r' })).toBe(
        false,
      );
      expect(await fx.store.effectMarkFailed({ lease: stale, name, error: BOOM })).toBe(false);
      expect(await fx.store.effectMarkAbsent({ lease: stale, name })).toBe(false);
      expect(await fx.store.effectList(ref)).toEqual([row]);
      expect(await fx.store.effectMarkCommitted({ lease: current, name, result: 1, reference: 'r' })).toBe(
        true,
      );
    });

    g.test('leaseExtend with a stale epoch is refused and does not move the lease', async (fx) => {
      const { stale, current } = await staleAndCurrent(fx);
      const before = await getRow(fx.store, ref);
      fx.clock.advance(1_000);
      expect(await fx.store.leaseExtendMany({ leases: [stale, current], leaseMs: LEASE_MS })).toEqual([
        { ok: false, cancelRequested: false },
        { ok: true, cancelRequested: false },
      ]);
      expect((await getRow(fx.store, ref)).leaseExpiresAt).toBe(fx.clock.now() + LEASE_MS);
      expect(before.leaseOwner).toBe('w2');
    });

    g.test('an ended attempt can write nothing more under its own epoch', async (fx) => {
      const { store } = fx;
      await submitCreated(store);
      const row = await claimOne(store);
      const lease = leaseOf(row);
      await store.effectBegin({ lease, name: 'charge', key: 'k' });
      await store.effectMarkCommitted({ lease, name: 'charge', result: 1, reference: 'r' });
      expect(await store.attemptFinishMany([{ lease, outcome: 'succeeded', result: 'first' }])).toEqual([
        true,
      ]);
      const before = await getRow(store, ref);
      expect(await store.attemptFinishMany(EVERY_OUTCOME(lease))).toEqual(Array(7).fill(false));
      expect(await rejectionCodeOf(store.effectBegin({ lease, name: 'email', key: 'k2' }))).toBe(
        'lease-lost',
      );
      expect(await store.effectMarkFailed({ lease, name: 'charge', error: BOOM })).toBe(false);
      expect(await store.leaseExtendMany({ leases: [lease], leaseMs: 1 })).toEqual([
        { ok: false, cancelRequested: false },
      ]);
      expect(await getRow(store, ref)).toEqual(before);
      expect((await store.effectList(ref)).map((e) => [e.name, e.state])).toEqual([['charge', 'committed']]);
    });
  });
}

function submitParamsFor(id: string, tenant = 'North') {
  return submitParams({ id, tenant });
}
