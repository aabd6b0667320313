/**
 * @module test/conformance/cases/identity
 * Acceptance: `(tenant, id)` is the identity of an operation and the digest binds it to its
 * inputs. Same digest → the existing operation; another digest → a conflict that changes
 * nothing; a purged id → expired, never run again.
 */
import { expect } from 'vitest';
import type { SubmitOutcome } from '../../../src/store/types.js';
import {
  allOperations,
  BOOM,
  claim,
  claimOne,
  DEFAULT_INPUT,
  getRow,
  leaseOf,
  submitCreated,
  submitParams,
} from '../fixtures.js';
import type { CaseRegistry } from '../store-suite.js';

const rowOf = (outcome: SubmitOutcome | undefined) => {
  if (!outcome || !('row' in outcome)) throw new Error(`no row in ${JSON.stringify(outcome)}`);
  return outcome.row;
};

export function identityCases(t: CaseRegistry): void {
  t.group('identity and conflict', (g) => {
    g.test('a migrated store reports the latest schema version as applied', async ({ store }) => {
      const status = await store.migrationStatus();
      expect(status.latest).toBeGreaterThanOrEqual(20);
      expect(status.applied).toBe(status.latest);
    });

    g.test(
      'a migrated store keeps a cursor key of its own: 16 random bytes, read the same each time',
      async ({ store }) => {
        const key = await store.secret('cursor');
        expect(key).toMatch(/^[0-9a-f]{32}$/);
        expect(await store.secret('cursor')).toBe(key);
        expect(key).not.toMatch(/^(.)\1+$/);
      },
    );

    g.test('a new (tenant, id) is created queued, stamped with the store clock', async ({ store, clock }) => {
      const now = clock.now();
      const p = submitParams({ deadlineMs: 60_000, maxAttempts: 3 });
      const [out] = await store.operationSubmitMany([p]);
      expect(out?.status).toBe('created');
      const row = rowOf(out);
      expect(row).toMatchObject({
        tenant: 'North',
        id: 'op-1',
        kind: 'charge',
        class: 'default',
        digest: p.digest,
        input: DEFAULT_INPUT,
        state: 'queued',
        attempt: 0,
        maxAttempts: 3,
        epoch: 0,
        runAfter: now,
        deadlineAt: now + 60_000,
        createdAt: now,
        updatedAt: now,
        startedAt: null,
        finishedAt: null,
        leaseOwner: null,
        leaseExpiresAt: null,
        leaseExpiries: 0,
        effectStartedAt: null,
        cancel: null,
        cancelRequestedAt: null,
        error: null,
      });
      expect(await store.operationGet({ tenant: 'North', id: 'op-1' })).toEqual(row);
      expect(await store.queueStats()).toEqual([
        { class: 'default', tenant: 'North', waiting: 1, running: 0 },
      ]);
    });

    g.test('delayMs postpones the first attempt: runAfter = now + delay', async ({ store, clock }) => {
      const row = await submitCreated(store, { delayMs: 5_000 });
      expect(row.runAfter).toBe(clock.now() + 5_000);
      clock.advance(4_999);
      expect(await claim(store)).toEqual([]);
      clock.advance(1);
      expect((await claimOne(store)).id).toBe('op-1');
    });

    g.test('the same id with the same digest answers the existing operation, unchanged', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const before = await getRow(store, { tenant: 'North', id: 'op-1' });
      clock.advance(1_000);
      // Key order does not matter: the digest is over the canonical form.
      const [out] = await store.operationSubmitMany([
        submitParams({ input: { amount_cents: 5000, invoice: 7 }, maxAttempts: 9, delayMs: 60_000 }),
      ]);
      expect(out?.status).toBe('existing');
      expect(rowOf(out)).toEqual(before);
      expect(await getRow(store, before)).toEqual(before);
    });

    g.test('a duplicate is answered in every state, with that state', async ({ store }) => {
      await submitCreated(store);
      const running = await claimOne(store);
      const [dup1] = await store.operationSubmitMany([submitParams()]);
      expect(dup1?.status).toBe('existing');
      expect(rowOf(dup1)).toMatchObject({ state: 'running', epoch: running.epoch });
      expect(
        await store.attemptFinishMany([{ lease: leaseOf(running), outcome: 'succeeded', result: 42 }]),
      ).toEqual([true]);
      const [dup2] = await store.operationSubmitMany([submitParams()]);
      expect(dup2?.status).toBe('existing');
      expect(rowOf(dup2)).toMatchObject({ state: 'succeeded', result: 42 });
    });

    g.test(
      'the same id with another digest is a conflict: the original is kept, nothing changes',
      async (fx) => {
        const { store, clock } = fx;
        const original = await submitCreated(store);
        clock.advance(1_000);
        const [byInput, byKind] = await store.operationSubmitMany([
          submitParams({ input: { invoice: 7, amount_cents: 9999 } }),
          submitParams({ kind: 'refund' }),
        ]);
        for (const out of [byInput, byKind]) {
          expect(out?.status).toBe('conflict');
          expect(rowOf(out)).toEqual(original);
        }
        expect(await getRow(store, original)).toEqual(original);
        expect(await allOperations(store)).toHaveLength(1);
      },
    );

    g.test('a conflict on a finished operation changes nothing either', async ({ store }) => {
      await submitCreated(store);
      const running = await claimOne(store);
      await store.attemptFinishMany([{ lease: leaseOf(running), outcome: 'failed', error: BOOM }]);
      const before = await getRow(store, running);
      const [out] = await store.operationSubmitMany([submitParams({ input: { other: true } })]);
      expect(out?.status).toBe('conflict');
      expect(await getRow(store, running)).toEqual(before);
    });

    g.test('a batch returns one outcome per item, in order, each seeing the items before it', async (fx) => {
      const { store } = fx;
      const outcomes = await store.operationSubmitMany([
        submitParams({ id: 'a' }),
        submitParams({ id: 'b' }),
        submitParams({ id: 'a' }),
        submitParams({ id: 'a', input: { invoice: 8, amount_cents: 1 } }),
        submitParams({ id: 'c' }),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual([
        'created',
        'created',
        'existing',
        'conflict',
        'created',
      ]);
      expect(outcomes.map((o) => rowOf(o).id)).toEqual(['a', 'b', 'a', 'a', 'c']);
      expect(rowOf(outcomes[2]).seq).toBe(rowOf(outcomes[0]).seq);
      expect((await allOperations(store)).map((r) => r.id)).toEqual(['a', 'b', 'c']);
      expect(await store.operationSubmitMany([])).toEqual([]);
    });

    g.test('the id is scoped by tenant: the same id in two tenants is two operations', async ({ store }) => {
      const [north, south] = await store.operationSubmitMany([
        submitParams({ tenant: 'North', id: 'same' }),
        submitParams({ tenant: 'South', id: 'same', input: { invoice: 1, amount_cents: 1 } }),
      ]);
      expect([north?.status, south?.status]).toEqual(['created', 'created']);
      expect(rowOf(north).seq).not.toBe(rowOf(south).seq);
      expect((await getRow(store, { tenant: 'South', id: 'same' })).input).toEqual({
        invoice: 1,
        amount_cents: 1,
      });
      expect((await store.operationList({ tenant: 'North', limit: 10 })).map((r) => r.digest)).toEqual([
        rowOf(north).digest,
      ]);

      // Acting on one tenant's operation leaves the other's alone.
      const cancelled = await store.operationCancel({ tenant: 'North', id: 'same' });
      expect(cancelled?.outcome).toBe('cancelled');
      expect((await getRow(store, { tenant: 'South', id: 'same' })).state).toBe('queued');
      const claimed = await claimOne(store);
      expect(claimed).toMatchObject({ tenant: 'South', id: 'same' });
      // A lease names its tenant: North's id with South's epoch is not South's lease.
      const [wrongTenant] = await store.leaseExtendMany({
        leases: [{ ...leaseOf(claimed), tenant: 'North' }],
        leaseMs: 1_000,
      });
      expect(wrongTenant?.ok).toBe(false);
      expect(await store.operationGet({ tenant: 'East', id: 'same' })).toBeUndefined();
    });

    g.test('a tombstoned id is refused as expired, telling whether the digest matches', async (fx) => {
      const { store, clock } = fx;
      await submitCreated(store);
      const running = await claimOne(store);
      await store.attemptFinishMany([{ lease: leaseOf(running), outcome: 'succeeded', result: null }]);
      clock.advance(10_001);
      const purge = await store.retentionPurge({ retentionMs: 10_000, tombstoneMs: 100_000, limit: 10 });
      expect(purge.purged).toBe(1);
      const [same, other] = await store.operationSubmitMany([
        submitParams(),
        submitParams({ input: { invoice: 7, amount_cents: 1 } }),
      ]);
      expect(same).toEqual({ status: 'expired', digestMatches: true });
      expect(other).toEqual({ status: 'expired', digestMatches: false });
      expect(await store.operationGet({ tenant: 'North', id: 'op-1' })).toBeUndefined();
      expect(await allOperations(store)).toEqual([]);
      // The tombstone is per tenant too.
      const [elsewhere] = await store.operationSubmitMany([submitParams({ tenant: 'South' })]);
      expect(elsewhere?.status).toBe('created');
    });

    g.test('a purge of the newest operations never frees their positions for the next submit', async (fx) => {
      const { store, clock } = fx;
      const first = rowOf((await store.operationSubmitMany([submitParams({ id: 'older' })]))[0]);
      const newest = rowOf((await store.operationSubmitMany([submitParams({ id: 'newest' })]))[0]);
      for (let i = 0; i < 2; i++) {
        const running = await claimOne(store);
        await store.attemptFinishMany([{ lease: leaseOf(running), outcome: 'succeeded', result: null }]);
      }
      // A reader's cursor: everything up to the newest operation seen.
      const cursor = newest.seq;
      expect(cursor).toBeGreaterThan(first.seq);
      clock.advance(10_001);
      const purge = await store.retentionPurge({ retentionMs: 10_000, tombstoneMs: 100_000, limit: 10 });
      expect(purge.purged).toBe(2);
      const next = rowOf((await store.operationSubmitMany([submitParams({ id: 'after-purge' })]))[0]);
      expect(next.seq).toBeGreaterThan(cursor);
      const listed = await store.operationList({ tenant: 'North', after: cursor, limit: 10 });
      expect(listed.map((r) => r.id)).toEqual(['after-purge']);
      // Once a newer row exists, numbering goes on from it.
      const later = rowOf((await store.operationSubmitMany([submitParams({ id: 'later' })]))[0]);
      expect(later.seq).toBeGreaterThan(next.seq);
    });
  });
}
