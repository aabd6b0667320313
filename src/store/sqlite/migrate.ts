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

/** The highest applied migration version, or 0. */
export function schemaVersion(ctx: SqliteContext): number {
  const row = ctx.db.prepare(`SELECT max(version) AS v FROM sluice_migrations`).get() as
    | { v: number | null }
    | undefined;
  return row?.v ?? 0;
}
