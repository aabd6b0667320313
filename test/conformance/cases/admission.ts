/**
 * @module test/conformance/cases/admission
 * Admission and budgets inside the store, enforced across every process that shares it: the
 * class's global queue bound, deferral (back to the queue without using an attempt), spend
 * budgets with reserve/commit/release, call-rate caps, the per-operation request cap, and the
 * service-wide retry budget; and the queue rows of tenants that left, forgotten by the purge.
 */
import { expect } from 'vitest';
import type { Store } from '../../../src/store/store.js';
import type { BudgetCharge } from '../../../src/store/types.js';
import {
  allOperations,
  BOOM,
  claim,
  claimOne,
  expectCountersTrue,
  getRow,
  leaseOf,
  rejectionCode,
  submitCreated,
  submitParams,
} from '../fixtures.js';
import type { CaseRegistry } from '../store-suite.js';

const ref = { tenant: 'North', id: 'op-1' };
const HOUR = 3_600_000;
const DAY = 86_400_000;
const spend = (cost: number, limit = 10_000): BudgetCharge[] => [
  { key: 'spend:pay:tenant:North', limit, windowMs: HOUR, cost },
  { key: 'spend:pay:*', limit: 100_000, windowMs: HOUR, cost },
];
const one = async (store: Store, p: Parameters<typeof submitParams>[0]) =>
  (await store.operationSubmitMany([submitParams(p)]))[0];
const usage = async (fx: { store: Store; clock: { now(): number } }, key: string) =>
  (await fx.store.budgetUsage({ prefix: key, since: fx.clock.now() })).find((u) => u.key === key);

/** `n` operations submitted and started for the first time, counted by the claim (in `shard`). */
async function startedFirst(store: Store, n: number, shard: number): Promise<void> {
  await store.operationSubmitMany(Array.from({ length: n }, (_, i) => submitParams({ id: `op-${i}` })));
  const claimed = await store.operationClaimMany({
    class: 'default',
    owner: 'w',
    limit: n,
    leaseMs: 30_000,
    retryBudget: { bucketMs: 1000, shard },
  });
  expect(claimed.rows).toHaveLength(n);
}

export function admissionCases(t: CaseRegistry): void {
  t.group('class queue bound', (g) => {
    g.test(
      'maxQueued counts every tenant of the class and refuses with class-queue-full',
      async ({ store }) => {
        const limits = { maxQueued: 3 };
        const out = await store.operationSubmitMany([
          submitParams({ tenant: 'A', id: '1', limits }),
          submitParams({ tenant: 'B', id: '1', limits }),
          submitParams({ tenant: 'C', id: '1', limits }),
          submitParams({ tenant: 'D', id: '1', limits }),
          submitParams({ tenant: 'D', id: '1', class: 'bulk', limits }),
        ]);
        expect(out.map((o) => o.status)).toEqual(['created', 'created', 'created', 'rejected', 'created']);
        expect(out[3]).toMatchObject({ reason: 'class-queue-full', waiting: 3 });
        expect(await store.operationGet({ tenant: 'D', id: '1' })).toMatchObject({ class: 'bulk' });
        expect(await store.classStats()).toEqual([
          { class: 'bulk', waiting: 1 },
          { class: 'default', waiting: 3 },
        ]);
        // A duplicate is answered even when the class is full.
        const [dup] = await store.operationSubmitMany([submitParams({ tenant: 'A', id: '1', limits })]);
        expect(dup?.status).toBe('existing');
        // A claim makes room: running operations do not count as waiting.
        await claimOne(store);
        const [again] = await store.operationSubmitMany([submitParams({ tenant: 'D', id: '2', limits })]);
        expect(again?.status).toBe('created');
      },
    );
  });

  // A lone submit is the common case (a quiet service, one request at a time) and each store
  // serves it by a path of its own (PostgreSQL: submit_one): the caps at their edges, one call each.
  t.group('one submit at a time', (g) => {
    g.test('the tenant cap: the last place is taken, the next refused with the counts', async ({ store }) => {
      const limits = { maxWaiting: 2, maxQueued: 10 };
      expect((await one(store, { id: 'a', limits }))?.status).toBe('created');
      expect((await one(store, { id: 'b', limits }))?.status).toBe('created');
      expect(await one(store, { id: 'c', limits })).toEqual({
        status: 'rejected',
        reason: 'tenant-queue-full',
        waiting: 2,
        running: 0,
        dueInMs: 0,
      });
      expect(await store.operationGet({ tenant: 'North', id: 'c' })).toBeUndefined();
      // A duplicate at the full cap is answered from its record, not refused.
      expect((await one(store, { id: 'a', limits }))?.status).toBe('existing');
      await expectCountersTrue(store);
      // Running operations do not wait: a claim makes room for exactly one more.
      await claimOne(store);
      expect((await one(store, { id: 'c', limits }))?.status).toBe('created');
      expect(await one(store, { id: 'd', limits })).toMatchObject({
        status: 'rejected',
        waiting: 2,
        running: 1,
      });
      await expectCountersTrue(store);
    });

    g.test(
      'the class bound refuses after the tenant had room, and takes nothing from it',
      async ({ store }) => {
        const limits = { maxWaiting: 5, maxQueued: 2 };
        expect((await one(store, { tenant: 'A', id: '1', limits }))?.status).toBe('created');
        expect((await one(store, { tenant: 'B', id: '1', limits }))?.status).toBe('created');
        expect(await one(store, { tenant: 'B', id: '2', limits })).toEqual({
          status: 'rejected',
          reason: 'class-queue-full',
          waiting: 2,
          running: 0,
          dueInMs: null,
        });
        // B's own count is still its one operation: the refused submit counted nothing.
        await expectCountersTrue(store);
        expect((await store.queueStats()).find((s) => s.tenant === 'B')).toMatchObject({ waiting: 1 });
        await claimOne(store);
        expect((await one(store, { tenant: 'B', id: '2', limits }))?.status).toBe('created');
        await expectCountersTrue(store);
      },
    );

    g.test(
      'a tenant full of delayed work is told when its earliest is due, alone or in a batch',
      async (fx) => {
        const { store, clock } = fx;
        const limits = { maxWaiting: 2, maxQueued: 10 };
        expect((await one(store, { id: 'a', limits, delayMs: 3_600_000 }))?.status).toBe('created');
        expect((await one(store, { id: 'b', limits, delayMs: 600_000 }))?.status).toBe('created');
        clock.advance(1_000);
        expect(await one(store, { id: 'c', limits })).toMatchObject({ status: 'rejected', dueInMs: 599_000 });
        // In a batch, beside another tenant's accepted item and a refusal of the class bound.
        const outcomes = await store.operationSubmitMany([
          submitParams({ id: 'd', limits }),
          submitParams({ tenant: 'South', id: 'd', limits }),
          submitParams({ tenant: 'West', id: 'd', limits: { maxWaiting: 2, maxQueued: 3 } }),
        ]);
        expect(outcomes.map((o) => (o.status === 'rejected' ? [o.reason, o.dueInMs] : o.status))).toEqual([
          ['tenant-queue-full', 599_000],
          'created',
          ['class-queue-full', null],
        ]);
        // Once the earliest is due, nothing is to be waited for beyond the class's own pace.
        clock.advance(600_000);
        expect(await one(store, { id: 'c', limits })).toMatchObject({ status: 'rejected', dueInMs: 0 });
      },
    );

    g.test('caps of zero refuse a tenant’s and a class’s very first operation', async ({ store }) => {
      expect(await one(store, { tenant: 'A', limits: { maxWaiting: 0 } })).toEqual({
        status: 'rejected',
        reason: 'tenant-queue-full',
        waiting: 0,
        running: 0,
        dueInMs: null,
      });
      expect(await one(store, { tenant: 'B', class: 'bulk', limits: { maxQueued: 0 } })).toEqual({
        status: 'rejected',
        reason: 'class-queue-full',
        waiting: 0,
        running: 0,
        dueInMs: null,
      });
      expect(await allOperations(store)).toEqual([]);
      await expectCountersTrue(store);
    });

    g.test(
      'the row a submit answers is the row stored, delay and deadline included',
      async ({ store, clock }) => {
        const now = clock.now();
        const out = await one(store, { id: 'later', delayMs: 1_500, deadlineMs: 90_000, maxAttempts: 2 });
        if (out?.status !== 'created') throw new Error(`not created: ${JSON.stringify(out)}`);
        expect(out.row).toMatchObject({ runAfter: now + 1_500, deadlineAt: now + 90_000, createdAt: now });
        expect(await store.operationGet({ tenant: 'North', id: 'later' })).toEqual(out.row);
      },
    );
  });

  // A service whose tenants come and go must not keep a queue row for every tenant it ever
  // served: every metrics scrape and usage read goes through them.
  t.group('queue rows of departed tenants', (g) => {
    const RETENTION = { retentionMs: 10_000, tombstoneMs: 100_000, limit: 100 };
    const finishAll = async (store: Store, cls: string) => {
      for (const row of await claim(store, { class: cls, limit: 100 }))
        await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'succeeded', result: null }]);
    };

    g.test('go with the purge of their last operation; a tenant holding any keeps its rows', async (fx) => {
      const { store, clock } = fx;
      // Gone: one operation in each of two classes, both purged. Kept: an old one purged and a
      // newer one finished within retention. Busy: an old one purged and one still waiting.
      for (const [tenant, id, cls] of [
        ['Gone', 'a', 'default'],
        ['Gone', 'b', 'bulk'],
        ['Kept', 'old', 'default'],
        ['Busy', 'old', 'default'],
      ] as const)
        await submitCreated(store, { tenant, id, class: cls });
      await finishAll(store, 'default');
      await finishAll(store, 'bulk');
      clock.advance(RETENTION.retentionMs + 1);
      await submitCreated(store, { tenant: 'Kept', id: 'new' });
      await finishAll(store, 'default');
      await submitCreated(store, { tenant: 'Busy', id: 'waiting', class: 'bulk' });
      const purge = await store.retentionPurge(RETENTION);
      expect(purge).toMatchObject({ purged: 4, queuesDeleted: 2 });
      expect((await store.queueStats()).map((q) => `${q.class}/${q.tenant}`)).toEqual([
        'bulk/Busy',
        'default/Busy',
        'default/Kept',
      ]);
      await expectCountersTrue(store);
      // A second pass finds nothing more to forget.
      expect(await store.retentionPurge(RETENTION)).toMatchObject({ purged: 0, queuesDeleted: 0 });
      // Read by tenant, or only the rows holding work.
      expect(await store.queueStats({ tenant: 'Busy' })).toEqual([
        { class: 'bulk', tenant: 'Busy', waiting: 1, running: 0 },
        { class: 'default', tenant: 'Busy', waiting: 0, running: 0 },
      ]);
      expect(await store.queueStats({ tenant: 'Gone' })).toEqual([]);
      await claimOne(store, { class: 'bulk' });
      await submitCreated(store, { tenant: 'Kept', id: 'again' });
      expect(await store.queueStats({ holdingWork: true })).toEqual([
        { class: 'bulk', tenant: 'Busy', waiting: 0, running: 1 },
        { class: 'default', tenant: 'Kept', waiting: 1, running: 0 },
      ]);
      expect(await store.queueStats({ tenant: 'Kept', holdingWork: true })).toEqual([
        { class: 'default', tenant: 'Kept', waiting: 1, running: 0 },
      ]);
      expect(await store.queueStats({ tenant: 'Busy', holdingWork: true })).toHaveLength(1);
    });

    g.test(
      'a tenant that comes back is counted in afresh, under the limits its submit brings',
      async (fx) => {
        const { store, clock } = fx;
        await submitCreated(store, { tenant: 'Gone', id: 'first' });
        await finishAll(store, 'default');
        clock.advance(RETENTION.retentionMs + 1);
        expect(await store.retentionPurge(RETENTION)).toMatchObject({ purged: 1, queuesDeleted: 1 });
        expect(await store.queueStats()).toEqual([]);
        const limits = { maxRunning: 1, maxWaiting: 2 };
        for (const id of ['x', 'y']) await submitCreated(store, { tenant: 'Gone', id, limits });
        expect(await one(store, { tenant: 'Gone', id: 'z', limits })).toMatchObject({
          status: 'rejected',
          reason: 'tenant-queue-full',
          waiting: 2,
        });
        // The cap on running holds on the new row: one claimed of two waiting.
        expect(await claim(store, { limit: 10 })).toHaveLength(1);
        await expectCountersTrue(store);
        expect(await store.queueStats()).toEqual([
          { class: 'default', tenant: 'Gone', waiting: 1, running: 1 },
        ]);
      },
    );
  });

  t.group('deferral', (g) => {
    g.test('deferred goes back to the queue after its delay without using an attempt', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const row = await claimOne(store);
      const error = { code: 'budget-exhausted', message: 'over' };
      expect(
        await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'deferred', delayMs: 5000, error }]),
      ).toEqual([true]);
      const after = await getRow(store, ref);
      expect(after).toMatchObject({ state: 'queued', attempt: 0, runAfter: clock.now() + 5000, error });
      expect(await claim(store)).toEqual([]);
      clock.advance(5000);
      expect((await claimOne(store)).attempt).toBe(1);
      const [attempt] = await store.attemptList(ref);
      expect(attempt).toMatchObject({ outcome: 'deferred', retryDelayMs: 5000 });
    });
  });

  t.group('spend budgets', (g) => {
    g.test('reserve on pending, commit on committed; over the limit nothing is written', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany([submitParams({ id: 'a' }), submitParams({ id: 'b' })]);
      const [a, b] = await claim(store, { limit: 2 });
      await store.effectBegin({ lease: leaseOf(a!), name: 'charge', key: 'k-a', spend: spend(6000) });
      expect(await usage(fx, 'spend:pay:tenant:North')).toMatchObject({ reserved: 6000, committed: 0 });
      const code = await rejectionCode(
        store.effectBegin({ lease: leaseOf(b!), name: 'charge', key: 'k-b', spend: spend(5000) }),
      );
      expect(code).toBe('budget-exhausted');
      expect(await store.effectList({ tenant: 'North', id: 'b' })).toEqual([]);
      expect((await getRow(store, { tenant: 'North', id: 'b' })).effectStartedAt).toBeNull();
      expect(await usage(fx, 'spend:pay:*')).toMatchObject({ reserved: 6000, committed: 0 });
      await store.effectMarkCommitted({ lease: leaseOf(a!), name: 'charge', result: 1, reference: null });
      expect(await usage(fx, 'spend:pay:tenant:North')).toMatchObject({ reserved: 0, committed: 6000 });
      // The refusal carried when the window resets.
      const error = await store
        .effectBegin({ lease: leaseOf(b!), name: 'charge', key: 'k-b', spend: spend(5000) })
        .catch((e) => e);
      expect(error.retryAfterMs).toBe(HOUR - (fx.clock.now() % HOUR));
    });

    g.test('absent and failed release the reservation; the limit itself is allowed', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany([
        submitParams({ id: 'a' }),
        submitParams({ id: 'b' }),
        submitParams({ id: 'c' }),
      ]);
      const [a, b, c] = await claim(store, { limit: 3 });
      await store.effectBegin({ lease: leaseOf(a!), name: 'charge', key: 'k-a', spend: spend(10_000) });
      expect(await store.effectMarkAbsent({ lease: leaseOf(a!), name: 'charge' })).toBe(true);
      expect(await usage(fx, 'spend:pay:tenant:North')).toMatchObject({ reserved: 0, committed: 0 });
      await store.effectBegin({ lease: leaseOf(b!), name: 'charge', key: 'k-b', spend: spend(10_000) });
      expect(await store.effectMarkFailed({ lease: leaseOf(b!), name: 'charge', error: BOOM })).toBe(true);
      expect(await usage(fx, 'spend:pay:tenant:North')).toMatchObject({ reserved: 0, committed: 0 });
      // Exactly the limit fits; a send from absent reserves again.
      await store.effectBegin({ lease: leaseOf(c!), name: 'charge', key: 'k-c', spend: spend(10_000) });
      expect(await usage(fx, 'spend:pay:tenant:North')).toMatchObject({ reserved: 10_000 });
      const over = await rejectionCode(
        store.effectRecordSend({ lease: leaseOf(a!), name: 'charge', spend: spend(1) }),
      );
      expect(over).toBe('budget-exhausted');
      expect((await store.effectList({ tenant: 'North', id: 'a' }))[0]).toMatchObject({
        state: 'absent',
        sends: 1,
      });
    });

    g.test('a resend of a pending effect does not reserve twice; a new window starts afresh', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const row = await claimOne(store);
      await store.effectBegin({ lease: leaseOf(row), name: 'charge', key: 'k', spend: spend(7000) });
      await store.effectRecordSend({ lease: leaseOf(row), name: 'charge', spend: spend(7000) });
      expect(await usage(fx, 'spend:pay:tenant:North')).toMatchObject({ reserved: 7000 });
      clock.advance(HOUR);
      await submitCreated(store, { id: 'op-2' });
      const next = await claimOne(store);
      await store.effectBegin({ lease: leaseOf(next), name: 'charge', key: 'k2', spend: spend(7000) });
      expect(await usage(fx, 'spend:pay:tenant:North')).toMatchObject({ reserved: 7000, committed: 0 });
    });

    g.test('reconcile commits or releases what a pending effect holds', async (fx) => {
      const { store } = fx;
      await store.operationSubmitMany([submitParams({ id: 'a' }), submitParams({ id: 'b' })]);
      const rows = await claim(store, { limit: 2 });
      for (const row of rows) {
        await store.effectBegin({ lease: leaseOf(row), name: 'charge', key: row.id, spend: spend(1000) });
        const error = { code: 'effect-outcome-unknown', message: 'unknown' };
        await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'needs_reconciliation', error }]);
      }
      await store.operationReconcile({
        tenant: 'North',
        id: 'a',
        by: 'ops',
        reason: 'found it',
        effects: [{ name: 'charge', outcome: 'committed', result: 1 }],
        resolution: 'succeeded',
      });
      await store.operationReconcile({
        tenant: 'North',
        id: 'b',
        by: 'ops',
        reason: 'never happened',
        effects: [{ name: 'charge', outcome: 'absent' }],
        resolution: 'failed',
      });
      expect(await usage(fx, 'spend:pay:tenant:North')).toMatchObject({ reserved: 0, committed: 1000 });
    });

    g.test("a tenant's windows are those its keys name after their first tenant mark", async (fx) => {
      const { store, clock } = fx;
      // Tenants are any visible ASCII: one contains the mark and ends as North's keys do, one
      // starts as North does.
      const tenants = ['North', 'x:tenant:North', 'Northern'];
      const charges: BudgetCharge[] = tenants.flatMap((t) => [
        { key: `spend:pay:tenant:${t}`, limit: 10_000, windowMs: HOUR, cost: 10 },
        { key: `spend:mail:tenant:${t}`, limit: 10_000, windowMs: HOUR, cost: 20 },
      ]);
      charges.push({ key: 'spend:pay:*', limit: 100_000, windowMs: HOUR, cost: 30 });
      const rates: BudgetCharge[] = [{ key: 'rate:pay:tenant:North', limit: 5, windowMs: 1000, cost: 1 }];
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      await store.effectBegin({ lease, name: 'charge', key: 'k', spend: charges, rates });
      const keys = async (tenant: string, prefix?: string) =>
        (await store.budgetUsage({ prefix, since: clock.now(), tenant })).map((u) => u.key);

      expect(await keys('North')).toEqual([
        'rate:pay:tenant:North',
        'spend:mail:tenant:North',
        'spend:pay:tenant:North',
      ]);
      expect(await keys('North', 'spend:')).toEqual(['spend:mail:tenant:North', 'spend:pay:tenant:North']);
      expect(await keys('x:tenant:North')).toEqual([
        'spend:mail:tenant:x:tenant:North',
        'spend:pay:tenant:x:tenant:North',
      ]);
      expect(await keys('Northern', 'spend:pay:')).toEqual(['spend:pay:tenant:Northern']);
      expect(await keys('tenant:North')).toEqual([]);
      expect(await keys('*')).toEqual([]); // the all-tenants window names none
      expect(
        await store.budgetUsage({ prefix: 'spend:pay:tenant:North', since: clock.now(), tenant: 'North' }),
      ).toEqual([
        {
          key: 'spend:pay:tenant:North',
          windowStart: clock.now() - (clock.now() % HOUR),
          windowMs: HOUR,
          reserved: 10,
          committed: 0,
        },
      ]);
      // A window that ended is not in effect.
      clock.advance(1000 - (clock.now() % 1000) + 1);
      expect(await keys('North')).toEqual(['spend:mail:tenant:North', 'spend:pay:tenant:North']);
    });
  });

  t.group('call-rate caps and request caps', (g) => {
    g.test('every request draws on the rate cap; over it, refused until the window resets', async (fx) => {
      const { store, clock } = fx;
      const rates: BudgetCharge[] = [{ key: 'rate:pay', limit: 2, windowMs: 1000, cost: 1 }];
      await store.operationSubmitMany([submitParams({ id: 'a' }), submitParams({ id: 'b' })]);
      const [a, b] = await claim(store, { limit: 2 });
      await store.effectBegin({ lease: leaseOf(a!), name: 'charge', key: 'ka', rates });
      await store.effectRecordSend({ lease: leaseOf(a!), name: 'charge', rates });
      const refused = await store
        .effectBegin({ lease: leaseOf(b!), name: 'charge', key: 'kb', rates })
        .catch((e) => e);
      expect([refused.code, refused.retryAfterMs]).toEqual(['budget-exhausted', 1000 - (clock.now() % 1000)]);
      clock.advance(1000 - (clock.now() % 1000));
      expect(
        (await store.effectBegin({ lease: leaseOf(b!), name: 'charge', key: 'kb', rates })).created,
      ).toBe(true);
      expect(await usage(fx, 'rate:pay')).toMatchObject({ committed: 1 });
    });

    g.test('the purge drops a call-rate window once it ended, a spend window a day after', async (fx) => {
      const { store, clock } = fx;
      const rates: BudgetCharge[] = [{ key: 'rate:pay:tenant:North', limit: 5, windowMs: 1000, cost: 1 }];
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      await store.effectBegin({ lease, name: 'charge', key: 'k', spend: spend(100), rates });
      const kept = async () => (await store.budgetUsage({ since: 0 })).map((u) => u.key);
      const purge = () => store.retentionPurge({ retentionMs: HOUR, tombstoneMs: HOUR, limit: 10 });
      expect(await kept()).toEqual(['rate:pay:tenant:North', 'spend:pay:*', 'spend:pay:tenant:North']);
      // Not ended yet: kept.
      await purge();
      expect(await kept()).toHaveLength(3);
      // At its end it is kept; a millisecond past it, gone.
      clock.advance(1000 - (clock.now() % 1000));
      await purge();
      expect(await kept()).toHaveLength(3);
      clock.advance(1);
      await purge();
      expect(await kept()).toEqual(['spend:pay:*', 'spend:pay:tenant:North']);
      const spendEnd = clock.now() - (clock.now() % HOUR) + HOUR;
      clock.advance(spendEnd + DAY - clock.now());
      await purge();
      expect(await kept()).toEqual(['spend:pay:*', 'spend:pay:tenant:North']);
      clock.advance(1);
      await purge();
      expect(await kept()).toEqual([]);
    });

    g.test('maxCalls caps the requests of the whole operation, across its effects', async ({ store }) => {
      await submitCreated(store);
      const lease = leaseOf(await claimOne(store));
      await store.effectBegin({ lease, name: 'a', key: 'ka', maxCalls: 3 });
      await store.effectRecordSend({ lease, name: 'a', maxCalls: 3 });
      await store.effectBegin({ lease, name: 'b', key: 'kb', maxCalls: 3 });
      expect(await rejectionCode(store.effectRecordSend({ lease, name: 'b', maxCalls: 3 }))).toBe(
        'provider-call-limit-exceeded',
      );
      expect(await rejectionCode(store.effectBegin({ lease, name: 'c', key: 'kc', maxCalls: 3 }))).toBe(
        'provider-call-limit-exceeded',
      );
      expect((await store.effectList(ref)).map((e) => [e.name, e.sends])).toEqual([
        ['a', 2],
        ['b', 1],
      ]);
    });
  });

  t.group('retry budget', (g) => {
    const budget = { windowMs: 60_000, bucketMs: 1000, ratio: 0.1, floor: 2, shard: 0 };

    g.test(
      'retries stay under floor + ratio × first attempts in the window; denials are counted',
      async (fx) => {
        const { store, clock } = fx;
        await startedFirst(store, 20, 3);
        const takes: boolean[] = [];
        for (let i = 0; i < 6; i++) takes.push((await store.retryBudgetTake(budget)).allowed);
        // floor 2 + 10% of 20 first attempts = 4 retries.
        expect(takes).toEqual([true, true, true, true, false, false]);
        expect(await store.retryBudgetStats({ windowMs: 60_000 })).toEqual({
          firstAttempts: 20,
          retries: 4,
          denials: 2,
        });
        // The window slides: a minute later only the floor remains.
        clock.advance(61_000);
        expect(await store.retryBudgetStats({ windowMs: 60_000 })).toEqual({
          firstAttempts: 0,
          retries: 0,
          denials: 0,
        });
        const later: boolean[] = [];
        for (let i = 0; i < 3; i++) later.push((await store.retryBudgetTake(budget)).allowed);
        expect(later).toEqual([true, true, false]);
      },
    );

    g.test(
      'a fractional bound is not rounded up, nor one a rounding error puts under a whole down',
      async ({ store }) => {
        await startedFirst(store, 100, 0);
        // Retries taken so far, in all, after asking `n` more times under another bound.
        let taken = 0;
        const ask = async (ratio: number, n: number) => {
          for (let i = 0; i < n; i++)
            if ((await store.retryBudgetTake({ ...budget, ratio, floor: 0 })).allowed) taken++;
          return taken;
        };
        // 0.001 × 100 = 0.1: not one whole retry.
        expect(await ask(0.001, 2)).toBe(0);
        // 0.035 × 100 = 3.5: three, not four.
        expect(await ask(0.035, 5)).toBe(3);
        // 0.29 × 100 is 28.999999999999996 in floating point: still 29.
        expect(await ask(0.29, 30)).toBe(29);
        expect(await store.retryBudgetStats({ windowMs: 60_000 })).toMatchObject({ retries: 29, denials: 8 });
      },
    );

    g.test('only first attempts are counted by the claim', async (fx) => {
      const { store } = fx;
      await submitCreated(store);
      const first = await claimOne(store);
      await store.attemptFinishMany([{ lease: leaseOf(first), outcome: 'retry', error: BOOM, delayMs: 0 }]);
      const again = await store.operationClaimMany({
        class: 'default',
        owner: 'w',
        limit: 1,
        leaseMs: 30_000,
        retryBudget: { bucketMs: 1000, shard: 0 },
      });
      expect(again.rows[0]?.attempt).toBe(2);
      expect((await store.retryBudgetStats({ windowMs: 60_000 })).firstAttempts).toBe(0);
    });

    g.test('an attempt given back (deferred, released) is not a first attempt again', async (fx) => {
      const { store } = fx;
      await submitCreated(store);
      // Claimed at attempt 1 each time: a deferral and a release do not use the attempt up.
      for (const outcome of ['deferred', 'released', 'deferred'] as const) {
        const { rows } = await store.operationClaimMany({
          class: 'default',
          owner: 'w',
          limit: 1,
          leaseMs: 30_000,
          retryBudget: { bucketMs: 1000, shard: 0 },
        });
        expect(rows[0]?.attempt).toBe(1);
        const end =
          outcome === 'deferred'
            ? { outcome, error: { code: 'budget-exhausted', message: 'wait' }, delayMs: 0 }
            : { outcome };
        expect(await store.attemptFinishMany([{ lease: leaseOf(rows[0]!), ...end }])).toEqual([true]);
      }
      // One operation, started for the first time once: the retry budget's allowance grows by one.
      expect((await store.retryBudgetStats({ windowMs: 60_000 })).firstAttempts).toBe(1);
    });
  });
}
