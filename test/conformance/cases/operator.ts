/**
 * @module test/conformance/cases/operator
 * The recorded ways out of a terminal state (redrive: dead → queued; reconcile:
 * needs_reconciliation → queued | succeeded | failed, with who and why) and the retention purge
 * that turns old terminal operations into tombstones and later forgets the tombstones.
 */
import { expect } from 'vitest';
import { canonicalJson } from '../../../src/core/digest.js';
import { isTerminal, type OperationState } from '../../../src/core/states.js';
import {
  allOperations,
  BOOM,
  claim,
  claimOne,
  expectNextEpoch,
  expireAndRescue,
  getRow,
  leaseOf,
  rejectionCode,
  type StoreFixture,
  submitCreated,
  submitParams,
} from '../fixtures.js';
import type { CaseRegistry } from '../store-suite.js';

const ref = { tenant: 'North', id: 'op-1' };

async function dead(fx: StoreFixture) {
  await submitCreated(fx.store, { maxAttempts: 2 });
  const row = await claimOne(fx.store);
  await fx.store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'dead', error: BOOM }]);
  return row;
}

/** An operation parked in needs_reconciliation with its `charge` effect pending. */
async function unknownCharge(fx: StoreFixture) {
  await submitCreated(fx.store);
  const row = await claimOne(fx.store);
  await fx.store.effectBegin({ lease: leaseOf(row), name: 'charge', key: 'sk_1' });
  await fx.store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'failed', error: BOOM }]);
  expect((await getRow(fx.store, ref)).state).toBe('needs_reconciliation');
  return row;
}

/**
 * One operation in each state, ids named after the state. `queued` waits behind a delay, so the
 * claim takes exactly the other five whatever order a driver claims one tenant's work in.
 */
async function oneOfEach(fx: StoreFixture): Promise<OperationState[]> {
  const { store } = fx;
  const ids: OperationState[] = [
    'succeeded',
    'failed',
    'dead',
    'needs_reconciliation',
    'cancelled',
    'running',
  ];
  await store.operationSubmitMany([
    ...ids.map((id) => submitParams({ id })),
    submitParams({ id: 'queued', delayMs: 3_600_000 }),
  ]);
  await store.operationCancel({ tenant: 'North', id: 'cancelled' });
  const rows = await claim(store, { limit: 10 });
  expect(rows.map((r) => r.id).sort()).toEqual([
    'dead',
    'failed',
    'needs_reconciliation',
    'running',
    'succeeded',
  ]);
  const lease = (id: string) => leaseOf(rows.find((r) => r.id === id)!);
  await store.attemptFinishMany([
    { lease: lease('succeeded'), outcome: 'succeeded', result: 1 },
    { lease: lease('failed'), outcome: 'failed', error: BOOM },
    { lease: lease('dead'), outcome: 'dead', error: BOOM },
    { lease: lease('needs_reconciliation'), outcome: 'needs_reconciliation', error: BOOM },
  ]);
  ids.push('queued');
  for (const id of ids) expect((await getRow(store, { tenant: 'North', id })).state).toBe(id);
  return ids;
}

export function operatorCases(t: CaseRegistry): void {
  t.group('listing', (g) => {
    g.test(
      'by tenant and state, live or settled, and by kind, in submission order, a page at a time',
      async (fx) => {
        const { store } = fx;
        const north = await oneOfEach(fx);
        await store.operationSubmitMany([
          submitParams({ tenant: 'South', id: 's-dead', kind: 'refund' }),
          submitParams({ tenant: 'South', id: 's-queued', kind: 'refund', delayMs: 3_600_000 }),
        ]);
        const southDead = await claimOne(store);
        expect(southDead.id).toBe('s-dead');
        await store.attemptFinishMany([{ lease: leaseOf(southDead), outcome: 'dead', error: BOOM }]);

        const ids = async (p: Omit<Parameters<typeof store.operationList>[0], 'limit'>) =>
          (await store.operationList({ limit: 100, ...p })).map((r) => `${r.tenant}/${r.id}`);
        // Each of North's operations is named after its state: one listing per state finds it alone.
        for (const state of north)
          expect([state, await ids({ tenant: 'North', state })]).toEqual([state, [`North/${state}`]]);
        expect(await ids({ tenant: 'South', state: 'queued' })).toEqual(['South/s-queued']);
        expect(await ids({ tenant: 'South', state: 'running' })).toEqual([]);
        expect(await ids({ state: 'dead' })).toEqual(['North/dead', 'South/s-dead']);
        // Every tenant's operations waiting for an operator (SQLite: through their own index).
        expect(await ids({ state: 'needs_reconciliation' })).toEqual(['North/needs_reconciliation']);
        expect(await ids({ state: 'dead', kind: 'refund' })).toEqual(['South/s-dead']);
        expect(await ids({ tenant: 'South', state: 'dead', kind: 'refund' })).toEqual(['South/s-dead']);
        expect(await ids({ tenant: 'North', state: 'dead', kind: 'refund' })).toEqual([]);
        expect(await ids({ kind: 'refund' })).toEqual(['South/s-dead', 'South/s-queued']);

        // Pages of two, each after the last row of the one before, cover North in submission order.
        const all = await store.operationList({ tenant: 'North', limit: 100 });
        expect(all.map((r) => r.seq)).toEqual([...all.map((r) => r.seq)].sort((a, b) => a - b));
        const paged: string[] = [];
        for (let after = 0; ; ) {
          const page = await store.operationList({ tenant: 'North', after, limit: 2 });
          if (page.length === 0) break;
          expect(page.length).toBeLessThanOrEqual(2);
          paged.push(...page.map((r) => r.id));
          after = page.at(-1)!.seq;
        }
        expect(paged).toEqual(all.map((r) => r.id));
        expect(new Set(paged)).toEqual(new Set(north));
        // A state across tenants a page at a time, too (on SQLite, through the index of migration 35).
        const firstPage = await store.operationList({ state: 'dead', limit: 1 });
        expect(firstPage.map((r) => r.id)).toEqual(['dead']);
        const next = await store.operationList({ state: 'dead', after: firstPage[0]!.seq, limit: 1 });
        expect(next.map((r) => r.id)).toEqual(['s-dead']);
      },
    );

    g.test("counts every tenant's operations waiting for an operator, each state up to a cap", async (fx) => {
      const { store } = fx;
      expect(await store.awaitingOperatorStats({ cap: 10 })).toEqual({ dead: 0, needsReconciliation: 0 });
      await oneOfEach(fx);
      await store.operationSubmitMany([
        submitParams({ tenant: 'South', id: 's-dead' }),
        submitParams({ tenant: 'East', id: 'e-dead' }),
      ]);
      for (let n = 0; n < 2; n++) {
        const row = await claimOne(store);
        await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'dead', error: BOOM }]);
      }
      expect(await store.awaitingOperatorStats({ cap: 10 })).toEqual({ dead: 3, needsReconciliation: 1 });
      // At the cap and under it: what a scrape reads is bounded, whatever the backlog.
      expect(await store.awaitingOperatorStats({ cap: 3 })).toEqual({ dead: 3, needsReconciliation: 1 });
      expect(await store.awaitingOperatorStats({ cap: 2 })).toEqual({ dead: 2, needsReconciliation: 1 });
      // A redrive takes one out.
      await store.operationRedrive({ tenant: 'South', id: 's-dead', by: 'ops', reason: 'back' });
      expect(await store.awaitingOperatorStats({ cap: 10 })).toEqual({ dead: 2, needsReconciliation: 1 });
    });

    g.test(
      'a listing bounded by bytes ends one row after the first that reaches the bound',
      async ({ store }) => {
        // Inputs of exactly 100 bytes as stored: {"pad":"…"} is 10 bytes of framing.
        const input = (n: number) => ({ pad: String(n).padStart(90, 'x') });
        expect(canonicalJson(input(1)).length).toBe(100);
        await store.operationSubmitMany(
          Array.from({ length: 6 }, (_, i) => submitParams({ id: `b${i}`, input: input(i) })),
        );
        const all = await store.operationList({ tenant: 'North', limit: 10 });
        expect(all.map((r) => r.listedBytes)).toEqual([100, 100, 100, 100, 100, 100]);
        const ids = async (maxBytes: number, limit = 10) =>
          (await store.operationList({ tenant: 'North', limit, maxBytes })).map((r) => r.id);
        // 250: the third row brings the rows to 300; the fourth says more follow.
        expect(await ids(250)).toEqual(['b0', 'b1', 'b2', 'b3']);
        // Exactly reached at the second row (200), then one more.
        expect(await ids(200)).toEqual(['b0', 'b1', 'b2']);
        // A bound below the first row still lists it, and the row after it.
        expect(await ids(1)).toEqual(['b0', 'b1']);
        // The limit bounds first; a bound never reached leaves the listing whole.
        expect(await ids(250, 2)).toEqual(['b0', 'b1']);
        expect(await ids(10_000)).toEqual(['b0', 'b1', 'b2', 'b3', 'b4', 'b5']);
        // A result and an error count too.
        const running = await claimOne(store);
        await store.attemptFinishMany([{ lease: leaseOf(running), outcome: 'failed', error: BOOM }]);
        const [failed] = await store.operationList({ tenant: 'North', limit: 1 });
        expect(failed!.error).not.toBeNull();
        expect(failed!.listedBytes).toBeGreaterThan(100 + BOOM.message.length);
      },
    );
    g.test(
      'every filter, and every page of it, lists what the unfiltered listing holds, filtered',
      async ({ store }) => {
        // Two classes, three tenants, two kinds, each state: the live states are read through
        // indexes of their own (store/sqlite/list.ts), and must list exactly what a filter of
        // the whole table would.
        const KINDS = ['charge', 'refund'];
        const params = [];
        for (const tenant of ['North', 'South', 'East'])
          for (const cls of ['default', 'bulk'])
            for (let i = 0; i < 6; i++)
              params.push(
                submitParams({
                  tenant,
                  id: `${cls}-${i}`,
                  class: cls,
                  kind: KINDS[i % 2],
                  // Half wait behind a delay: they stay queued through the claims below.
                  ...(i >= 3 ? { delayMs: 3_600_000 } : {}),
                }),
              );
        await store.operationSubmitMany(params);
        const running = [
          ...(await claim(store, { limit: 9 })),
          ...(await claim(store, { class: 'bulk', limit: 9 })),
        ];
        expect(running).toHaveLength(18);
        const outcomes = ['succeeded', 'failed', 'dead', 'needs_reconciliation'] as const;
        await store.attemptFinishMany(
          running
            .filter((_, i) => i % 3 !== 2)
            .map((row, i) => {
              const outcome = outcomes[i % outcomes.length]!;
              return outcome === 'succeeded'
                ? { lease: leaseOf(row), outcome, result: { n: i } }
                : { lease: leaseOf(row), outcome, error: BOOM };
            }),
        );
        await store.operationCancel({ tenant: 'South', id: 'bulk-4' });
        const all = await allOperations(store);
        const states = new Set(all.map((r) => r.state));
        expect([...states].sort()).toEqual([
          'cancelled',
          'dead',
          'failed',
          'needs_reconciliation',
          'queued',
          'running',
          'succeeded',
        ]);

        for (const tenant of [undefined, 'North', 'South', 'Nobody'])
          for (const state of [undefined, ...states] as Array<OperationState | undefined>)
            for (const kind of [undefined, ...KINDS]) {
              const filter = { tenant, state, kind };
              const want = all
                .filter(
                  (r) =>
                    (tenant === undefined || r.tenant === tenant) &&
                    (state === undefined || r.state === state) &&
                    (kind === undefined || r.kind === kind),
                )
                .map((r) => r.seq);
              expect(
                (await store.operationList({ ...filter, limit: 100 })).map((r) => r.seq),
                JSON.stringify(filter),
              ).toEqual(want);
              // Two at a time after the cursor, and bounded by bytes (two rows' worth and one more).
              const paged: number[] = [];
              for (let after = 0; ; ) {
                const page = await store.operationList({ ...filter, after, limit: 2, maxBytes: 1 });
                expect(page.length).toBeLessThanOrEqual(2);
                if (page.length === 0) break;
                paged.push(...page.map((r) => r.seq));
                after = page[page.length - 1]!.seq;
              }
              expect(paged, JSON.stringify(filter)).toEqual(want);
            }
      },
    );
  });

  t.group('dead letters and redrive', (g) => {
    g.test('redrive: dead → queued under a new attempt count, recorded with who and why', async (fx) => {
      const { store, clock } = fx;
      const first = await dead(fx);
      clock.advance(5_000);
      const row = await store.operationRedrive({ ...ref, by: 'alice', reason: 'provider fixed' });
      expect(row).toMatchObject({
        state: 'queued',
        attempt: 0,
        leaseExpiries: 0,
        runAfter: clock.now(),
        finishedAt: null,
        epoch: first.epoch,
      });
      expect(await getRow(store, ref)).toEqual(row);
      const events = await store.eventList(ref);
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({
        action: 'redrive',
        by: 'alice',
        reason: 'provider fixed',
        at: clock.now(),
      });
      // The epoch is never reset: the dead attempt's lease stays stale.
      const next = await claimOne(store);
      expect(next.attempt).toBe(1);
      expectNextEpoch(next.epoch, first.epoch);
      expect(
        await store.attemptFinishMany([{ lease: leaseOf(first), outcome: 'succeeded', result: 1 }]),
      ).toEqual([false]);
    });

    g.test(
      'redrive gives the operation the time it had at acceptance again, from the redrive',
      async (fx) => {
        const { store, clock } = fx;
        await submitCreated(store, { id: 'timed', deadlineMs: 60_000, maxAttempts: 1 });
        await submitCreated(store, { id: 'untimed', deadlineMs: null, maxAttempts: 1 });
        for (let i = 0; i < 2; i++) {
          const row = await claimOne(store);
          await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'dead', error: BOOM }]);
        }
        // Past the deadline: kept, the first claim after the redrive would end it unrun.
        clock.advance(3_600_000);
        const timed = await store.operationRedrive({
          tenant: 'North',
          id: 'timed',
          by: 'alice',
          reason: 'fixed',
        });
        expect(timed.deadlineAt).toBe(clock.now() + 60_000);
        const untimed = await store.operationRedrive({
          tenant: 'North',
          id: 'untimed',
          by: 'alice',
          reason: 'fixed',
        });
        expect(untimed.deadlineAt).toBeNull();
      },
    );

    g.test('redrive of a crash loop resets the expiry counter', async (fx) => {
      await submitCreated(fx.store, { maxAttempts: 10 });
      for (let i = 0; i < 3; i++) {
        await claimOne(fx.store);
        await expireAndRescue(fx, { maxLeaseExpiries: 3 });
      }
      expect((await getRow(fx.store, ref)).state).toBe('dead');
      await fx.store.operationRedrive({ ...ref, by: 'alice', reason: 'deployed a fix' });
      await claimOne(fx.store);
      expect(await expireAndRescue(fx, { maxLeaseExpiries: 3 })).toMatchObject([{ ...ref, to: 'queued' }]);
    });

    g.test('redrive of an operation that is not dead is refused: operation-state-invalid', async (fx) => {
      const ids = await oneOfEach(fx);
      for (const id of ids.filter((s) => s !== 'dead')) {
        const before = await getRow(fx.store, { tenant: 'North', id });
        const code = await rejectionCode(
          fx.store.operationRedrive({ tenant: 'North', id, by: 'a', reason: 'r' }),
        );
        expect([id, code]).toEqual([id, 'operation-state-invalid']);
        expect(await getRow(fx.store, before)).toEqual(before);
        expect(await fx.store.eventList(before)).toEqual([]);
      }
      expect(
        await rejectionCode(fx.store.operationRedrive({ tenant: 'North', id: 'nope', by: 'a', reason: 'r' })),
      ).toBe('operation-not-found');
    });
  });

  t.group('reconciliation', (g) => {
    g.test('committed effect, resolved succeeded: result kept, recorded with who and why', async (fx) => {
      const { store, clock } = fx;
      await unknownCharge(fx);
      clock.advance(60_000);
      const row = await store.operationReconcile({
        ...ref,
        by: 'bob',
        reason: 'provider dashboard shows ch_9',
        effects: [{ name: 'charge', outcome: 'committed', result: { id: 'ch_9' }, reference: 'ch_9' }],
        resolution: 'succeeded',
        result: { charge: 'ch_9' },
      });
      expect(row).toMatchObject({ state: 'succeeded', result: { charge: 'ch_9' }, finishedAt: clock.now() });
      // What parked it is history now: a succeeded operation carries no error.
      expect(row.error).toBeNull();
      expect((await store.effectList(ref))[0]).toMatchObject({
        state: 'committed',
        result: { id: 'ch_9' },
        reference: 'ch_9',
        key: 'sk_1',
      });
      const events = await store.eventList(ref);
      expect(events).toHaveLength(1);
      expect(events[0]).toMatchObject({
        action: 'reconcile',
        by: 'bob',
        reason: 'provider dashboard shows ch_9',
      });
    });

    g.test(
      'absent effect, requeued: the handler runs again and sends afresh under the same key',
      async (fx) => {
        const { store, clock } = fx;
        const first = await unknownCharge(fx);
        clock.advance(60_000);
        const row = await store.operationReconcile({
          ...ref,
          by: 'bob',
          reason: 'provider has no such charge',
          effects: [{ name: 'charge', outcome: 'absent' }],
          resolution: 'requeue',
        });
        expect(row).toMatchObject({ state: 'queued', attempt: 0, runAfter: clock.now(), finishedAt: null });
        expect((await store.effectList(ref))[0]?.state).toBe('absent');
        const again = await claimOne(store);
        expectNextEpoch(again.epoch, first.epoch);
        const lease = leaseOf(again);
        const begun = await store.effectBegin({ lease, name: 'charge', key: 'sk_1' });
        expect(begun).toMatchObject({ created: false, row: { state: 'absent', key: 'sk_1' } });
        clock.advance(1_000);
        const sent = await store.effectRecordSend({ lease, name: 'charge' });
        expect(sent.row).toMatchObject({ state: 'pending', firstSentAt: clock.now() });
      },
    );

    g.test(
      'requeued, the operation has the time it had at acceptance again, from the reconcile',
      async (fx) => {
        const { store, clock } = fx;
        await submitCreated(store, { deadlineMs: 60_000 });
        const row = await claimOne(store);
        await store.effectBegin({ lease: leaseOf(row), name: 'charge', key: 'sk_1' });
        await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'failed', error: BOOM }]);
        expect((await getRow(store, ref)).state).toBe('needs_reconciliation');
        // Past the deadline, as a parked operation usually is by the time a person looks.
        clock.advance(3_600_000);
        const requeued = await store.operationReconcile({
          ...ref,
          by: 'bob',
          reason: 'provider has no such charge',
          effects: [{ name: 'charge', outcome: 'absent' }],
          resolution: 'requeue',
        });
        expect(requeued.deadlineAt).toBe(clock.now() + 60_000);
      },
    );

    g.test('resolved failed: the given error is kept', async (fx) => {
      await unknownCharge(fx);
      const error = { code: 'reconciled', message: 'refunded by hand' };
      const row = await fx.store.operationReconcile({
        ...ref,
        by: 'bob',
        reason: 'refunded',
        effects: [{ name: 'charge', outcome: 'committed' }],
        resolution: 'failed',
        error,
      });
      expect(row).toMatchObject({ state: 'failed', error });
      expect(await fx.store.operationCancel(ref)).toMatchObject({ outcome: 'too_late' });
    });

    g.test('reconcile is refused outside needs_reconciliation: operation-state-invalid', async (fx) => {
      const ids = await oneOfEach(fx);
      for (const id of ids.filter((s) => s !== 'needs_reconciliation')) {
        const before = await getRow(fx.store, { tenant: 'North', id });
        const code = await rejectionCode(
          fx.store.operationReconcile({ tenant: 'North', id, by: 'a', reason: 'r', resolution: 'succeeded' }),
        );
        expect([id, code]).toEqual([id, 'operation-state-invalid']);
        expect(await getRow(fx.store, before)).toEqual(before);
        expect(await fx.store.eventList(before)).toEqual([]);
      }
      expect(
        await rejectionCode(
          fx.store.operationReconcile({
            tenant: 'North',
            id: 'nope',
            by: 'a',
            reason: 'r',
            resolution: 'requeue',
          }),
        ),
      ).toBe('operation-not-found');
    });
  });

  t.group('retention purge', (g) => {
    const RETENTION = { retentionMs: 7 * 86_400_000, tombstoneMs: 30 * 86_400_000, limit: 100 };

    g.test(
      'old terminal operations become tombstones; needs_reconciliation and live ones stay',
      async (fx) => {
        const { store, clock } = fx;
        const ids = await oneOfEach(fx);
        const digest = (await getRow(store, { tenant: 'North', id: 'succeeded' })).digest;
        const live = await store.effectBegin({
          lease: leaseOf(await getRow(store, { tenant: 'North', id: 'running' })),
          name: 'charge',
          key: 'k',
        });
        expect(live.created).toBe(true);
        clock.advance(RETENTION.retentionMs - 1);
        expect(await store.retentionPurge(RETENTION)).toEqual({
          purged: 0,
          tombstonesDeleted: 0,
          queuesDeleted: 0,
        });
        clock.advance(2);
        expect(await store.retentionPurge(RETENTION)).toEqual({
          purged: 4,
          tombstonesDeleted: 0,
          queuesDeleted: 0,
        });
        const left = (await allOperations(store)).map((r) => r.id).sort();
        expect(left).toEqual(['needs_reconciliation', 'queued', 'running']);
        for (const id of ids.filter((s) => isTerminal(s) && s !== 'needs_reconciliation')) {
          const gone = { tenant: 'North', id };
          expect(await store.operationGet(gone)).toBeUndefined();
          expect(await store.attemptList(gone)).toEqual([]);
          expect(await store.effectList(gone)).toEqual([]);
          expect(await store.eventList(gone)).toEqual([]);
        }
        const [again] = await store.operationSubmitMany([submitParams({ id: 'succeeded' })]);
        expect(again).toEqual({ status: 'expired', digestMatches: true });
        expect(submitParams({ id: 'succeeded' }).digest).toBe(digest);
        // Years later, a needs_reconciliation operation is still waiting for its person.
        clock.advance(10 * 365 * 86_400_000);
        expect((await store.retentionPurge(RETENTION)).purged).toBe(0);
        expect((await getRow(store, { tenant: 'North', id: 'needs_reconciliation' })).state).toBe(
          'needs_reconciliation',
        );
      },
    );

    g.test('tombstones are deleted after tombstoneMs; then the id is free again', async (fx) => {
      const { store, clock } = fx;
      const row = await (async () => {
        await submitCreated(store);
        return claimOne(store);
      })();
      await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'succeeded', result: 1 }]);
      clock.advance(RETENTION.retentionMs + 1);
      // North's last operation: its queue row goes with it.
      expect(await store.retentionPurge(RETENTION)).toEqual({
        purged: 1,
        tombstonesDeleted: 0,
        queuesDeleted: 1,
      });
      clock.advance(RETENTION.tombstoneMs - RETENTION.retentionMs - 2);
      expect(await store.retentionPurge(RETENTION)).toEqual({
        purged: 0,
        tombstonesDeleted: 0,
        queuesDeleted: 0,
      });
      expect((await store.operationSubmitMany([submitParams()]))[0]?.status).toBe('expired');
      clock.advance(2);
      expect(await store.retentionPurge(RETENTION)).toEqual({
        purged: 0,
        tombstonesDeleted: 1,
        queuesDeleted: 0,
      });
      expect((await store.operationSubmitMany([submitParams()]))[0]?.status).toBe('created');
    });

    g.test('a dead operation with an effect still pending is kept until a redrive settles it', async (fx) => {
      const { store, clock } = fx;
      // Out of attempts mid-call: the charge may exist, and this row is its only record.
      await submitCreated(store, { maxAttempts: 1 });
      const row = await claimOne(store);
      await store.effectBegin({ lease: leaseOf(row), name: 'charge', key: 'sk_1' });
      await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'dead', error: BOOM }]);
      // A dead one whose effect certainly did not happen is purged beside it.
      await submitCreated(store, { id: 'op-2', maxAttempts: 1 });
      const other = await claimOne(store);
      await store.effectBegin({ lease: leaseOf(other), name: 'charge', key: 'sk_2' });
      expect(await store.effectMarkAbsent({ lease: leaseOf(other), name: 'charge' })).toBe(true);
      await store.attemptFinishMany([{ lease: leaseOf(other), outcome: 'dead', error: BOOM }]);
      // A handler that caught an ambiguous error and succeeded anyway left its effect unknown:
      // nothing would ever settle it, so it ages out as any other.
      await submitCreated(store, { id: 'op-3' });
      const chose = await claimOne(store);
      await store.effectBegin({ lease: leaseOf(chose), name: 'charge', key: 'sk_3' });
      await store.attemptFinishMany([{ lease: leaseOf(chose), outcome: 'succeeded', result: 1 }]);
      expect((await getRow(store, ref)).state).toBe('dead');

      clock.advance(RETENTION.retentionMs + 1);
      expect(await store.retentionPurge(RETENTION)).toEqual({
        purged: 2,
        tombstonesDeleted: 0,
        queuesDeleted: 0,
      });
      clock.advance(10 * 365 * 86_400_000);
      expect((await store.retentionPurge(RETENTION)).purged).toBe(0);
      expect((await allOperations(store)).map((r) => r.id)).toEqual(['op-1']);
      expect((await store.effectList(ref)).map((e) => [e.name, e.key, e.state])).toEqual([
        ['charge', 'sk_1', 'pending'],
      ]);

      // Redriven, the attempt finds the charge and commits it; then the operation ages out as any.
      await store.operationRedrive({ ...ref, by: 'ops', reason: 'settle the charge' });
      const again = await claimOne(store);
      expect(
        await store.effectMarkCommitted({
          lease: leaseOf(again),
          name: 'charge',
          result: { id: 'ch_1' },
          reference: 'ch_1',
        }),
      ).toBe(true);
      await store.attemptFinishMany([{ lease: leaseOf(again), outcome: 'succeeded', result: 1 }]);
      clock.advance(RETENTION.retentionMs + 1);
      expect((await store.retentionPurge(RETENTION)).purged).toBe(1);
      expect(await allOperations(store)).toEqual([]);
    });

    g.test('the purge works in bounded batches', async (fx) => {
      const { store, clock } = fx;
      await store.operationSubmitMany(['a', 'b', 'c'].map((id) => submitParams({ id })));
      for (const id of ['a', 'b', 'c']) await store.operationCancel({ tenant: 'North', id });
      clock.advance(RETENTION.retentionMs + 1);
      expect((await store.retentionPurge({ ...RETENTION, limit: 2 })).purged).toBe(2);
      expect((await store.retentionPurge({ ...RETENTION, limit: 2 })).purged).toBe(1);
      expect(await allOperations(store)).toEqual([]);
    });
  });
}
