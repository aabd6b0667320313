/**
 * SQLite finds an operation's effects by the operation's `seq` (migration 19): a round of begins
 * appends its index entries instead of writing them wherever each id sorts. A file from before it
 * migrates with every effect carried, and lists and journals the same; the purge still removes them.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SqliteStore } from '../../src/store/sqlite/index.js';
import type { FakeClock } from '../../src/testing/fake-clock.js';
import { claim, leaseOf, submitParams } from '../conformance/fixtures.js';
import { type SqliteFixture, sqliteFixture } from '../conformance/sqlite-fixture.js';

describe('the SQLite effects, found by the operation', () => {
  let fixture: SqliteFixture;
  let store: SqliteStore;
  let clock: FakeClock;
  beforeEach(async () => {
    fixture = await sqliteFixture();
    ({ store, clock } = fixture);
  });
  afterEach(() => fixture.cleanup());

  /**
   * Two running operations whose ids sort against their order: `zz` with two effects, one
   * committed and one still pending; `aa` with one whose request was refused (absent).
   */
  async function journal() {
    await store.operationSubmitMany([submitParams({ id: 'zz' }), submitParams({ id: 'aa' })]);
    const [zz, aa] = await claim(store, { limit: 2 });
    const begun = await store.effectBeginMany([
      { lease: leaseOf(zz!), name: 'charge', key: 'k-zz-charge' },
      { lease: leaseOf(aa!), name: 'charge', key: 'k-aa-charge' },
      { lease: leaseOf(zz!), name: 'receipt', key: 'k-zz-receipt' },
    ]);
    expect(begun.map((b) => b.ok && b.value.created)).toEqual([true, true, true]);
    clock.advance(5);
    expect(
      await store.effectMarkMany([
        {
          lease: leaseOf(zz!),
          name: 'charge',
          state: 'committed',
          result: { id: 'ch_1' },
          reference: 'ch_1',
        },
        { lease: leaseOf(aa!), name: 'charge', state: 'absent' },
      ]),
    ).toEqual([true, true]);
    return {
      leases: { zz: leaseOf(zz!), aa: leaseOf(aa!) },
      zz: await store.effectList({ tenant: 'North', id: 'zz' }),
      aa: await store.effectList({ tenant: 'North', id: 'aa' }),
    };
  }

  it("lists each operation its own effects, and journals by the operation's key", async () => {
    const { leases, zz, aa } = await journal();
    expect(zz.map((e) => [e.tenant, e.id, e.name, e.key, e.state, e.reference])).toEqual([
      ['North', 'zz', 'charge', 'k-zz-charge', 'committed', 'ch_1'],
      ['North', 'zz', 'receipt', 'k-zz-receipt', 'pending', null],
    ]);
    expect(aa.map((e) => [e.tenant, e.id, e.name, e.state])).toEqual([['North', 'aa', 'charge', 'absent']]);
    // A second begin of the same effect finds its row; a send from `absent` restarts it.
    const again = await store.effectBegin({ lease: leases.zz, name: 'charge', key: 'k-zz-charge' });
    expect([again.created, again.row.state, again.row.id]).toEqual([false, 'committed', 'zz']);
    const resent = await store.effectRecordSend({ lease: leases.aa, name: 'charge' });
    expect([resent.row.tenant, resent.row.id, resent.row.state, resent.row.sends]).toEqual([
      'North',
      'aa',
      'pending',
      2,
    ]);
    // The pending effect holds the end at the point of no return; the cancel comes too late.
    expect((await store.operationCancel({ tenant: 'North', id: 'zz' }))?.outcome).toBe('too_late');
    const columns = store.context.db.prepare('SELECT name FROM pragma_table_info(?)').pluck().all('effects');
    expect(columns.slice(0, 2)).toEqual(['op_seq', 'name']);
    expect(columns).not.toContain('op_id');
  });

  it('carries every effect of a file from before version 19, and lists the same', async () => {
    const before = await journal();
    const db = store.context.db;
    // The file as version 18 left it: effects keyed by (tenant, op_id, name).
    db.exec(`CREATE TABLE effects_v18 (
        tenant TEXT NOT NULL, op_id TEXT NOT NULL, name TEXT NOT NULL, key TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'absent', 'committed', 'failed')),
        provider TEXT, cost INTEGER, first_sent_at INTEGER NOT NULL, last_sent_at INTEGER NOT NULL,
        sends INTEGER NOT NULL, committed_at INTEGER, result TEXT, reference TEXT, error TEXT,
        epoch INTEGER NOT NULL, reservations TEXT, PRIMARY KEY (tenant, op_id, name));
      INSERT INTO effects_v18 SELECT o.tenant, o.id, e.name, e.key, e.state, e.provider, e.cost,
        e.first_sent_at, e.last_sent_at, e.sends, e.committed_at, e.result, e.reference, e.error, e.epoch,
        e.reservations FROM effects e JOIN operations o ON o.seq = e.op_seq;
      DROP TABLE effects;
      ALTER TABLE effects_v18 RENAME TO effects;
      DELETE FROM sluice_migrations WHERE version = 19;`);
    const applied = () =>
      db.prepare('SELECT version FROM sluice_migrations ORDER BY version').pluck().all() as number[];
    expect(applied()).not.toContain(19);
    await store.migrate();
    expect(applied()).toContain(19);
    expect(await store.effectList({ tenant: 'North', id: 'zz' })).toEqual(before.zz);
    expect(await store.effectList({ tenant: 'North', id: 'aa' })).toEqual(before.aa);
    expect(before.zz).toHaveLength(2);
    // The unique key is back: a begin of an existing effect finds it.
    const again = await store.effectBegin({ lease: before.leases.zz, name: 'receipt', key: 'k-zz-receipt' });
    expect(again.created).toBe(false);
  });

  it('purges an operation with its effects', async () => {
    const { leases } = await journal();
    await store.attemptFinishMany([
      { lease: leases.zz, outcome: 'succeeded', result: 1 },
      { lease: leases.aa, outcome: 'succeeded', result: 2 },
    ]);
    clock.advance(10_000);
    const out = await store.retentionPurge({ retentionMs: 1_000, tombstoneMs: 86_400_000, limit: 10 });
    expect(out.purged).toBe(2);
    expect(store.context.db.prepare('SELECT count(*) FROM effects').pluck().get()).toBe(0);
  });
});
