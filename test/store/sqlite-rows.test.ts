/**
 * The hot statements of the SQLite store read an operation as an array of its columns in a fixed
 * order (rows.ts `operationColumns`, `operationRowOf`) instead of an object per row. Read both
 * ways, a row whose every column holds a value of its own must come out the same: a column left
 * out of the list, or read from another position, would not.
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { SqliteStore } from '../../src/store/sqlite/index.js';
import {
  operationColumns,
  operationRowOf,
  type RawOperation,
  toOperationRow,
} from '../../src/store/sqlite/rows.js';
import { claimOne, submitParams } from '../conformance/fixtures.js';
import { type SqliteFixture, sqliteFixture } from '../conformance/sqlite-fixture.js';

describe('SQLite operation rows read as arrays', () => {
  let fixture: SqliteFixture;
  let store: SqliteStore;
  beforeEach(async () => {
    fixture = await sqliteFixture();
    store = fixture.store;
  });
  afterEach(() => fixture.cleanup());

  it('match the rows read as objects, column for column', async () => {
    await store.operationSubmitMany([submitParams({ id: 'op-1' })]);
    const db = store.context.db;
    // Every column a distinct value (a number per column, the text columns their own strings).
    const columns = (
      db.prepare('PRAGMA table_info(operations)').all() as Array<{ name: string; type: string }>
    )
      .map((c) => c.name)
      .filter((c) => c !== 'seq');
    // The two columns the schema checks take a value it allows, neither a submit's default.
    const allowed: Record<string, string> = { state: 'dead', cancel: 'too_late' };
    const text = new Set(['tenant', 'id', 'kind', 'class', 'digest', 'lease_owner']);
    const json = new Set(['input', 'result', 'error']);
    const value = (c: string, i: number) =>
      allowed[c] ?? (json.has(c) ? JSON.stringify({ column: c }) : text.has(c) ? `${c}-value` : 1000 + i);
    db.prepare(`UPDATE operations SET ${columns.map((c) => `${c} = ?`).join(', ')} WHERE id = 'op-1'`).run(
      ...columns.map(value),
    );

    const asObject = toOperationRow(db.prepare('SELECT * FROM operations').get() as RawOperation);
    const asArray = operationRowOf(
      db.prepare(`SELECT ${operationColumns()} FROM operations`).raw(true).get() as unknown[],
    );
    expect(asArray).toEqual(asObject);
    // Every column of the table is read: none of the row's fields came out undefined or null.
    expect(Object.values(asArray).filter((v) => v === undefined || v === null)).toEqual([]);
    // And each field holds its own column's value (the column's name in camelCase).
    const field = (c: string) => c.replace(/_([a-z])/g, (_m, l: string) => l.toUpperCase());
    const expected = Object.fromEntries(
      columns.map((c, i) => [field(c), json.has(c) ? { column: c } : value(c, i)]),
    );
    expect(asArray).toMatchObject(expected);
  });

  it('come back from a claim as the stored row', async () => {
    await store.operationSubmitMany([submitParams({ id: 'op-2' })]);
    const claimed = await claimOne(store);
    expect(claimed.id).toBe('op-2');
    expect(claimed.state).toBe('running');
    expect(claimed).toEqual(await store.operationGet({ tenant: claimed.tenant, id: 'op-2' }));
  });
});
