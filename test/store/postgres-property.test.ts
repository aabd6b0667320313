/**
 * The store state-machine property (test/conformance/state-machine-property.ts) on PostgreSQL,
 * with the same histories as SQLite's run: random store calls, every invariant checked after
 * every step, one fresh schema per history. Replays a failure the same way (`SLUICE_PROPERTY_*`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
