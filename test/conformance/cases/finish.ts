/**
 * @module test/conformance/cases/finish
 * The end of an attempt (`attemptFinishMany`) and cancellation. Each outcome lands in its state
 * with its attempt row; `failed` never hides a pending effect; a retry waits for its durable
 * `run_after`; a release does not use an attempt. A cancel is answered by state: `cancelled`,
 * `requested` or `too_late`.
 */
import { expect } from 'vitest';
import type { Store } from '../../../src/store/store.js';
import type { OperationRow } from '../../../src/store/types.js';
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
  type StoreFixture,
  submitCreated,
  submitParams,
} from '../fixtures.js';
import type { CaseRegistry } from '../store-suite.js';

const ref = { tenant: 'North', id: 'op-1' };

async function running(
  fx: StoreFixture,
  over: Parameters<typeof submitCreated>[1] = {},
): Promise<OperationRow> {
  await submitCreated(fx.store, over);
  return claimOne(fx.store, { owner: 'w1' });
}

export function finishCases(t: CaseRegistry): void {
  t.group('finish outcomes', (g) => {
    g.test('succeeded: the result is kept, the lease released, the attempt recorded', async (fx) => {
      const { store, clock } = fx;
      const row = await running(fx);
      const startedAt = clock.now();
      clock.advance(1_500);
      const now = clock.now();
      expect(
        await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'succeeded', result: { ok: 1 } }]),
      ).toEqual([true]);
      expect(await getRow(store, ref)).toMatchObject({
        state: 'succeeded',
        result: { ok: 1 },
        error: null,
        attempt: 1,
        epoch: row.epoch,
        finishedAt: now,
        updatedAt: now,
        leaseOwner: null,
        leaseExpiresAt: null,
      });
      expect(await store.attemptList(ref)).toEqual([
        {
          tenant: 'North',
          id: 'op-1',
          attempt: 1,
          epoch: row.epoch,
          owner: 'w1',
          startedAt,
          endedAt: now,
          outcome: 'succeeded',
          error: null,
          retryDelayMs: null,
        },
      ]);
    });

    g.test('succeeded with a cancel pending reports the cancel too late', async (fx) => {
      const row = await running(fx);
      expect((await fx.store.operationCancel(ref))?.outcome).toBe('requested');
      await fx.store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'succeeded', result: 7 }]);
      expect(await getRow(fx.store, ref)).toMatchObject({
        state: 'succeeded',
        result: 7,
        cancel: 'too_late',
      });
    });

    g.test('failed: the error is kept', async (fx) => {
      const row = await running(fx);
      await fx.store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'failed', error: BOOM }]);
      expect(await getRow(fx.store, ref)).toMatchObject({
        state: 'failed',
        error: BOOM,
        finishedAt: fx.clock.now(),
      });
      expect((await fx.store.attemptList(ref))[0]).toMatchObject({ outcome: 'failed', error: BOOM });
    });

    g.test(
      'failed with an effect pending ends needs_reconciliation; a committed one does not',
      async (fx) => {
        const { store } = fx;
        await store.operationSubmitMany([submitParams({ id: 'pending' }), submitParams({ id: 'committed' })]);
        const rows = await claim(store, { limit: 2 });
        for (const row of rows) await store.effectBegin({ lease: leaseOf(row), name: 'charge', key: row.id });
        const committed = rows.find((r) => r.id === 'committed')!;
        await store.effectMarkCommitted({
          lease: leaseOf(committed),
          name: 'charge',
          result: 1,
          reference: null,
        });
        await store.attemptFinishMany(
          rows.map((r) => ({ lease: leaseOf(r), outcome: 'failed' as const, error: BOOM })),
        );
        expect((await getRow(store, { tenant: 'North', id: 'pending' })).state).toBe('needs_reconciliation');
        expect((await getRow(store, { tenant: 'North', id: 'committed' })).state).toBe('failed');
      },
    );

    g.test(
      'retry: queued with run_after = now + delay, not claimable before, claimable after',
      async (fx) => {
        const { store, clock } = fx;
        const row = await running(fx);
        clock.advance(100);
        const now = clock.now();
        await store.attemptFinishMany([
          { lease: leaseOf(row), outcome: 'retry', error: BOOM, delayMs: 4_000 },
        ]);
        expect(await getRow(store, ref)).toMatchObject({
          state: 'queued',
          runAfter: now + 4_000,
          error: BOOM,
          attempt: 1,
          finishedAt: null,
          leaseOwner: null,
          leaseExpiresAt: null,
        });
        expect((await store.attemptList(ref))[0]).toMatchObject({
          outcome: 'retry',
          retryDelayMs: 4_000,
          error: BOOM,
        });
        clock.advance(3_999);
        expect(await claim(store, { limit: 10 })).toEqual([]);
        clock.advance(1);
        const next = await claimOne(store);
        expect(next.attempt).toBe(2);
        expectNextEpoch(next.epoch, row.epoch);
      },
    );

    g.test('retry with a cancel pending and no effect ends cancelled', async (fx) => {
      const row = await running(fx);
      await fx.store.operationCancel(ref);
      await fx.store.attemptFinishMany([
        { lease: leaseOf(row), outcome: 'retry', error: BOOM, delayMs: 1_000 },
      ]);
      expect((await getRow(fx.store, ref)).state).toBe('cancelled');
      expect(await claim(fx.store, { limit: 10 })).toEqual([]);
    });

    g.test('dead: dead-lettered with its error, listed among dead letters', async (fx) => {
      const row = await running(fx);
      await fx.store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'dead', error: BOOM }]);
      expect(await getRow(fx.store, ref)).toMatchObject({ state: 'dead', error: BOOM });
      expect((await fx.store.operationList({ state: 'dead', limit: 10 })).map((r) => r.id)).toEqual(['op-1']);
      expect((await fx.store.attemptList(ref))[0]?.outcome).toBe('dead');
    });

    g.test('needs_reconciliation: parked with its error', async (fx) => {
      const row = await running(fx);
      await fx.store.attemptFinishMany([
        { lease: leaseOf(row), outcome: 'needs_reconciliation', error: BOOM },
      ]);
      expect(await getRow(fx.store, ref)).toMatchObject({ state: 'needs_reconciliation', error: BOOM });
    });

    g.test('cancelled: ends cancelled when no effect began', async (fx) => {
      const row = await running(fx);
      await fx.store.operationCancel(ref);
      await fx.store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'cancelled' }]);
      expect(await getRow(fx.store, ref)).toMatchObject({ state: 'cancelled', finishedAt: fx.clock.now() });
      expect((await fx.store.attemptList(ref))[0]?.outcome).toBe('cancelled');
    });

    g.test('cancelled is never the end of an operation whose effect began', async (fx) => {
      const row = await running(fx);
      await fx.store.effectBegin({ lease: leaseOf(row), name: 'charge', key: 'k' });
      await fx.store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'cancelled' }]);
      expect((await getRow(fx.store, ref)).state).not.toBe('cancelled');
      expect((await fx.store.effectList(ref)).map((e) => e.state)).toEqual(['pending']);
    });

    g.test('released: back to the queue at once without using an attempt', async (fx) => {
      const { store, clock } = fx;
      const row = await running(fx);
      clock.advance(250);
      await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'released' }]);
      expect(await getRow(store, ref)).toMatchObject({ state: 'queued', attempt: 0, runAfter: clock.now() });
      expect((await store.attemptList(ref))[0]).toMatchObject({
        outcome: 'released',
        attempt: 1,
        epoch: row.epoch,
      });
      const next = await claimOne(store);
      expect(next.attempt).toBe(1);
      expectNextEpoch(next.epoch, row.epoch);
    });

    g.test('released with a cancel pending ends cancelled', async (fx) => {
      const row = await running(fx);
      await fx.store.operationCancel(ref);
      await fx.store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'released' }]);
      expect((await getRow(fx.store, ref)).state).toBe('cancelled');
    });

    g.test('a batch answers per item, each fenced on its own', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany(['a', 'b', 'c'].map((id) => submitParams({ id })));
      const [x, y, z] = await claim(store, { limit: 3 });
      const outcomes = await store.attemptFinishMany([
        { lease: leaseOf(x!), outcome: 'succeeded', result: 1 },
        { lease: { ...leaseOf(y!), epoch: y!.epoch + 1 }, outcome: 'succeeded', result: 2 },
        { lease: leaseOf(z!), outcome: 'failed', error: BOOM },
      ]);
      expect(outcomes).toEqual([true, false, true]);
      expect([
        (await getRow(store, x!)).state,
        (await getRow(store, y!)).state,
        (await getRow(store, z!)).state,
      ]).toEqual(['succeeded', 'running', 'failed']);
      expect(await store.attemptFinishMany([])).toEqual([]);
    });

    g.test('an attempt released or cancelled after a failure records no error of its own', async (fx) => {
      const { store } = fx;
      for (const [id, end] of [
        ['released', 'released'],
        ['cancelled', 'cancelled'],
      ] as const) {
        // A class of its own each, so each claim finds its operation.
        await submitCreated(store, { id, class: id });
        const first = await claimOne(store, { class: id });
        await store.attemptFinishMany([{ lease: leaseOf(first), outcome: 'retry', error: BOOM, delayMs: 0 }]);
        const second = await claimOne(store, { class: id });
        expect(await store.attemptFinishMany([{ lease: leaseOf(second), outcome: end }])).toEqual([true]);
        const history = await store.attemptList({ tenant: 'North', id });
        expect(history.map((a) => [a.outcome, a.error])).toEqual([
          ['retry', BOOM],
          [end, null],
        ]);
      }
      // The operation keeps its last error while it waits to run again.
      expect((await getRow(store, { tenant: 'North', id: 'released' })).error).toEqual(BOOM);
    });
  });

  t.group('finish, then claim, in one call', (g) => {
    const params = (limit: number, owner = 'w1') => ({
      class: 'default',
      owner,
      limit,
      leaseMs: LEASE_MS,
    });

    g.test('the claim sees the ends: a freed running cap, a retry due at once', async (fx) => {
      const { store } = fx;
      const limits = { maxRunning: 1 };
      await store.operationSubmitMany(
        ['n1', 'n2'].map((id) => submitParams({ tenant: 'North', id, limits })),
      );
      await store.operationSubmitMany([submitParams({ tenant: 'South', id: 's1', limits })]);
      const first = await claim(store, { limit: 10 });
      expect(first.map((r) => r.id).sort()).toEqual(['n1', 's1']);
      const n1 = first.find((r) => r.id === 'n1')!;
      const s1 = first.find((r) => r.id === 's1')!;
      const out = await store.attemptFinishAndClaim(
        [
          { lease: leaseOf(n1), outcome: 'succeeded', result: 1 },
          { lease: leaseOf(s1), outcome: 'retry', error: BOOM, delayMs: 0 },
        ],
        params(10, 'w2'),
      );
      expect(out.finished).toEqual([true, true]);
      // Both caps were full before the ends; after them, each tenant has room for one again.
      expect(out.claim.rows.map((r) => [r.id, r.attempt, r.leaseOwner]).sort()).toEqual([
        ['n2', 1, 'w2'],
        ['s1', 2, 'w2'],
      ]);
      expect((await getRow(store, n1)).state).toBe('succeeded');
      expect(out.claim.now).toBe(fx.clock.now());
      await expectCountersTrue(store);
    });

    g.test('a refused end refuses only itself; the claim goes on', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany(['a', 'b', 'c'].map((id) => submitParams({ id })));
      const [a, b] = await claim(store, { limit: 2 });
      const out = await store.attemptFinishAndClaim(
        [
          { lease: { ...leaseOf(a!), epoch: a!.epoch + 1 }, outcome: 'succeeded', result: 1 },
          { lease: leaseOf(b!), outcome: 'failed', error: BOOM },
        ],
        params(5),
      );
      expect(out.finished).toEqual([false, true]);
      expect(out.claim.rows.map((r) => r.id)).toEqual(['c']);
      expect((await getRow(store, a!)).state).toBe('running');
      expect((await getRow(store, b!)).state).toBe('failed');
      await expectCountersTrue(store);
    });

    g.test('with nothing to end it is a claim; with nothing to claim, the ends', async (fx) => {
      const { store } = fx;
      await submitCreated(store, { id: 'only' });
      const claimed = await store.attemptFinishAndClaim([], params(3));
      expect(claimed.finished).toEqual([]);
      expect(claimed.claim.rows.map((r) => r.id)).toEqual(['only']);
      const ended = await store.attemptFinishAndClaim(
        [{ lease: leaseOf(claimed.claim.rows[0]!), outcome: 'succeeded', result: 'done' }],
        params(3),
      );
      expect(ended.finished).toEqual([true]);
      expect(ended.claim.rows).toEqual([]);
      expect((await getRow(store, { tenant: 'North', id: 'only' })).result).toBe('done');
      await expectCountersTrue(store);
    });
  });

  t.group('effect marks riding with the ends', (g) => {
    const committed = (row: OperationRow, lease = leaseOf(row)) => ({
      lease,
      name: 'charge',
      state: 'committed' as const,
      result: { id: `ch_${row.id}` },
      reference: `ch_${row.id}`,
    });
    const effectOf = async (store: Store, row: OperationRow) =>
      (await store.effectList({ tenant: row.tenant, id: row.id }))[0];

    g.test('written before the ends, in their transaction; a lost lease writes neither', async (fx) => {
      const { store, clock } = fx;
      await store.operationSubmitMany(['a', 'b', 'c'].map((id) => submitParams({ id })));
      const [a, b, c] = await claim(store, { limit: 3 });
      for (const row of [a!, b!, c!])
        await store.effectBegin({ lease: leaseOf(row), name: 'charge', key: row.id });
      clock.advance(5);
      const stale = { ...leaseOf(c!), epoch: c!.epoch + 1 };
      const out = await store.attemptFinishMany([
        { lease: leaseOf(a!), outcome: 'succeeded', result: 1, marks: [committed(a!)] },
        // A failure after the effect committed: the end's look for a pending effect sees the
        // mark, so the operation fails instead of waiting for reconciliation.
        { lease: leaseOf(b!), outcome: 'failed', error: BOOM, marks: [committed(b!)] },
        { lease: stale, outcome: 'succeeded', result: 1, marks: [committed(c!, stale)] },
      ]);
      expect(out).toEqual([true, true, false]);
      expect(await effectOf(store, a!)).toMatchObject({
        state: 'committed',
        result: { id: 'ch_a' },
        reference: 'ch_a',
        committedAt: clock.now(),
      });
      expect((await getRow(store, a!)).state).toBe('succeeded');
      expect((await effectOf(store, b!))?.state).toBe('committed');
      expect((await getRow(store, b!)).state).toBe('failed');
      expect((await effectOf(store, c!))?.state).toBe('pending');
      expect((await getRow(store, c!)).state).toBe('running');
      await expectCountersTrue(store);
    });

    g.test('with the claim in the same call; a mark written already changes nothing', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany(['a', 'b', 'c'].map((id) => submitParams({ id })));
      const [a, b] = await claim(store, { limit: 2 });
      for (const row of [a!, b!])
        await store.effectBegin({ lease: leaseOf(row), name: 'charge', key: row.id });
      // b's mark went alone and its answer was lost: the end carries it again.
      expect(await store.effectMarkCommitted({ ...committed(b!), result: 'first' })).toBe(true);
      const out = await store.attemptFinishAndClaim(
        [
          { lease: leaseOf(a!), outcome: 'failed', error: BOOM, marks: [committed(a!)] },
          { lease: leaseOf(b!), outcome: 'succeeded', result: 2, marks: [committed(b!)] },
        ],
        { class: 'default', owner: 'w2', limit: 5, leaseMs: LEASE_MS },
      );
      expect(out.finished).toEqual([true, true]);
      expect(out.claim.rows.map((r) => r.id)).toEqual(['c']);
      expect((await effectOf(store, a!))?.state).toBe('committed');
      expect((await getRow(store, a!)).state).toBe('failed');
      expect(await effectOf(store, b!)).toMatchObject({ state: 'committed', result: 'first' });
      expect((await getRow(store, b!)).state).toBe('succeeded');
      await expectCountersTrue(store);
    });
  });

  t.group('cancellation', (g) => {
    g.test('queued → cancelled at once, never claimed', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      clock.advance(10);
      const out = await store.operationCancel(ref);
      expect(out?.outcome).toBe('cancelled');
      expect(out?.ended).toBe(true);
      expect(out?.row).toMatchObject({
        state: 'cancelled',
        finishedAt: clock.now(),
        cancelRequestedAt: clock.now(),
      });
      expect(await getRow(store, ref)).toEqual(out?.row);
      expect(await claim(store, { limit: 10 })).toEqual([]);
      // Asked again: the same answer, but this call ended nothing.
      clock.advance(10);
      expect(await store.operationCancel(ref)).toEqual({ row: out?.row, outcome: 'cancelled', ended: false });
    });

    g.test('running without an effect → requested; the heartbeat reports it', async (fx) => {
      const { store, clock } = fx;
      const row = await running(fx);
      const first = await store.operationCancel(ref);
      expect(first?.outcome).toBe('requested');
      expect(first?.row).toMatchObject({
        state: 'running',
        cancel: 'requested',
        cancelRequestedAt: clock.now(),
      });
      const requestedAt = clock.now();
      clock.advance(1_000);
      const second = await store.operationCancel(ref);
      expect(second?.outcome).toBe('requested');
      expect(second?.row.cancelRequestedAt).toBe(requestedAt);
      expect(await store.leaseExtendMany({ leases: [leaseOf(row)], leaseMs: 1_000 })).toEqual([
        { ok: true, cancelRequested: true },
      ]);
    });

    g.test('running after an effect committed → too_late', async (fx) => {
      const row = await running(fx);
      const lease = leaseOf(row);
      await fx.store.effectBegin({ lease, name: 'charge', key: 'k' });
      await fx.store.effectMarkCommitted({ lease, name: 'charge', result: 1, reference: 'ch_1' });
      const out = await fx.store.operationCancel(ref);
      expect(out?.outcome).toBe('too_late');
      expect(out?.row).toMatchObject({ state: 'running', cancel: 'too_late' });
    });

    g.test('queued with an effect begun in an earlier attempt → too_late, and it still runs', async (fx) => {
      const { store } = fx;
      const row = await running(fx);
      await store.effectBegin({ lease: leaseOf(row), name: 'charge', key: 'k' });
      await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'retry', error: BOOM, delayMs: 0 }]);
      const out = await store.operationCancel(ref);
      expect(out?.outcome).toBe('too_late');
      expect(out?.row).toMatchObject({ state: 'queued', cancel: 'too_late' });
      const next = await claimOne(store);
      expect(next.state).toBe('running');
      expectNextEpoch(next.epoch, row.epoch);
    });

    g.test('terminal: too_late for succeeded, failed and dead, cancelled stays cancelled', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany(['s', 'f', 'd', 'c'].map((id) => submitParams({ id })));
      await store.operationCancel({ tenant: 'North', id: 'c' });
      const rows = await claim(store, { limit: 3 });
      const byId = (id: string) => leaseOf(rows.find((r) => r.id === id)!);
      await store.attemptFinishMany([
        { lease: byId('s'), outcome: 'succeeded', result: 1 },
        { lease: byId('f'), outcome: 'failed', error: BOOM },
        { lease: byId('d'), outcome: 'dead', error: BOOM },
      ]);
      fx.clock.advance(1_000);
      for (const [id, outcome] of [
        ['s', 'too_late'],
        ['f', 'too_late'],
        ['d', 'too_late'],
        ['c', 'cancelled'],
      ] as const) {
        const before = await getRow(store, { tenant: 'North', id });
        const out = await store.operationCancel({ tenant: 'North', id });
        expect([id, out?.outcome]).toEqual([id, outcome]);
        expect((await getRow(store, before)).state).toBe(before.state);
        expect((await getRow(store, before)).finishedAt).toBe(before.finishedAt);
      }
    });

    g.test('a cancel accepted after definite refusals stops every way the attempt can end', async (fx) => {
      // Cancellation is answered by state. After a definite refusal (`absent`) nothing happened, so a
      // cancel is accepted; from then on the attempt may not send again under the key, and however
      // it ends (released, retry, cancelled, lease expiry) the operation ends cancelled: it never
      // goes back to the queue carrying an unanswered `requested`.
      const { store } = fx;
      const ends = ['released', 'retry', 'cancelled', 'lease-expiry'];
      await store.operationSubmitMany(ends.map((id) => submitParams({ id })));
      const rows = await claim(store, { limit: 4 });
      expect(rows).toHaveLength(4);
      for (const row of rows) {
        const lease = leaseOf(row);
        await store.effectBegin({ lease, name: 'charge', key: row.id });
        expect(await store.effectMarkAbsent({ lease, name: 'charge' })).toBe(true);
        expect((await store.operationCancel(row))?.outcome).toBe('requested');
        const refused = await store.effectRecordSend({ lease, name: 'charge' }).catch((e) => e);
        expect(refused.code).toBe('cancel-requested');
      }
      const lease = (id: string) => leaseOf(rows.find((r) => r.id === id)!);
      expect(
        await store.attemptFinishMany([
          { lease: lease('released'), outcome: 'released' },
          { lease: lease('retry'), outcome: 'retry', error: BOOM, delayMs: 0 },
          { lease: lease('cancelled'), outcome: 'cancelled' },
        ]),
      ).toEqual([true, true, true]);
      expect(await expireAndRescue(fx)).toMatchObject([
        { tenant: 'North', id: 'lease-expiry', to: 'cancelled' },
      ]);
      for (const id of ends) {
        const row = await getRow(store, { tenant: 'North', id });
        expect([id, row.state, row.cancel]).toEqual([id, 'cancelled', 'requested']);
      }
      expect(await claim(store, { limit: 4 })).toEqual([]);
    });

    g.test('an unknown operation is answered undefined', async ({ store }) => {
      expect(await store.operationCancel({ tenant: 'North', id: 'nope' })).toBeUndefined();
    });

    g.test('a cancel by an operator is recorded with who', async (fx) => {
      await submitCreated(fx.store);
      await fx.store.operationCancel({ ...ref, by: 'alice' });
      const events = await fx.store.eventList(ref);
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({ action: 'cancel', by: 'alice', at: fx.clock.now() });
    });

    g.test('a cancel that changes nothing adds nothing to the history', async (fx) => {
      const { store } = fx;
      const cancels = async (id: string, n: number) => {
        const outcomes: string[] = [];
        for (let i = 0; i < n; i++)
          outcomes.push((await store.operationCancel({ tenant: 'North', id, by: `b${i}` }))!.outcome);
        return { outcomes, events: (await store.eventList({ tenant: 'North', id })).map((e) => e.by) };
      };
      // Running: requested once, and that is all there is to record.
      await submitCreated(store, { id: 'running' });
      await claimOne(store);
      expect(await cancels('running', 3)).toEqual({
        outcomes: ['requested', 'requested', 'requested'],
        events: ['b0'],
      });
      // Queued: cancelled, then already cancelled.
      await submitCreated(store, { id: 'queued' });
      expect(await cancels('queued', 3)).toEqual({
        outcomes: ['cancelled', 'cancelled', 'cancelled'],
        events: ['b0'],
      });
      // Ended before any cancel: too late, and nothing changed.
      await submitCreated(store, { id: 'ended' });
      await store.attemptFinishMany([
        { lease: leaseOf(await claimOne(store)), outcome: 'succeeded', result: 1 },
      ]);
      expect(await cancels('ended', 2)).toEqual({ outcomes: ['too_late', 'too_late'], events: [] });
    });
  });
}
