/**
 * SQLite keeps an operation's attempts by the operation's `seq` (migration 16): a round of ends
 * appends its rows instead of writing them wherever each id sorts. A file from before it migrates
 * with every attempt carried, and lists the same; the purge still removes them.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SqliteStore } from '../../src/store/sqlite/index.js';
import type { FakeClock } from '../../src/testing/fake-clock.js';
import { BOOM, claim, leaseOf, submitParams } from '../conformance/fixtures.js';
import { type SqliteFixture, sqliteFixture } from '../conformance/sqlite-fixture.js';

describe('the SQLite attempts, kept by the operation', () => {
  let fixture: SqliteFixture;
  let store: SqliteStore;
  let clock: FakeClock;
  beforeEach(async () => {
    fixture = await sqliteFixture();
    ({ store, clock } = fixture);
  });
  afterEach(() => fixture.cleanup());

  /** Two operations whose ids sort against their order, one with a retry and a success. */
  async function history() {
    await store.operationSubmitMany([submitParams({ id: 'zz' }), submitParams({ id: 'aa' })]);
    const [zz, aa] = await claim(store, { limit: 2 });
    await store.attemptFinishMany([
      { lease: leaseOf(zz!), outcome: 'retry', error: BOOM, delayMs: 0 },
      { lease: leaseOf(aa!), outcome: 'dead', error: BOOM },
    ]);
    const [again] = await claim(store, { limit: 1 });
    expect(again!.id).toBe('zz');
    await store.attemptFinishMany([{ lease: leaseOf(again!), outcome: 'succeeded', result: 7 }]);
    return {
      zz: await store.attemptList({ tenant: 'North', id: 'zz' }),
      aa: await store.attemptList({ tenant: 'North', id: 'aa' }),
    };
  }

  it('lists each operation its own attempts, in order', async () => {
    const { zz, aa } = await history();
    expect(zz.map((a) => [a.tenant, a.id, a.attempt, a.outcome])).toEqual([
      ['North', 'zz', 1, 'retry'],
      ['North', 'zz', 2, 'succeeded'],
    ]);
    expect(aa.map((a) => [a.tenant, a.id, a.attempt, a.outcome])).toEqual([['North', 'aa', 1, 'dead']]);
    const columns = store.context.db.prepare('SELECT name FROM pragma_table_info(?)').pluck().all('attempts');
    expect(columns.slice(0, 2)).toEqual(['op_seq', 'epoch']);
    expect(columns).not.toContain('op_id');
  });

  it('carries every attempt of a file from before version 16, and lists the same', async () => {
    const before = await history();
    const db = store.context.db;
    // The file as version 15 left it: attempts keyed by (tenant, op_id, epoch).
    db.exec(`CREATE TABLE attempts_v15 (
        tenant TEXT NOT NULL, op_id TEXT NOT NULL, epoch INTEGER NOT NULL, attempt INTEGER NOT NULL,
        owner TEXT, started_at INTEGER NOT NULL, ended_at INTEGER NOT NULL, outcome TEXT NOT NULL,
        error TEXT, retry_delay_ms INTEGER, PRIMARY KEY (tenant, op_id, epoch));
      INSERT INTO attempts_v15 SELECT o.tenant, o.id, a.epoch, a.attempt, a.owner, a.started_at, a.ended_at,
        a.outcome, a.error, a.retry_delay_ms FROM attempts a JOIN operations o ON o.seq = a.op_seq;
      DROP TABLE attempts;
      ALTER TABLE attempts_v15 RENAME TO attempts;
      DELETE FROM sluice_migrations WHERE version = 16;`);
    const applied = () =>
      db.prepare('SELECT version FROM sluice_migrations ORDER BY version').pluck().all() as number[];
    expect(applied()).not.toContain(16);
    await store.migrate();
    expect(applied()).toContain(16);
    expect(await store.attemptList({ tenant: 'North', id: 'zz' })).toEqual(before.zz);
    expect(await store.attemptList({ tenant: 'North', id: 'aa' })).toEqual(before.aa);
    expect(before.zz).toHaveLength(2);
  });

  it('purges an operation with its attempts', async () => {
    await history();
    clock.advance(10_000);
    const out = await store.retentionPurge({ retentionMs: 1_000, tombstoneMs: 86_400_000, limit: 10 });
    expect(out.purged).toBe(2);
    const left = store.context.db.prepare('SELECT count(*) FROM attempts').pluck().get();
    expect(left).toBe(0);
  });
});
