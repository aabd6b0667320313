/**
 * @module store/migrations
 * Forward-only numbered migrations, one `NNNN_name.sql` file each, with the same numbers in
 * every driver's folder. A migration is applied once, in order, inside a transaction.
 *
 * Each applied migration is recorded with whether builds from before it can still run against the
 * schema it leaves. A build refuses a store that holds a newer migration marked otherwise: during
 * a rolling upgrade or a rollback, an old process then stops with `store-schema-newer` instead of
 * calling functions and tables that changed under it. A migration is *breaking* unless its file
 * carries the line {@link COMPATIBLE_MARK}, so forgetting to decide is the safe mistake.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isStoreError, StoreError } from '../core/errors/index.js';

export interface Migration {
  version: number;
  name: string;
  sql: string;
  /** False when builds from before this version run unchanged against it (the file says so). */
  breaking: boolean;
}

/** The line a migration file carries when builds from before it stay correct against it. */
export const COMPATIBLE_MARK = '-- Older builds: compatible.';

/** Reads the migrations of one driver from its folder, in version order. */
export function loadMigrations(dir: string): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((file) => {
      const sql = readFileSync(join(dir, file), 'utf8');
      return {
        version: Number(file.slice(0, 4)),
        name: file.slice(5, -4),
        sql,
        breaking: !sql.split('\n').some((line) => line.trim() === COMPATIBLE_MARK),
      };
    });
}

/** What a store's migrations table says against the migrations this build has. */
export interface MigrationStatus {
  /** The highest version applied (0: never migrated). */
  applied: number;
  /** The highest version this build has. */
  latest: number;
  /**
   * The highest applied version above `latest` that a newer build marked breaking, or null:
   * this build must not run against the store while it is set.
   */
  breakingAhead: number | null;
}

/** The refusal of a store migrated by a newer build, in its stable form. */
export function schemaNewerError(status: MigrationStatus): StoreError {
  return new StoreError(
    'schema-newer',
    `the store's schema is at version ${status.applied}, from a newer build of Sluice; version ` +
      `${status.breakingAhead} changed it in a way this build (which knows versions up to ` +
      `${status.latest}) cannot run against: run this process from the newer build`,
  );
}

/**
 * The failure of one migration's SQL, as the driver classified it, named with the migration.
 * One that fails is no store awaiting a migration: `not-migrated` would say to run the very
 * command that failed, so it is `unknown`; other reasons (a lost connection) keep theirs.
 */
export function migrationFailed(migration: Migration, classified: unknown, detail: string): unknown {
  if (!isStoreError(classified)) return classified;
  return new StoreError(
    classified.reason === 'not-migrated' ? 'unknown' : classified.reason,
    `migration ${migration.version} (${migration.name}) failed: ${detail}`,
    { cause: classified.cause },
  );
}
