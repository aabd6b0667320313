/**
 * @module cli/open-store
 * Turns a `--db` value into a store: a `postgres://` URL opens PostgreSQL, anything else is a
 * SQLite file path (its folder is created). Default: `SLUICE_DB`, else `./data/sluice.db`.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { InvalidArgument } from '../core/errors/index.js';
import { sqliteStore } from '../store/sqlite/index.js';
import type { Store } from '../store/store.js';

export const DEFAULT_DB = './data/sluice.db';

export interface OpenStoreOptions {
  sqlite?: { synchronous?: 'FULL' | 'NORMAL' };
  postgres?: { schema?: string; poolSize?: number };
  /**
   * The store must already exist: a SQLite file is not created (a mistyped path would otherwise
   * leave an empty database behind), for commands that read or act on what is there.
   */
  existing?: boolean;
}

export async function openStore(db: string | undefined, options: OpenStoreOptions = {}): Promise<Store> {
  const target = db ?? process.env.SLUICE_DB ?? DEFAULT_DB;
  // An empty path would open SQLite's anonymous temporary database: accepted work lost at exit.
  if (target.trim() === '') {
    throw new InvalidArgument(
      `${db === undefined ? 'SLUICE_DB' : '--db'} is empty: name a SQLite file or a postgres:// URL`,
    );
  }
  if (/^postgres(ql)?:\/\//.test(target)) {
    const { postgresStore } = await import('../store/postgres/index.js');
    return postgresStore({ connectionString: target, ...options.postgres });
  }
  if (target !== ':memory:') {
    if (options.existing && !existsSync(target)) {
      throw new InvalidArgument(
        `no database at ${target}: run \`sluice migrate --db ${target}\` to create one`,
      );
    }
    mkdirSync(dirname(resolve(target)), { recursive: true });
  }
  return sqliteStore({ path: target, ...options.sqlite });
}

/** Refuses a store whose schema is older than this code's, naming the command that fixes it. */
export async function assertMigrated(store: Store, db: string | undefined): Promise<void> {
  const { applied, latest } = await store.migrationStatus();
  if (applied >= latest) return;
  const how = `run \`sluice migrate${db ? ` --db ${redact(db)}` : ''}\``;
  throw new InvalidArgument(
    applied === 0
      ? `the store was never migrated: ${how} first`
      : `the store's schema is at version ${applied} of ${latest}: ${how} first`,
  );
}

/** A URL's password is not printed. */
const redact = (db: string) => db.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');
