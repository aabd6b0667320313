/**
 * A store closed while a call waits, and a PostgreSQL store on a pool of the caller's: what the
 * conformance suite's closed store (test/conformance/cases/closed.ts) cannot show with calls
 * made after the close. A call already waiting when the store closes (for another connection's
 * SQLite write lock, for a pooled PostgreSQL connection) fails `store-closed` as a later one
 * does, not `store-unavailable`, which says to retry; and closing a store that does not own its
 * pool refuses its calls and leaves the pool to its owner.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { isSluiceError } from '../../src/core/errors/index.js';
import { postgresStore } from '../../src/store/postgres/index.js';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import { submitParams } from '../conformance/fixtures.js';
import { usePostgres } from '../helpers/postgres.js';

const ref = { tenant: 'North', id: 'op-1' };

/** The code a call was refused with and whether it says to retry, or `answered`. */
async function outcome(call: Promise<unknown>): Promise<string> {
  try {
    await call;
    return 'answered';
  } catch (error) {
    if (!isSluiceError(error)) throw error;
    return `${error.code}, ${error.retryable ? 'retryable' : 'not retryable'}`;
  }
}

const CLOSED = 'store-closed, not retryable';

describe('SQLite: a call waiting for the write lock when the store closes', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('fails store-closed at its next try', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-closed-'));
    dirs.push(dir);
    const path = join(dir, 'sluice.db');
    const store = sqliteStore({ path, busyTimeoutMs: 60_000 });
    await store.migrate();
    const other = new Database(path);
    try {
      other.exec('BEGIN IMMEDIATE');
      // The first try runs within the call and finds the lock taken: the submit now waits for its
      // next try on a timer (store/sqlite/busy.ts).
      const waiting = outcome(store.operationSubmitMany([submitParams()]));
      await store.close();
      other.exec('ROLLBACK');
      expect(await waiting).toBe(CLOSED);
    } finally {
      other.close();
    }
    // Nothing was written by the call the close cut short.
    const reader = new Database(path, { readonly: true });
    try {
      expect(reader.prepare('SELECT count(*) AS n FROM operations').get()).toEqual({ n: 0 });
    } finally {
      reader.close();
    }
  });
});

describe("PostgreSQL: closing around a call, and a pool of the caller's", () => {
  const db = usePostgres();

  it('a call waiting for a pooled connection when the store closes fails store-closed', async () => {
    const store = db.store({ poolSize: 1, connectTimeoutMs: 1000 });
    await store.migrate();
    // The pool's one connection, taken from under the store: its next call waits for it.
    const held = await store.context.pool.connect();
    const waiting = outcome(store.operationGet(ref));
    const closing = store.close();
    // The ended pool hands the waiting call no connection: it gives up at its connect timeout.
    expect(await waiting).toBe(CLOSED);
    held.release();
    await closing;
  });

  it("a call waiting for a connection of the caller's pool when the store closes writes nothing", async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const schema = db.freshSchema();
      const store = postgresStore({ pool, schema });
      await store.migrate();
      // The pool's one connection, held: the submit waits for it. The store closes meanwhile; the
      // pool is its owner's and stays open, so the connection reaches the waiting call after.
      const held = await pool.connect();
      const waiting = outcome(store.operationSubmitMany([submitParams({ id: 'after-close' })]));
      await store.close();
      held.release();
      expect(await waiting).toBe(CLOSED);
      const rows = await pool.query(`SELECT id FROM "${schema}".operations`);
      expect(rows.rows).toEqual([]);
    } finally {
      await pool.end();
    }
  });

  it('closed while it connects to listen, subscribe fails store-closed rather than listen past the close', async () => {
    const store = db.store();
    await store.migrate();
    const subscribing = outcome(store.subscribe(() => {}));
    await store.close();
    expect(await subscribing).toBe(CLOSED);
  });

  it("a store on the caller's pool refuses every call once closed, and leaves the pool open", async () => {
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    const client = await pool.connect();
    try {
      const schema = db.freshSchema();
      const store = postgresStore({ pool, schema });
      await store.migrate();
      await store.close();
      expect({
        migrate: await outcome(store.migrate()),
        now: await outcome(store.now()),
        operationGet: await outcome(store.operationGet(ref)),
        operationSubmitMany: await outcome(store.operationSubmitMany([submitParams()])),
        subscribe: await outcome(store.subscribe(() => {})),
      }).toEqual({
        migrate: CLOSED,
        now: CLOSED,
        operationGet: CLOSED,
        operationSubmitMany: CLOSED,
        subscribe: CLOSED,
      });
      // A transactional submit runs on the caller's own connection, which the close left open.
      await client.query('BEGIN');
      expect(await outcome(store.operationSubmitMany([submitParams()], { client }))).toBe(CLOSED);
      await client.query('ROLLBACK');

      // The pool is its owner's: still open, and another store on it is another store.
      expect((await pool.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
      const again = postgresStore({ pool, schema });
      expect(await again.operationSubmitMany([submitParams()])).toMatchObject([{ status: 'created' }]);
      await again.close();
    } finally {
      client.release();
      await pool.end();
    }
  });
});
