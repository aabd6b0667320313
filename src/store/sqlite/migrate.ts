/**
 * @module store/sqlite/migrate
 * Applies the SQLite migrations. Each runs in its own `BEGIN IMMEDIATE` transaction that first
 * re-reads the applied versions, so processes migrating the same file at once apply each
 * migration exactly once (the write lock serialises them). A file a newer build migrated past a
 * breaking version is refused before anything is applied (store/migrations.ts).
 */
import { fileURLToPath } from 'node:url';
import { StoreError } from '../../core/errors/index.js';
import { loadMigrations, type MigrationStatus, migrationFailed, schemaNewerError } from '../migrations.js';
import { classifySqliteError, type SqliteContext } from './connection.js';

const DIR = fileURLToPath(new URL('./migrations/', import.meta.url));

const causeCode = (error: unknown) => (error as { cause?: { code?: unknown } }).cause?.code;

export function migrateSqlite(ctx: SqliteContext): void {
  const migrations = loadMigrations(DIR);
  try {
    ctx.write(() => {
      ctx.db.exec(`CREATE TABLE IF NOT EXISTS sluice_migrations (
        version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL,
        breaking INTEGER NOT NULL DEFAULT 1)`);
      // Files migrated before migrations were marked: every version they hold counts as breaking.
      if (!hasBreakingColumn(ctx))
        ctx.db.exec('ALTER TABLE sluice_migrations ADD COLUMN breaking INTEGER NOT NULL DEFAULT 1');
      const status = readStatus(ctx, migrations.at(-1)?.version ?? 0);
      if (status.breakingAhead !== null) throw schemaNewerError(status);
    });
    try {
      // A write that changes nothing, so a file this process may not write is refused here, at a
      // service's start, even with nothing to apply: every submit would fail after it.
      ctx.write(() => {
        const version = ctx.db.pragma('user_version', { simple: true }) as number;
        ctx.db.pragma(`user_version = ${version}`);
      });
    } catch (error) {
      // A full disk refuses that write too, and is no reason to refuse to start: a process that
      // starts answers reads and refuses writes (store-unavailable) until there is room, where one
      // that does not start answers nothing, and its supervisor restarts it in a loop. What must be
      // applied, below, still fails while the disk is full.
      if (causeCode(error) !== 'SQLITE_FULL') throw error;
    }
  } catch (error) {
    if (causeCode(error) !== 'SQLITE_READONLY') throw error;
    throw new StoreError(
      'unknown',
      `${(error as Error).message}: this process may not write the database file or its folder ` +
        '(SQLite writes a -wal and a -shm file beside the file); the store writes',
      { cause: error },
    );
  }
  for (const migration of migrations) {
    ctx.write((now) => {
      const done = ctx.db.prepare('SELECT 1 FROM sluice_migrations WHERE version = ?').get(migration.version);
      if (done) return;
      try {
        ctx.db.exec(migration.sql);
      } catch (error) {
        throw migrationFailed(migration, classifySqliteError(error), (error as Error).message);
      }
      ctx.db
        .prepare('INSERT INTO sluice_migrations (version, name, applied_at, breaking) VALUES (?, ?, ?, ?)')
        .run(migration.version, migration.name, now, migration.breaking ? 1 : 0);
    });
  }
}

/** The highest applied migration version (0 for a file never migrated) against this build's. */
export function migrationStatusSqlite(ctx: SqliteContext): MigrationStatus {
  const latest = loadMigrations(DIR).at(-1)?.version ?? 0;
  const table = ctx.db
    .prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sluice_migrations'`)
    .get();
  if (!table) return { applied: 0, latest, breakingAhead: null };
  return readStatus(ctx, latest);
}

function hasBreakingColumn(ctx: SqliteContext): boolean {
  return (
    ctx.db.prepare(`SELECT 1 FROM pragma_table_info('sluice_migrations') WHERE name = 'breaking'`).get() !==
    undefined
  );
}

function readStatus(ctx: SqliteContext, latest: number): MigrationStatus {
  // Without the column every version counts as breaking, as the migration above would record it.
  const breaking = hasBreakingColumn(ctx) ? 'breaking' : '1';
  const row = ctx.db
    .prepare(
      `SELECT max(version) AS applied, max(CASE WHEN version > ? AND ${breaking} THEN version END) AS ahead
         FROM sluice_migrations`,
    )
    .get(latest) as { applied: number | null; ahead: number | null };
  return { applied: row.applied ?? 0, latest, breakingAhead: row.ahead };
}
