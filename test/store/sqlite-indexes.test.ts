/**
 * SQLite's index of a tenant's operations by state holds only the settled states (migration 13):
 * a listing of a settled state reads it, of a live state the live state's own index; an earlier
 * file migrates to it and lists the same. And
 * budget windows are read by their end (migration 26), or by the tenant they name (29).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { TENANT_USAGE_SQL, USAGE_SQL } from '../../src/store/sqlite/budgets.js';
import type { SqliteStore } from '../../src/store/sqlite/index.js';
import { AWAITING_OPERATOR_SQL, listParams, listSql } from '../../src/store/sqlite/list.js';
import { BOOM, claim, leaseOf, submitParams } from '../conformance/fixtures.js';
import { type SqliteFixture, sqliteFixture } from '../conformance/sqlite-fixture.js';

const indexes = (store: SqliteStore) =>
  store.context.db
    .prepare(`SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'operations'`)
    .all() as Array<{ name: string; sql: string | null }>;

const plan = (store: SqliteStore, p: Parameters<typeof listSql>[0]) =>
  (
    store.context.db.prepare(`EXPLAIN QUERY PLAN ${listSql(p)}`).all(listParams(p)) as Array<{
      detail: string;
    }>
  )
    .map((r) => r.detail)
    .join('; ');

describe('the SQLite index of settled operations by tenant', () => {
  let fixture: SqliteFixture;
  let store: SqliteStore;
  beforeEach(async () => {
    fixture = await sqliteFixture();
    store = fixture.store;
  });
  afterEach(() => fixture.cleanup());

  it('leaves the live states out, and a listing of a settled state reads it', () => {
    const byName = new Map(indexes(store).map((i) => [i.name, i.sql]));
    expect(byName.has('operations_tenant_state')).toBe(false);
    expect(byName.get('operations_tenant_settled')).toMatch(/WHERE state NOT IN \('queued', 'running'\)/);
    expect(plan(store, { tenant: 'North', state: 'dead', limit: 10 })).toContain('operations_tenant_settled');
    expect(plan(store, { tenant: 'North', state: 'needs_reconciliation', after: 5, limit: 10 })).toContain(
      'operations_tenant_settled',
    );
    // A live state cannot use it: each is read through an index of its own, below.
    expect(plan(store, { tenant: 'North', state: 'queued', limit: 10 })).not.toContain(
      'operations_tenant_settled',
    );
  });

  it("finds a tenant's operations through each state's index, never its whole history", () => {
    // A tenant's queued operations: a seek per class with work waiting, then the tenant's entries.
    const queued = plan(store, { tenant: 'North', state: 'queued', limit: 10 });
    expect(queued).toMatch(
      /SEARCH operations USING (COVERING )?INDEX operations_ready \(class=\? AND tenant=\?\)/,
    );
    expect(queued).not.toContain('sqlite_autoindex_operations');
    expect(
      plan(store, { tenant: 'North', state: 'queued', kind: 'charge', after: 7, limit: 10, maxBytes: 100 }),
    ).toMatch(/operations_ready \(class=\? AND tenant=\?\)/);
    // Running ones, with or without a tenant: the leases' index, one entry per running operation.
    for (const p of [{ tenant: 'North' }, {}, { kind: 'charge' }]) {
      const running = plan(store, { ...p, state: 'running', limit: 10 });
      expect(running).toContain('SCAN operations USING INDEX operations_leases');
      expect(running).not.toContain('sqlite_autoindex_operations');
    }
    // A tenant's operations in every state: a page at most from each state's index, not the
    // tenant's key read whole and sorted.
    for (const p of [{}, { kind: 'charge' }, { after: 7, maxBytes: 100 }]) {
      const every = plan(store, { ...p, tenant: 'North', limit: 10 });
      expect(every).not.toContain('sqlite_autoindex_operations');
      expect(
        every.match(
          /SEARCH operations USING (COVERING )?INDEX operations_tenant_settled \(tenant=\? AND state=\? AND seq>\?\)/g,
        ),
      ).toHaveLength(5);
      expect(every).toMatch(/operations_ready \(class=\? AND tenant=\?\)/);
      expect(every).toContain('SCAN operations USING INDEX operations_leases');
    }
    // The state is written into the statement: a value that is not a state never reaches it.
    expect(() => listSql({ tenant: 'North', state: "queued' OR 1=1 --" as 'queued', limit: 10 })).toThrow(
      /state must be one of/,
    );
    // Every tenant's queued operations are read in order from the cursor, not the whole ready index.
    expect(plan(store, { state: 'queued', after: 7, limit: 10 })).toContain(
      'USING INTEGER PRIMARY KEY (rowid>?)',
    );
  });

  it("finds every tenant's dead and needs_reconciliation operations through their own index", async () => {
    const byName = new Map(indexes(store).map((i) => [i.name, i.sql]));
    expect(byName.get('operations_attention')).toMatch(/WHERE state IN \('dead', 'needs_reconciliation'\)/);
    for (const state of ['dead', 'needs_reconciliation'] as const)
      for (const p of [{}, { kind: 'charge' }, { after: 7, maxBytes: 100 }]) {
        const across = plan(store, { ...p, state, limit: 10 });
        expect(across).toMatch(/SEARCH operations USING INDEX operations_attention \(state=\? AND seq>\?\)/);
        // A tenant named, its own settled index, as before.
        expect(plan(store, { ...p, tenant: 'North', state, limit: 10 })).toContain(
          'operations_tenant_settled',
        );
      }
    // What a metrics scrape counts of them, through it too, never the table.
    const counted = (
      store.context.db.prepare(`EXPLAIN QUERY PLAN ${AWAITING_OPERATOR_SQL}`).all({ cap: 10 }) as Array<{
        detail: string;
      }>
    ).map((r) => r.detail);
    expect(counted.filter((d) => d.includes('operations_attention (state=?)'))).toHaveLength(2);
    expect(counted.filter((d) => /SCAN operations\b(?! USING)/.test(d))).toEqual([]);
    // Another settled state across tenants is not in it: read in order from the cursor.
    expect(plan(store, { state: 'succeeded', limit: 10 })).not.toContain('operations_attention');
    // And what it finds is every tenant's, in acceptance order.
    await store.operationSubmitMany([
      submitParams({ id: 'n1' }),
      submitParams({ tenant: 'South', id: 's1' }),
      submitParams({ id: 'n2' }),
    ]);
    const rows = await claim(store, { limit: 3 });
    await store.attemptFinishMany(
      rows.map((r) =>
        r.id === 'n2'
          ? { lease: leaseOf(r), outcome: 'succeeded' as const, result: 1 }
          : { lease: leaseOf(r), outcome: 'dead' as const, error: BOOM },
      ),
    );
    const dead = await store.operationList({ state: 'dead', limit: 10 });
    expect(dead.map((r) => [r.tenant, r.id])).toEqual([
      ['North', 'n1'],
      ['South', 's1'],
    ]);
  });

  it('replaces the full index of a file from before version 13, and lists the same', async () => {
    const db = store.context.db;
    await store.operationSubmitMany([
      submitParams({ id: 'a' }),
      submitParams({ id: 'b' }),
      submitParams({ id: 'c', delayMs: 3_600_000 }),
    ]);
    const rows = await claim(store, { limit: 2 });
    await store.attemptFinishMany([{ lease: leaseOf(rows[0]!), outcome: 'dead', error: BOOM }]);
    const before = await Promise.all(
      (['dead', 'running', 'queued'] as const).map((state) =>
        store.operationList({ tenant: 'North', state, limit: 10 }),
      ),
    );
    // The file as version 12 left it.
    db.exec(`DROP INDEX operations_tenant_settled;
      CREATE INDEX operations_tenant_state ON operations (tenant, state, seq);
      DELETE FROM sluice_migrations WHERE version = 13;`);
    const applied = () =>
      db.prepare('SELECT version FROM sluice_migrations ORDER BY version').pluck().all() as number[];
    expect(applied()).not.toContain(13);
    await store.migrate();
    expect(applied()).toContain(13);
    const status = await store.migrationStatus();
    expect(status.applied).toBe(status.latest);
    expect(status.latest).toBeGreaterThanOrEqual(20);
    expect(indexes(store).map((i) => i.name)).toContain('operations_tenant_settled');
    expect(indexes(store).map((i) => i.name)).not.toContain('operations_tenant_state');
    const after = await Promise.all(
      (['dead', 'running', 'queued'] as const).map((state) =>
        store.operationList({ tenant: 'North', state, limit: 10 }),
      ),
    );
    expect(after).toEqual(before);
    expect(before.map((rs) => rs.map((r) => r.id))).toEqual([[rows[0]!.id], [rows[1]!.id], ['c']]);
  });
});

describe('the SQLite indexes of budget windows', () => {
  let fixture: SqliteFixture;
  beforeEach(async () => {
    fixture = await sqliteFixture();
  });
  afterEach(() => fixture.cleanup());

  it('is what a read of the windows in effect goes by, not the range of their keys', () => {
    const detail = (
      fixture.store.context.db
        .prepare(`EXPLAIN QUERY PLAN ${USAGE_SQL}`)
        .all(0, 'spend:', 'spend;') as Array<{
        detail: string;
      }>
    ).map((r) => r.detail);
    expect(detail.join('; ')).toMatch(/USING INDEX budgets_end/);
  });

  it("of one tenant are read by the tenant their keys name, not every tenant's", () => {
    const detail = (
      fixture.store.context.db
        .prepare(`EXPLAIN QUERY PLAN ${TENANT_USAGE_SQL}`)
        .all('North', 0, 'spend:', 'spend;') as Array<{ detail: string }>
    ).map((r) => r.detail);
    // The tenant is the index's first column, so the read is a search by it, not a scan.
    expect(detail.join('; ')).toMatch(/SEARCH budgets USING INDEX budgets_tenant \(<expr>=\?/);
  });
});
