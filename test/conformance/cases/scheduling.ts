/**
 * @module test/conformance/cases/scheduling
 * Admission and scheduling inside the store: fair claims across tenants of a class (a backlog
 * never delays another tenant's one operation; idle time is not banked; weights share), the
 * per-tenant, per-class caps `maxRunning` (claims never exceed it) and `maxWaiting` (refused,
 * nothing stored, duplicates still answered), and classes that never borrow each other's work.
 */
import { expect } from 'vitest';
import type { Store } from '../../../src/store/store.js';
import type { QueueLimits } from '../../../src/store/types.js';
import { claim, claimOne, expireAndRescue, getRow, leaseOf, submitParams } from '../fixtures.js';
import type { CaseRegistry } from '../store-suite.js';

async function enqueue(
  store: Store,
  tenant: string,
  count: number,
  over: { class?: string; limits?: QueueLimits } = {},
) {
  const outcomes = await store.operationSubmitMany(
    Array.from({ length: count }, (_, i) =>
      submitParams({ tenant, id: `${tenant}-${over.class ?? 'default'}-${i}`, ...over }),
    ),
  );
  expect(outcomes.every((o) => o.status === 'created')).toBe(true);
}

/** `limit` claims of one operation each: the tenants served, in order. */
async function servedInTurn(store: Store, claims: number, cls = 'default'): Promise<string[]> {
  const served: string[] = [];
  for (let i = 0; i < claims; i++) served.push((await claimOne(store, { class: cls })).tenant);
  return served;
}

async function running(store: Store, tenant: string, cls = 'default'): Promise<number> {
  return (await store.queueStats()).find((s) => s.tenant === tenant && s.class === cls)?.running ?? 0;
}

export function schedulingCases(t: CaseRegistry): void {
  t.group('fair claim', (g) => {
    g.test("a tenant with 50 queued does not delay another tenant's one", async ({ store }) => {
      await enqueue(store, 'North', 50);
      await enqueue(store, 'South', 1);
      const rows = await claim(store, { limit: 2 });
      expect(rows.map((r) => r.tenant).sort()).toEqual(['North', 'South']);
    });

    g.test(
      'a tenant with fewer ready than its share hands its turns to the others, in order',
      async ({ store }) => {
        // Shares of a claim of 6 over three tenants tied on virtual time: 2 each. Bravo has 1, so
        // its second turn goes to whoever is next by virtual time: Charlie, then Alpha.
        await enqueue(store, 'Alpha', 3);
        await enqueue(store, 'Bravo', 1);
        await enqueue(store, 'Charlie', 5);
        const rows = await claim(store, { limit: 6 });
        expect(rows.map((r) => r.tenant)).toEqual(['Alpha', 'Bravo', 'Charlie', 'Alpha', 'Charlie', 'Alpha']);
        expect(rows.map((r) => r.id)).toEqual([
          'Alpha-default-0',
          'Bravo-default-0',
          'Charlie-default-0',
          'Alpha-default-1',
          'Charlie-default-1',
          'Alpha-default-2',
        ]);
      },
    );

    g.test('claims rotate across tenants', async ({ store }) => {
      await enqueue(store, 'North', 10);
      await enqueue(store, 'South', 10);
      const served = await servedInTurn(store, 10);
      for (let i = 1; i < served.length; i++)
        expect(served[i], `claim ${i}: ${served.join(',')}`).not.toBe(served[i - 1]);
      const rows = await claim(store, { limit: 4 });
      expect(rows.filter((r) => r.tenant === 'North')).toHaveLength(2);
    });

    g.test('a tenant arriving behind a backlog is served within one claim', async ({ store }) => {
      await enqueue(store, 'North', 20);
      expect(await servedInTurn(store, 5)).toEqual(Array(5).fill('North'));
      await enqueue(store, 'South', 1);
      expect(await servedInTurn(store, 2)).toContain('South');
    });

    g.test('an idle tenant banks no credit to crowd others out when it returns', async ({ store }) => {
      await enqueue(store, 'North', 30);
      await store.operationSubmitMany([submitParams({ tenant: 'South', id: 'early' })]);
      const first = await servedInTurn(store, 10);
      expect(first.filter((x) => x === 'South')).toHaveLength(1);
      await enqueue(store, 'South', 10);
      const next = await servedInTurn(store, 6);
      expect(next.filter((x) => x === 'North').length, next.join(',')).toBeGreaterThanOrEqual(2);
      expect(next.filter((x) => x === 'South').length, next.join(',')).toBeGreaterThanOrEqual(2);
    });

    g.test('weights share claims in proportion', async ({ store }) => {
      await enqueue(store, 'North', 40, { limits: { weight: 2 } });
      await enqueue(store, 'South', 40, { limits: { weight: 1 } });
      const served = await servedInTurn(store, 30);
      const north = served.filter((x) => x === 'North').length;
      expect(north, served.join(',')).toBeGreaterThanOrEqual(19);
      expect(north, served.join(',')).toBeLessThanOrEqual(21);
    });

    g.test('equal service makes equal virtual times, however the claims were batched', async (fx) => {
      const { store, clock } = fx;
      // At weight 10, three additions of 0.1 are 0.30000000000000004, and 3 / 10 is 0.3: a store
      // that advanced a batch of three by division would put Bravo ahead of Alpha below.
      const later = { limits: { weight: 10 }, delayMs: 1000 };
      await store.operationSubmitMany([
        ...[0, 1, 2, 3].map((i) => submitParams({ tenant: 'Alpha', id: `Alpha-${i}`, ...later })),
        ...[0, 1, 2].map((i) => submitParams({ tenant: 'Bravo', id: `Bravo-${i}`, limits: { weight: 10 } })),
        submitParams({ tenant: 'Bravo', id: 'Bravo-3', ...later }),
      ]);
      // Bravo alone is ready: three operations in one claim (start tags 0, 0.1, 0.2).
      expect((await claim(store, { limit: 3 })).map((r) => r.id)).toEqual(['Bravo-0', 'Bravo-1', 'Bravo-2']);
      clock.advance(1000);
      // Alpha's work was delayed, not waiting: it starts from the class's clock (0.2), not 0, and
      // after one claim of one stands at 0.2 + 0.1, as Bravo stands at 0.1 + 0.1 + 0.1 (both
      // 0.30000000000000004): a tie, which goes to the first by name, then Bravo.
      expect(await servedInTurn(store, 3)).toEqual(['Alpha', 'Alpha', 'Bravo']);
    });

    g.test('a cancelled operation leaves no stale ready time to spend claims on', async ({ store }) => {
      for (const tenant of ['Alpha', 'Bravo', 'Charlie', 'Delta', 'Echo']) {
        await store.operationSubmitMany([submitParams({ tenant, id: `${tenant}-gone` })]);
        expect(await store.operationCancel({ tenant, id: `${tenant}-gone` })).toMatchObject({
          outcome: 'cancelled',
        });
      }
      await store.operationSubmitMany([submitParams({ tenant: 'Zulu', id: 'Zulu-0' })]);
      // One claim of one finds Zulu's, however many tenants had their only work cancelled.
      expect((await claim(store, { limit: 1 })).map((r) => r.id)).toEqual(['Zulu-0']);
    });

    g.test('a tenant whose work was delayed banks no credit, nor lends it to one arriving', async (fx) => {
      const { store, clock } = fx;
      // Alpha's only work is delayed an hour while Bravo is served on its own.
      await store.operationSubmitMany([
        submitParams({ tenant: 'Alpha', id: 'Alpha-later', delayMs: 3_600_000 }),
      ]);
      await enqueue(store, 'Bravo', 60);
      expect(new Set(await servedInTurn(store, 20))).toEqual(new Set(['Bravo']));
      // A tenant arriving now takes turns with Bravo: it does not start from Alpha's old time.
      await enqueue(store, 'Charlie', 15);
      const arriving = await servedInTurn(store, 12);
      expect(arriving.filter((x) => x === 'Bravo').length, arriving.join(',')).toBeGreaterThanOrEqual(5);
      // Nor does Alpha, once its delay has run out and it has more to do.
      clock.advance(3_600_000);
      await enqueue(store, 'Alpha', 15);
      const returning = await servedInTurn(store, 12);
      expect(returning.filter((x) => x === 'Alpha').length, returning.join(',')).toBeLessThanOrEqual(5);
      expect(returning.filter((x) => x === 'Bravo').length, returning.join(',')).toBeGreaterThanOrEqual(3);
    });

    g.test("a tenant's ready time moves earlier as work enters, never later", async (fx) => {
      const { store, clock } = fx;
      await store.operationSubmitMany([submitParams({ tenant: 'North', id: 'later', delayMs: 60_000 })]);
      expect(await claim(store, { limit: 5 })).toEqual([]);
      // Work due now behind work due later: the tenant is ready now.
      await store.operationSubmitMany([submitParams({ tenant: 'North', id: 'now' })]);
      // Work due later behind work due now: still ready now, for the work due now only.
      await store.operationSubmitMany([submitParams({ tenant: 'North', id: 'latest', delayMs: 120_000 })]);
      expect((await claim(store, { limit: 5 })).map((r) => r.id)).toEqual(['now']);
      clock.advance(60_000);
      expect((await claim(store, { limit: 5 })).map((r) => r.id)).toEqual(['later']);
      clock.advance(60_000);
      expect((await claim(store, { limit: 5 })).map((r) => r.id)).toEqual(['latest']);
    });
  });

  t.group('tenant limits', (g) => {
    g.test('limits sent with a submit replace the ones the tenant had', async ({ store }) => {
      await enqueue(store, 'North', 3);
      // The same weight, a cap now: only the cap changes, and it holds for the work queued before.
      await store.operationSubmitMany([
        submitParams({ tenant: 'North', id: 'capped', limits: { weight: 1, maxRunning: 1 } }),
      ]);
      expect(await claim(store, { limit: 10 })).toHaveLength(1);
      expect(await running(store, 'North')).toBe(1);
      // Sent again as they are, they change nothing; lifted, the rest may run.
      await store.operationSubmitMany([
        submitParams({ tenant: 'North', id: 'same', limits: { weight: 1, maxRunning: 1 } }),
      ]);
      expect(await claim(store, { limit: 10 })).toEqual([]);
      await store.operationSubmitMany([
        submitParams({ tenant: 'North', id: 'lifted', limits: { weight: 1, maxRunning: null } }),
      ]);
      expect(await claim(store, { limit: 10 })).toHaveLength(5);
    });

    g.test('maxRunning is never exceeded by claims, whoever claims', async ({ store }) => {
      await enqueue(store, 'North', 5, { limits: { maxRunning: 2 } });
      await enqueue(store, 'South', 3);
      const rows = await claim(store, { limit: 10 });
      expect(rows.filter((r) => r.tenant === 'North')).toHaveLength(2);
      expect(rows.filter((r) => r.tenant === 'South')).toHaveLength(3);
      expect(await claim(store, { owner: 'w2', limit: 10 })).toEqual([]);
      expect(await running(store, 'North')).toBe(2);
      const north = rows.find((r) => r.tenant === 'North')!;
      await store.attemptFinishMany([{ lease: leaseOf(north), outcome: 'succeeded', result: 1 }]);
      const more = await claim(store, { owner: 'w3', limit: 10 });
      expect(more.map((r) => r.tenant)).toEqual(['North']);
      expect(await running(store, 'North')).toBe(2);
    });

    g.test('maxRunning holds across redelivery', async (fx) => {
      const { store } = fx;
      await enqueue(store, 'North', 3, { limits: { maxRunning: 1 } });
      expect(await claim(store, { limit: 10 })).toHaveLength(1);
      expect(await claim(store, { limit: 10 })).toHaveLength(0);
      expect(await expireAndRescue(fx)).toHaveLength(1);
      expect(await claim(store, { limit: 10 })).toHaveLength(1);
      expect(await claim(store, { limit: 10 })).toHaveLength(0);
      expect(await running(store, 'North')).toBe(1);
    });

    g.test('maxWaiting refuses with tenant-queue-full and stores nothing', async ({ store }) => {
      const limits = { maxWaiting: 2 };
      const outcomes = await store.operationSubmitMany([
        submitParams({ id: 'a', limits }),
        submitParams({ id: 'b', limits }),
        submitParams({ id: 'c', limits }),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['created', 'created', 'rejected']);
      expect(outcomes[2]).toMatchObject({ status: 'rejected', reason: 'tenant-queue-full' });
      expect(outcomes[2]).toMatchObject({ waiting: 2, running: 0 });
      expect(await store.operationGet({ tenant: 'North', id: 'c' })).toBeUndefined();
      expect((await store.operationList({ limit: 10 })).map((r) => r.id)).toEqual(['a', 'b']);
      // Other tenants, and the same tenant in another class, have their own room.
      const others = await store.operationSubmitMany([
        submitParams({ tenant: 'South', id: 'c', limits }),
        submitParams({ id: 'c', class: 'bulk', limits }),
      ]);
      expect(others.map((o) => o.status)).toEqual(['created', 'created']);
    });

    g.test('a full tenant still gets answers for accepted ids: existing, conflict', async ({ store }) => {
      const limits = { maxWaiting: 1 };
      await store.operationSubmitMany([submitParams({ id: 'a', limits })]);
      const [dup, conflict, fresh] = await store.operationSubmitMany([
        submitParams({ id: 'a', limits }),
        submitParams({ id: 'a', limits, input: { other: 1 } }),
        submitParams({ id: 'b', limits }),
      ]);
      expect(dup?.status).toBe('existing');
      expect(conflict?.status).toBe('conflict');
      expect(fresh?.status).toBe('rejected');
    });

    g.test('a claim makes room: maxWaiting counts waiting operations only', async ({ store }) => {
      const limits = { maxWaiting: 1 };
      await store.operationSubmitMany([submitParams({ id: 'a', limits })]);
      expect((await store.operationSubmitMany([submitParams({ id: 'b', limits })]))[0]?.status).toBe(
        'rejected',
      );
      await claimOne(store);
      expect((await store.operationSubmitMany([submitParams({ id: 'b', limits })]))[0]?.status).toBe(
        'created',
      );
      expect((await getRow(store, { tenant: 'North', id: 'a' })).state).toBe('running');
    });
  });

  t.group('classes', (g) => {
    g.test('claiming bulk never returns interactive operations', async ({ store }) => {
      await enqueue(store, 'North', 2, { class: 'interactive' });
      await enqueue(store, 'North', 2, { class: 'bulk' });
      await enqueue(store, 'South', 1, { class: 'interactive' });
      const bulk = await claim(store, { class: 'bulk', limit: 10 });
      expect(bulk.map((r) => r.class)).toEqual(['bulk', 'bulk']);
      expect(await claim(store, { class: 'bulk', limit: 10 })).toEqual([]);
      const interactive = await claim(store, { class: 'interactive', limit: 10 });
      expect(interactive.map((r) => r.class)).toEqual(['interactive', 'interactive', 'interactive']);
      expect(await claim(store, { class: 'default', limit: 10 })).toEqual([]);
    });

    g.test('limits apply per class', async ({ store }) => {
      const bulkLimits = { maxRunning: 1, maxWaiting: 3 };
      await enqueue(store, 'North', 3, { class: 'bulk', limits: bulkLimits });
      const outcomes = await store.operationSubmitMany([
        submitParams({ id: 'bulk-late', class: 'bulk', limits: bulkLimits }),
        submitParams({ id: 'interactive-late', class: 'interactive', limits: { maxWaiting: 3 } }),
      ]);
      expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'created']);
      await enqueue(store, 'North', 2, { class: 'interactive' });
      expect(await claim(store, { class: 'bulk', limit: 10 })).toHaveLength(1);
      expect(await claim(store, { class: 'interactive', limit: 10 })).toHaveLength(3);
    });
  });
}
