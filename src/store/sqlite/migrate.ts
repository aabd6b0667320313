/**
 * @module store/sqlite/migrate
 * Applies the SQLite migrations. Each runs in its own `BEGIN IMMEDIATE` transaction that first
 * re-reads the applied versions, so processes migrating the same file at once apply each
 * migration exactly once (the write lock serialises them).
 */
import { fileURLToPath } from 'node:url';
import { loadMigrations } from '../migrations.js';
import type { SqliteContext } from './connection.js';

const DIR = fileURLToPath(new URL('./migrations/', import.meta.url));

export function migrateSqlite(ctx: SqliteContext): void {
  ctx.write(() => {
    ctx.db.exec(`CREATE TABLE IF NOT EXISTS sluice_migrations (
      version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`);
  });
  for (const migration of loadMigrations(DIR)) {
    ctx.write((now) => {
      const done = ctx.db.prepare('SELECT 1 FROM sluice_migrations WHERE version = ?').get(migration.version);
      if (done) return;
      ctx.db.exec(migration.sql);
      ctx.db
        .prepare('INSERT INTO sluice_migrations (version, name, applied_at) VALUES (?, ?, ?)')
        .run(migration.version, migration.name, now);
    });
  }
}

/** The highest applied migration version (0 for a file never migrated) and the latest there is. */
export function migrationStatusSqlite(ctx: SqliteContext): { applied: number; latest: number } {
  const latest = loadMigrations(DIR).at(-1)?.version ?? 0;
  const table = ctx.db
    .prepare(`SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sluice_migrations'`)
    .get();
  if (!table) return { applied: 0, latest };
  const row = ctx.db.prepare(`SELECT max(version) AS v FROM sluice_migrations`).get() as
    | { v: number | null }
    | undefined;
  return { applied: row?.v ?? 0, latest };
}
