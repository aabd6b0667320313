/**
 * @module store/sqlite/connection
 * Opens a SQLite file the way Sluice needs it and classifies its errors.
 *
 * Durability: WAL with `synchronous=FULL` by default, so an accepted operation survives power
 * loss; `NORMAL` (survives a process crash, not an OS crash) is an explicit opt-in. Every write
 * transaction starts with `BEGIN IMMEDIATE`: it takes the write lock up front, so two processes
 * never deadlock upgrading read locks, and `busy_timeout` makes a writer wait its turn instead of
 * failing at once.
 */

import { chmodSync, existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import type Database from 'better-sqlite3';
import { bounded, MAX_TIMER_MS } from '../../core/bounds.js';
import type { Clock } from '../../core/clock.js';
import {
  InvalidArgument,
  isSluiceError,
  isStoreError,
  MIGRATE_HINT,
  StoreError,
  type StoreErrorReason,
} from '../../core/errors/index.js';
import { makeFolder } from '../../core/make-folder.js';
import { storeClosed } from '../closed.js';
import { BUSY_SPIN_MS } from './busy.js';
import { sqliteDriver } from './driver.js';

export interface SqliteOptions {
  /** The database file (created if missing), or `:memory:` for a private in-memory store. */
  path: string;
  /** `FULL` (default): survives power loss. `NORMAL`: survives a crash of the process only. */
  synchronous?: 'FULL' | 'NORMAL';
  /** How long a writer waits for another process's write lock before `store-busy`. Default 5000. */
  busyTimeoutMs?: number;
  /** The clock that stamps leases, deadlines and effects. Default: the system clock. */
  clock?: Clock;
  /**
   * Whether a subscribed store (an idle worker's) watches the file for other processes' commits
   * that made work ready, to wake at once rather than at its next poll (store/sqlite/watch.ts).
   * Default true; `false`: polling only.
   */
  watch?: boolean;
}

export type Statement = Database.Statement<unknown[], unknown>;

export interface SqliteContext {
  readonly db: Database.Database;
  readonly clock: Clock;
  /** How long a call may wait for another connection's write lock in all (busy.ts). */
  readonly busyTimeoutMs: number;
  /** A prepared statement, compiled once per connection. */
  stmt(sql: string): Statement;
  /**
   * The same, its rows read as arrays of values in the statement's column order (better-sqlite3's
   * raw mode) instead of an object per row: see rows.ts `operationRowOf`.
   */
  rawStmt(sql: string): Statement;
  /**
   * Runs `fn` in a `BEGIN IMMEDIATE` transaction, or as part of the one already open on the
   * connection; errors come out classified.
   */
  write<T>(fn: (now: number) => T): T;
  /**
   * `write`, but a transaction of its own commits without syncing the WAL when the store runs
   * `FULL` (`NORMAL` for that commit only): for a write whose loss is safe, since every later
   * synced commit syncs the WAL file, and with it this one's frames, first. Inside another
   * transaction it joins it, and that transaction's commit decides.
   */
  writeUnsynced<T>(fn: (now: number) => T): T;
  /** Runs `fn` outside a write transaction; errors come out classified. */
  read<T>(fn: () => T): T;
}

// A file that is not a database, or a damaged one, is `unknown`: no retry can succeed, and a
// retryable reason would have the HTTP API answer 503 with `Retry-After` for ever.
const REASONS: Array<[RegExp, StoreErrorReason]> = [
  [/^SQLITE_(BUSY|LOCKED)/, 'busy'],
  [/^SQLITE_CONSTRAINT_(UNIQUE|PRIMARYKEY)/, 'unique-violation'],
  [/^SQLITE_(CANTOPEN|IOERR|FULL|READONLY|PROTOCOL)/, 'unavailable'],
  [/^SQLITE_INTERRUPT/, 'statement-timeout'],
];
const NOT_A_DATABASE = /^SQLITE_(NOTADB|CORRUPT)/;
/**
 * SQLite reports a page it could not read as a malformed database too: a disk or file system that
 * fails under it (EIO, an ext4 file system shut down on errors) reads as damage, and every call
 * after the first I/O error says so, reads included, while the file itself is whole. Restoring a
 * backup then would lose what was accepted since: look first.
 */
const DAMAGED =
  'the file is damaged, or the disk under it fails to read: look for I/O errors in the system log and ' +
  'run PRAGMA integrity_check on the file once the disk is sound, before restoring anything from a backup';
/** The store's own statements naming what a migration makes: the file was never migrated, or not fully. */
const NOT_MIGRATED = /^no such (table|column|function): /;

/** Maps a better-sqlite3 error to a `StoreError`; passes Sluice's own errors through. */
export function classifySqliteError(error: unknown): unknown {
  if (isSluiceError(error)) return error;
  const code = (error as { code?: unknown } | null)?.code;
  const message = error instanceof Error ? error.message : String(error);
  if (typeof code === 'string') {
    if (NOT_A_DATABASE.test(code))
      return new StoreError(
        'unknown',
        `SQLite: ${message} (${code.startsWith('SQLITE_NOTADB') ? 'the file is not a SQLite database' : DAMAGED})`,
        { cause: error },
      );
    for (const [pattern, reason] of REASONS) {
      if (pattern.test(code)) return new StoreError(reason, `SQLite: ${message}`, { cause: error });
    }
    if (NOT_MIGRATED.test(message))
      return new StoreError('not-migrated', `SQLite: ${message} (${MIGRATE_HINT})`, { cause: error });
    if (code.startsWith('SQLITE_')) return new StoreError('unknown', `SQLite: ${message}`, { cause: error });
  }
  // Only the store's own connection gets here closed (a handle given as `tx` is refused first,
  // being in no transaction): a call that waited for the lock while the store was closed.
  if (error instanceof TypeError && /database connection is not open/.test(message))
    return storeClosed('SQLite', error);
  return error;
}

/** The connection's statement caches: one per read mode (a statement's mode is its own). */
function statements(db: Database.Database): Pick<SqliteContext, 'stmt' | 'rawStmt'> {
  const objects = new Map<string, Statement>();
  const arrays = new Map<string, Statement>();
  return {
    stmt(sql) {
      let s = objects.get(sql);
      if (!s) {
        s = db.prepare(sql);
        objects.set(sql, s);
      }
      return s;
    },
    rawStmt(sql) {
      let s = arrays.get(sql);
      if (!s) {
        s = db.prepare(sql).raw(true);
        arrays.set(sql, s);
      }
      return s;
    },
  };
}

const borrowed = new WeakMap<Database.Database, SqliteContext>();

/**
 * A context on the caller's own connection, for transactional submit: statements run inside the
 * caller's open transaction (no BEGIN of ours), so they commit or roll back with it. The handle
 * must be open on the same, migrated database file.
 *
 * The transaction should be `BEGIN IMMEDIATE`. One begun deferred that has read already cannot
 * wait for another writer's lock (SQLite refuses at once, to avoid a deadlock), nor write after
 * another connection committed (`SQLITE_BUSY_SNAPSHOT`); retrying the submit alone cannot help, so
 * either is `store-serialization`: restart the whole transaction. One begun deferred that has not
 * read yet takes the write lock here first, with a write that changes nothing, and so waits for
 * the lock as `BEGIN IMMEDIATE` would.
 */
export function borrowSqlite(db: Database.Database, clock: Clock): SqliteContext {
  let ctx = borrowed.get(db);
  if (!ctx) {
    let takeLock: Statement | undefined;
    const write = <T>(fn: (now: number) => T): T => {
      if (!db.inTransaction) {
        throw new InvalidArgument('tx must be a better-sqlite3 Database inside an open transaction');
      }
      try {
        takeLock ??= db.prepare('UPDATE seq_floor SET seq = seq WHERE 0');
        takeLock.run();
        return fn(clock.now());
      } catch (error) {
        const classified = classifySqliteError(error);
        // The caller's handle, not the store's: tables it cannot find are most often another file.
        if (isStoreError(classified) && classified.reason === 'not-migrated')
          throw new InvalidArgument(
            `tx: the handle given is not on the store's database file, or that file is not migrated (${classified.message})`,
          );
        if (isStoreError(classified) && classified.reason === 'busy')
          throw new StoreError(
            'serialization',
            `SQLite: ${classified.message.replace(/^SQLite: /, '')}; your transaction cannot wait for ` +
              'the write lock here: open it with BEGIN IMMEDIATE, and run it again whole',
            { cause: error },
          );
        throw classified;
      }
    };
    ctx = {
      db,
      clock,
      // The caller's transaction: never tried again here (its lock errors are not `busy`).
      busyTimeoutMs: 0,
      ...statements(db),
      write,
      // The caller's transaction commits when the caller says, as the caller's settings say.
      writeUnsynced: write,
      read<T>(fn: () => T): T {
        return fn();
      },
    };
    borrowed.set(db, ctx);
  }
  return ctx;
}

/**
 * The file's folder, made if missing, as `sqlite3` makes the file: `./data/sluice.db` works in a
 * fresh checkout. SQLite's own names (`:memory:`, an empty path for a temporary database, `file:`
 * URIs) are left to it. A folder made here is the user's alone (0700): the database holds every
 * tenant's inputs and results, and the key of the list cursors.
 */
const isPlainPath = (path: string) => path !== '' && path !== ':memory:' && !path.startsWith('file:');

function makeFolderFor(path: string): void {
  if (!isPlainPath(path)) return;
  const folder = dirname(resolve(path));
  try {
    makeFolder(folder, 0o700);
  } catch (error) {
    throw new InvalidArgument(`cannot create ${folder} for ${path}: ${(error as Error).message}`);
  }
}

export function openSqlite(options: SqliteOptions, clock: Clock): SqliteContext {
  // Checked before the file is opened; both end up in a PRAGMA.
  const synchronous = options.synchronous ?? 'FULL';
  if (synchronous !== 'FULL' && synchronous !== 'NORMAL')
    throw new InvalidArgument(`synchronous must be FULL or NORMAL, not ${String(synchronous)}`);
  const busyTimeoutMs = bounded('busyTimeoutMs', options.busyTimeoutMs, 5000, {
    min: 0,
    max: MAX_TIMER_MS,
    integer: true,
  });
  makeFolderFor(options.path);
  const created = isPlainPath(options.path) && !existsSync(options.path);
  let db: Database.Database;
  try {
    db = new (sqliteDriver())(options.path);
    // A file made here is the user's alone, whatever the folder; SQLite gives its WAL and shared
    // memory files the database file's mode when it makes them, after this.
    if (created) chmodSync(options.path, 0o600);
    // The whole wait while the file is set up (several processes opening a new file at once);
    // from then on SQLite waits a few milliseconds, and busy.ts the rest, off the thread.
    db.pragma(`busy_timeout = ${busyTimeoutMs}`);
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${synchronous}`);
    db.pragma('temp_store = MEMORY');
    // Sluice's own transactions are short; a larger cache keeps the hot indexes in memory.
    db.pragma('cache_size = -16000');
    db.pragma(`busy_timeout = ${Math.min(busyTimeoutMs, BUSY_SPIN_MS)}`);
  } catch (error) {
    throw classifySqliteError(error);
  }
  // One transaction function for every write: better-sqlite3 builds a wrapper per `transaction()`
  // call, which is measurable on a one-at-a-time submit.
  let ours = false;
  const transaction = db.transaction(<T>(fn: (now: number) => T): T => {
    ours = true;
    try {
      return fn(clock.now());
    } finally {
      ours = false;
    }
  });
  const write = <T>(fn: (now: number) => T): T => {
    // A write inside another of ours (a worker's ends and its next claim) joins it: an error
    // leaves through the outer one, which rolls everything back, so a savepoint of its own would
    // buy nothing, and SQLite keeps a copy of every page a savepoint changes. A transaction
    // someone else opened on this connection is not joined: a claim or an effect's journal row
    // written into it would vanish with its rollback, and the effect be sent again as new.
    if (db.inTransaction) {
      if (!ours)
        throw new InvalidArgument(
          "a transaction is open on the store's own connection: the store's writes would join it; " +
            'submit inside a transaction on a connection of your own (`{ tx }`)',
        );
      return fn(clock.now());
    }
    try {
      return transaction.immediate(fn) as T;
    } catch (error) {
      throw classifySqliteError(error);
    }
  };
  return {
    db,
    clock,
    busyTimeoutMs,
    ...statements(db),
    write,
    writeUnsynced<T>(fn: (now: number) => T): T {
      if (db.inTransaction || synchronous !== 'FULL') return write(fn);
      // Not a statement prepared once: SQLite applies `PRAGMA synchronous` when it compiles it, so
      // preparing both settings up front would leave the connection at whichever came last.
      // Classified like the write: on a closed store the pragma is what fails first.
      try {
        db.pragma('synchronous = NORMAL');
      } catch (error) {
        throw classifySqliteError(error);
      }
      try {
        return write(fn);
      } finally {
        if (db.open) db.pragma('synchronous = FULL');
      }
    },
    read<T>(fn: () => T): T {
      try {
        return fn();
      } catch (error) {
        throw classifySqliteError(error);
      }
    },
  };
}
