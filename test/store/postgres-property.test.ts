/**
 * The store state-machine property (test/conformance/state-machine-property.ts) on PostgreSQL,
 * with the same histories as SQLite's run: random store calls, every invariant checked after
 * every step, one fresh schema per history. Replays a failure the same way (`SLUICE_PROPERTY_*`).
 * And the claim's serving order (`fair_order`, migrations 5 and 8) against the SQLite store's
 * `serviceOrder` on random candidates, ties and single candidates included.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serviceOrder } from '../../src/store/sqlite/claim.js';
import { FakeClock } from '../../src/testing/fake-clock.js';
import { checkStateMachineProperty, DEFAULT_PROPERTY_SEED } from '../conformance/state-machine-property.js';
import { type PgTestDatabase, startPostgres } from '../helpers/postgres.js';

let db: PgTestDatabase;
beforeAll(async () => {
  db = await startPostgres();
});
afterAll(async () => {
  await db?.stop();
});

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
