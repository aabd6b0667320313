/**
 * @module test/conformance/cases/closed
 * A store after its `close()`: every call is refused with `store-closed`, which is not
 * retryable, so a caller that retries retryable store errors stops instead of looping for ever
 * on what is a mistake in its own order of shutdown. Closing again changes nothing.
 */
import { expect } from 'vitest';
import { isSluiceError, isStoreClosed } from '../../../src/core/errors/index.js';
import type { Store } from '../../../src/store/store.js';
import { BOOM, claimOne, LEASE_MS, leaseOf, RESCUE, submitCreated, submitParams } from '../fixtures.js';
import type { CaseRegistry } from '../store-suite.js';

/** Every method of the Store contract but `close`, optional ones included. */
type Call = Exclude<
  { [K in keyof Store]-?: Required<Store>[K] extends (...args: never[]) => unknown ? K : never }[keyof Store],
  'close'
>;

/** How a call ended: the code it was refused with and whether that says to retry, or that it answered. */
async function refusalOf(call: () => Promise<unknown>): Promise<string> {
  try {
    await call();
    return 'answered';
  } catch (error) {
    if (!isSluiceError(error)) return `unclassified: ${String(error)}`;
    return `${error.code}, ${error.retryable ? 'retryable' : 'not retryable'}`;
  }
}

export function closedCases(t: CaseRegistry): void {
  t.group('a closed store', (g) => {
    g.test(
      'refuses every call with store-closed, not retryable; closing again changes nothing',
      async ({ store }) => {
        // A real lease and operation, so that each call would have had something to act on.
        await submitCreated(store, { id: 'held' });
        const row = await claimOne(store);
        const lease = leaseOf(row);
        const ref = { tenant: row.tenant, id: row.id };
        await store.close();

        // Typed by the contract: a method added to the Store without a line here fails to compile.
        const calls: Record<Call, (() => Promise<unknown>) | undefined> = {
          migrate: () => store.migrate(),
          migrationStatus: () => store.migrationStatus(),
          now: () => store.now(),
          subscribe: store.subscribe && (() => store.subscribe!(() => {})),
          operationSubmitMany: () => store.operationSubmitMany([submitParams({ id: 'after-close' })]),
          operationGet: () => store.operationGet(ref),
          operationList: () => store.operationList({ limit: 1 }),
          attemptList: () => store.attemptList(ref),
          effectList: () => store.effectList(ref),
          eventList: () => store.eventList(ref),
          queueStats: () => store.queueStats(),
          classStats: () => store.classStats(),
          awaitingOperatorStats: () => store.awaitingOperatorStats({ cap: 10 }),
          secret: () => store.secret('cursor'),
          operationClaimMany: () =>
            store.operationClaimMany({ class: 'default', owner: 'w1', limit: 1, leaseMs: LEASE_MS }),
          leaseExtendMany: () => store.leaseExtendMany({ leases: [lease], leaseMs: LEASE_MS }),
          leasesHeld: () => store.leasesHeld({ owner: 'w1', class: 'default' }),
          attemptFinishMany: () => store.attemptFinishMany([{ lease, outcome: 'succeeded', result: 1 }]),
          attemptFinishAndClaim: () =>
            store.attemptFinishAndClaim([{ lease, outcome: 'succeeded', result: 1 }], {
              class: 'default',
              owner: 'w1',
              limit: 1,
              leaseMs: LEASE_MS,
            }),
          effectBegin: () => store.effectBegin({ lease, name: 'charge', key: 'k1' }),
          effectRecordSend: () => store.effectRecordSend({ lease, name: 'charge' }),
          effectMarkAbsent: () => store.effectMarkAbsent({ lease, name: 'charge' }),
          effectMarkCommitted: () =>
            store.effectMarkCommitted({ lease, name: 'charge', result: 1, reference: null }),
          effectMarkFailed: () => store.effectMarkFailed({ lease, name: 'charge', error: BOOM }),
          effectBeginMany: () => store.effectBeginMany([{ lease, name: 'charge', key: 'k1' }]),
          effectMarkMany: () => store.effectMarkMany([{ lease, name: 'charge', state: 'absent' }]),
          operationCancel: () => store.operationCancel(ref),
          operationRedrive: () => store.operationRedrive({ ...ref, by: 'ops', reason: 'test' }),
          operationReconcile: () =>
            store.operationReconcile({ ...ref, by: 'ops', reason: 'test', resolution: 'requeue' }),
          retryBudgetTake: () =>
            store.retryBudgetTake({ windowMs: 60_000, bucketMs: 1000, ratio: 0.1, floor: 1, shard: 0 }),
          retryBudgetStats: () => store.retryBudgetStats({ windowMs: 60_000 }),
          budgetUsage: () => store.budgetUsage({ since: 0 }),
          leaseRescue: () => store.leaseRescue(RESCUE),
          countersFold: store.countersFold && (() => store.countersFold!()),
          retentionPurge: () => store.retentionPurge({ retentionMs: 0, tombstoneMs: 0, limit: 10 }),
        };
        const got: Record<string, string> = {};
        const expected: Record<string, string> = {};
        for (const [name, call] of Object.entries(calls)) {
          // An optional method the driver does not have (SQLite keeps no counters in parts).
          if (call === undefined) continue;
          got[name] = await refusalOf(call);
          expected[name] = 'store-closed, not retryable';
        }
        expect(got).toEqual(expected);

        await expect(store.close()).resolves.toBeUndefined();
        const again = await store.operationGet(ref).catch((error: unknown) => error);
        expect(isStoreClosed(again), String(again)).toBe(true);
        expect((again as Error).message).toMatch(/closed by this process/);
        return 'closed';
      },
    );

    g.test('closing twice at once closes it once, and both resolve', async ({ store }) => {
      await expect(Promise.all([store.close(), store.close()])).resolves.toEqual([undefined, undefined]);
      expect(await refusalOf(() => store.queueStats())).toBe('store-closed, not retryable');
      return 'closed';
    });
  });
}
