/**
 * The SQLite store where it meets what is outside it: another connection's write lock, the
 * caller's own transaction, a file it may not write or that is not a database, a closed store, a
 * file reached through a symbolic link. Real files, real second connections (better-sqlite3).
 */
import {
  copyFileSync,
  existsSync,
  mkdtempSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isSluiceError, type StoreError } from '../../src/core/errors/index.js';
import { classifySqliteError } from '../../src/store/sqlite/connection.js';
import { sqliteStore, walPathOf } from '../../src/store/sqlite/index.js';
import { submitParams } from '../conformance/fixtures.js';
import { type Harness, harness } from '../helpers/engine.js';

const dirs: string[] = [];
const open: Array<{ close(): unknown }> = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function folder(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-sqlite-locks-'));
  dirs.push(dir);
  return dir;
}

/** An engine on a new file, with a `job` kind, and a second connection of the caller's own. */
async function engine(
  busyTimeoutMs?: number,
): Promise<{ h: Harness; other: Database.Database; path: string }> {
  const dir = folder();
  const path = join(dir, 'sluice.db');
  const h = await harness({ dir, store: sqliteStore({ path, busyTimeoutMs }) });
  open.push(h);
  h.sluice.define('job', { input: z.object({ n: z.number() }), run: () => null });
  const other = new Database(path);
  open.push(other);
  return { h, other, path };
}

async function failure(p: Promise<unknown>): Promise<{ code: string; retryable: boolean; message: string }> {
  try {
    await p;
  } catch (error) {
    if (isSluiceError(error)) return { code: error.code, retryable: error.retryable, message: error.message };
    throw error;
  }
  throw new Error('expected a failure');
}

describe('the SQLite store and another connection holding the write lock', () => {
  it('waits for it without stopping the process, and writes once it is let go', async () => {
    const { h, other } = await engine(10_000);
    other.exec('BEGIN IMMEDIATE');
    // Let go from a timer: only a process whose event loop turns while the submit waits gets
    // there. SQLite's own wait, in the thread, held it for the whole busy timeout.
    const letGo = new Promise<void>((resolve) =>
      setTimeout(() => {
        other.exec('COMMIT');
        resolve();
      }, 50),
    );
    const submitted = await h.sluice.submit({ tenant: 'North', id: 'a', kind: 'job', input: { n: 1 } });
    await letGo;
    expect(submitted.created).toBe(true);
  });

  it('fails store-busy, retryable, once the busy timeout has passed', async () => {
    const { h, other } = await engine(100);
    other.exec('BEGIN IMMEDIATE');
    const refused = await failure(
      h.sluice.submit({ tenant: 'North', id: 'a', kind: 'job', input: { n: 1 } }),
    );
    other.exec('ROLLBACK');
    expect([refused.code, refused.retryable]).toEqual(['store-busy', true]);
    expect(await h.sluice.get({ tenant: 'North', id: 'a' })).toBeUndefined();
  });
});

describe("a transactional submit on SQLite (the caller's transaction)", () => {
  it("is refused on the store's own connection, and the store does not join a transaction opened there", async () => {
    const { h } = await engine();
    const own = (h.store as ReturnType<typeof sqliteStore>).context.db;
    own.exec('BEGIN IMMEDIATE');
    const asTx = await failure(
      h.sluice.submit({ tenant: 'North', id: 'a', kind: 'job', input: { n: 1 } }, { tx: own }),
    );
    expect(asTx.code).toBe('invalid-argument');
    expect(asTx.message).toContain("not the store's");
    // A write of the store while someone else's transaction is open on its connection: joined,
    // it would vanish with that transaction's rollback.
    const joined = await failure(h.sluice.submit({ tenant: 'North', id: 'b', kind: 'job', input: { n: 1 } }));
    expect(joined.code).toBe('invalid-argument');
    own.exec('ROLLBACK');
    expect((await h.sluice.submit({ tenant: 'North', id: 'b', kind: 'job', input: { n: 1 } })).created).toBe(
      true,
    );
  });

  it('begun deferred, after a read, behind another writer: store-serialization naming BEGIN IMMEDIATE', async () => {
    const { h, other, path } = await engine();
    const mine = new Database(path);
    open.push(mine);
    mine.exec('BEGIN');
    mine.prepare('SELECT count(*) FROM operations').get();
    other.exec('BEGIN IMMEDIATE');
    const locked = await failure(
      h.sluice.submit({ tenant: 'North', id: 'a', kind: 'job', input: { n: 1 } }, { tx: mine }),
    );
    other.exec('ROLLBACK');
    mine.exec('ROLLBACK');
    expect(locked.code).toBe('store-serialization');
    expect(locked.message).toContain('BEGIN IMMEDIATE');

    // Another connection committed after this transaction's read: its snapshot cannot write.
    mine.exec('BEGIN');
    mine.prepare('SELECT count(*) FROM operations').get();
    await h.sluice.submit({ tenant: 'North', id: 'b', kind: 'job', input: { n: 1 } });
    const stale = await failure(
      h.sluice.submit({ tenant: 'North', id: 'c', kind: 'job', input: { n: 1 } }, { tx: mine }),
    );
    mine.exec('ROLLBACK');
    expect(stale.code).toBe('store-serialization');

    mine.exec('BEGIN IMMEDIATE');
    await h.sluice.submit({ tenant: 'North', id: 'c', kind: 'job', input: { n: 1 } }, { tx: mine });
    mine.exec('COMMIT');
    expect((await h.sluice.get({ tenant: 'North', id: 'c' }))?.state).toBe('queued');
  });
});

describe('the SQLite store on a file it cannot use', () => {
  it('refuses a migrate it could not write, even with nothing to apply', async () => {
    const path = join(folder(), 'sluice.db');
    const store = sqliteStore({ path });
    open.push(store);
    await store.migrate();
    // As a file the process may not write (root writes any file: the connection is made
    // read-only instead).
    store.context.db.pragma('query_only = 1');
    const refused = await failure(store.migrate());
    expect([refused.code, refused.retryable]).toEqual(['store-unknown', false]);
    expect(refused.message).toContain('may not write');
  });

  it('names a migration that fails, rather than calling the store not migrated', async () => {
    const path = join(folder(), 'sluice.db');
    const store = sqliteStore({ path });
    open.push(store);
    await store.migrate();
    // A file damaged by hand: the table migration 29 indexes is gone, and 29 is struck off.
    store.context.db.exec('DROP TABLE budgets; DELETE FROM sluice_migrations WHERE version = 29');
    const refused = await failure(store.migrate());
    expect([refused.code, refused.retryable]).toEqual(['store-unknown', false]);
    expect(refused.message).toMatch(/^migration 29 \(budget_windows_by_tenant\) failed: no such table/);
  });

  it('calls a file that is not a database store-unknown, not worth a retry', async () => {
    const path = join(folder(), 'not.db');
    writeFileSync(
      path,
      'this is not a SQLite database, only text long enough to be read as one. '.repeat(20),
    );
    let error: unknown;
    try {
      const store = sqliteStore({ path });
      open.push(store);
      await store.migrate();
    } catch (e) {
      error = e;
    }
    expect(isSluiceError(error) && [error.code, error.retryable]).toEqual(['store-unknown', false]);
    expect((error as Error).message).toMatch(/\(the file is not a SQLite database\)$/);
  });

  it('says a malformed database may be a disk that fails to read, before anyone restores a backup', () => {
    // What SQLite raises for a page it could not read, as after an ext4 file system shut down on
    // I/O errors: the file was whole once the disk was sound again.
    const raised = Object.assign(new Error('database disk image is malformed'), { code: 'SQLITE_CORRUPT' });
    const error = classifySqliteError(raised) as StoreError;
    expect([error.code, error.retryable]).toEqual(['store-unknown', false]);
    expect(error.message).toMatch(/the disk under it fails to read: look for I\/O errors/);
    expect(error.message).toMatch(/integrity_check .* before restoring anything from a backup\)$/);
  });

  it.each(['deleted', 'replaced'] as const)(
    'refuses every call once its file is %s under it: nothing more is taken that would be lost',
    async (how) => {
      const path = join(folder(), 'sluice.db');
      const store = sqliteStore({ path });
      open.push(store);
      await store.migrate();
      await store.operationSubmitMany([submitParams({ id: 'before' })]);
      if (how === 'deleted') for (const f of [path, `${path}-wal`, `${path}-shm`]) rmSync(f, { force: true });
      else {
        // Another file at the path: a copy of it, as a restore or a re-provisioned volume would put there.
        copyFileSync(path, `${path}.copy`);
        renameSync(`${path}.copy`, path);
      }
      // The check runs once a second: wait for its verdict, read by a call.
      await expect
        .poll(
          () =>
            store.now().then(
              () => 'answered',
              (e: { code?: string }) => e.code,
            ),
          { timeout: 10_000 },
        )
        .toBe('store-unavailable');
      const refused = await failure(store.operationSubmitMany([submitParams({ id: 'after' })]));
      expect([refused.code, refused.retryable]).toEqual(['store-unavailable', true]);
      expect(refused.message).toContain(
        `was ${how === 'deleted' ? 'deleted' : 'replaced by another file'} while`,
      );
      await store.close();
      // Nothing was written at the path since: closing leaves no file where the deleted one was.
      if (how === 'deleted') expect(existsSync(path)).toBe(false);
    },
  );

  it('answers store-closed, not retryable, from every call on a closed store', async () => {
    const path = join(folder(), 'sluice.db');
    const store = sqliteStore({ path });
    await store.migrate();
    await store.close();
    for (const call of [
      () => store.migrationStatus(),
      async () => store.subscribe?.(() => {}),
      () => store.operationClaimMany({ class: 'default', owner: 'w', limit: 1, leaseMs: 1000 }),
    ]) {
      const closed = await failure(call());
      expect([closed.code, closed.retryable]).toEqual(['store-closed', false]);
    }
  });

  it("watches the WAL SQLite writes beside a symbolic link's target", async () => {
    const dir = folder();
    const target = join(dir, 'real.db');
    const link = join(dir, 'link.db');
    const first = sqliteStore({ path: target });
    await first.migrate();
    await first.close();
    symlinkSync(target, link);
    const store = sqliteStore({ path: link });
    open.push(store);
    await store.migrate();
    expect(walPathOf(link)).toBe(`${target}-wal`);
    expect(existsSync(walPathOf(link))).toBe(true);
    expect(existsSync(`${link}-wal`)).toBe(false);
  });
});
