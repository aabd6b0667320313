/**
 * The store state-machine property (test/conformance/state-machine-property.ts) on PostgreSQL,
 * with the same histories as SQLite's run: random store calls, every invariant checked after
 * every step, one fresh schema per history. Replays a failure the same way (`SLUICE_PROPERTY_*`).
 * And the claim's serving order (`fair_order`, migrations 5 and 8) against the SQLite store's
 * `serviceOrder` on random candidates, ties and single candidates included; and whole claims
 * against the SQLite store's, claim for claim, over random histories (migration 12's short way
 * for a lone candidate must pick, count and advance virtual times exactly as the general path).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { serviceOrder } from '../../src/store/sqlite/claim.js';
import type { Store } from '../../src/store/store.js';
import type { LeaseRef, QueueLimits } from '../../src/store/types.js';
import { FakeClock } from '../../src/testing/fake-clock.js';
import { leaseOf, submitParams } from '../conformance/fixtures.js';
import { sqliteFixture } from '../conformance/sqlite-fixture.js';
import { checkStateMachineProperty, DEFAULT_PROPERTY_SEED } from '../conformance/state-machine-property.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();

describe('Store state machine (property): postgres', () => {
  it('random histories keep every invariant after every step', async () => {
    const run = await checkStateMachineProperty(
      async () => {
        const clock = new FakeClock();
        const store = db.store({ clock, poolSize: 2 });
        await store.migrate();
        return { store, clock, cleanup: () => store.close() };
      },
      { numRuns: 100, maxCommands: 60 },
    );
    if (run.replay) return;
    expect(run.numRuns).toBe(100);
    if (run.seed === DEFAULT_PROPERTY_SEED) expect(run.missing).toEqual([]);
  }, 600_000);
});

describe("the claim's serving order: postgres", () => {
  it("is the SQLite store's, candidate for candidate", async () => {
    const store = db.store({ poolSize: 1 });
    await store.migrate();
    const { pool, quoted } = store.context;
    // Virtual times in quarters and weights that divide them evenly make ties common.
    const candidate = fc.record({
      vtime: fc.integer({ min: 0, max: 8 }).map((q) => q / 4),
      weight: fc.constantFrom(0.5, 1, 2, 4),
      supply: fc.integer({ min: 0, max: 6 }),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.array(candidate, { minLength: 1, maxLength: 5 }),
        fc.integer({ min: 0, max: 12 }),
        async (cs, want) => {
          const { rows } = await pool.query(`SELECT ${quoted}.fair_order($1, $2, $3, $4) AS o`, [
            cs.map((c) => c.vtime),
            cs.map((c) => c.weight),
            cs.map((c) => c.supply),
            want,
          ]);
          const expected = serviceOrder(
            cs,
            cs.map((c) => c.supply),
            want,
          ).map((k) => k + 1);
          expect(rows[0].o).toEqual(expected);
        },
      ),
      { numRuns: 300 },
    );
  });
});

/** One step of a claim history, applied to both stores alike. */
type Step =
  | { op: 'submit'; tenant: string; count: number; delayMs: number; limits?: QueueLimits }
  | { op: 'claim'; limit: number }
  | { op: 'finish'; pick: number; outcome: 'succeeded' | 'retry'; delayMs: number }
  | { op: 'advance'; ms: number };

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    op: fc.constant('submit' as const),
    tenant: fc.constantFrom('Alpha', 'Bravo', 'Charlie'),
    count: fc.integer({ min: 1, max: 4 }),
    delayMs: fc.constantFrom(0, 0, 0, 700),
    // Weights whose 1 / weight sums are not exact in binary, and running caps, as submits set them.
    limits: fc.option(
      fc.record({ weight: fc.constantFrom(1, 3, 0.7), maxRunning: fc.constantFrom(null, 1, 2) }),
      { nil: undefined },
    ),
  }),
  fc.record({ op: fc.constant('claim' as const), limit: fc.integer({ min: 1, max: 5 }) }),
  fc.record({
    op: fc.constant('finish' as const),
    pick: fc.nat(),
    outcome: fc.constantFrom('succeeded' as const, 'retry' as const),
    delayMs: fc.constantFrom(0, 500),
  }),
  fc.record({ op: fc.constant('advance' as const), ms: fc.constantFrom(100, 800) }),
);

/** Runs a history on one store; what each claim started (tenant/id in order) and the end state. */
async function replay(store: Store, clock: FakeClock, steps: Step[]): Promise<string[]> {
  const seen: string[] = [];
  const running: LeaseRef[] = [];
  const next = new Map<string, number>();
  for (const s of steps) {
    switch (s.op) {
      case 'submit': {
        const from = next.get(s.tenant) ?? 0;
        next.set(s.tenant, from + s.count);
        const out = await store.operationSubmitMany(
          Array.from({ length: s.count }, (_, k) =>
            submitParams({
              tenant: s.tenant,
              id: `${s.tenant}-${from + k}`,
              delayMs: s.delayMs,
              limits: s.limits,
            }),
          ),
        );
        seen.push(`submit ${out.map((o) => o.status).join(',')}`);
        break;
      }
      case 'claim': {
        const r = await store.operationClaimMany({
          class: 'default',
          owner: 'w',
          limit: s.limit,
          leaseMs: 60_000,
          retryBudget: { bucketMs: 10_000, shard: 1 },
        });
        running.push(...r.rows.map(leaseOf));
        // One connection, one call at a time: no other transaction holds a row, so a claim that
        // reports passed-over work (SQLite never does) would be wrong here.
        const flag = r.contended ? ' contended' : '';
        seen.push(`claim ${s.limit}: ${r.rows.map((x) => `${x.id}#${x.attempt}`).join(' ')}${flag}`);
        break;
      }
      case 'finish': {
        if (running.length === 0) break;
        const [lease] = running.splice(s.pick % running.length, 1);
        const end =
          s.outcome === 'succeeded'
            ? { lease: lease!, outcome: 'succeeded' as const, result: null }
            : {
                lease: lease!,
                outcome: 'retry' as const,
                delayMs: s.delayMs,
                error: { code: 'x', message: 'x', outcome: 'retryable' as const },
              };
        seen.push(`finish ${(await store.attemptFinishMany([end])).join(',')}`);
        break;
      }
      case 'advance':
        clock.advance(s.ms);
        break;
    }
  }
  // The counters, and an order of service that only the virtual times decide: every tenant's
  // remaining ready work claimed one at a time.
  clock.advance(10_000);
  const stats = (await store.queueStats()).map((q) => `${q.class}/${q.tenant} ${q.waiting}w ${q.running}r`);
  seen.push(`queues ${stats.sort().join('; ')}`);
  for (;;) {
    const r = await store.operationClaimMany({ class: 'default', owner: 'w', limit: 1, leaseMs: 60_000 });
    if (r.rows.length === 0) break;
    seen.push(`drain ${r.rows[0]!.id}`);
  }
  return seen;
}

describe('the claim: postgres', () => {
  it('starts what the SQLite store starts, claim for claim, over random histories', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(step, { minLength: 4, maxLength: 30 }), async (steps) => {
        const lite = await sqliteFixture();
        const clock = new FakeClock();
        const pgStore = db.store({ clock, poolSize: 1 });
        try {
          await pgStore.migrate();
          // Both clocks start at the same time and move together.
          clock.set(lite.clock.now());
          const expected = await replay(lite.store, lite.clock, steps);
          expect(await replay(pgStore, clock, steps)).toEqual(expected);
        } finally {
          await lite.cleanup();
          await pgStore.close();
        }
      }),
      { numRuns: 60 },
    );
  }, 300_000);
});
