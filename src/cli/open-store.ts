/**
 * @module cli/open-store
 * Turns a `--db` value into a store: a `postgres://` URL opens PostgreSQL, anything else is a
 * SQLite file path (its folder is created, unless the command needs a store that exists).
 * Default: `SLUICE_DB`, else a `--config` file's `db`, else `./data/sluice.db`; an empty value is
 * refused.
 */
import { existsSync } from 'node:fs';
import { loadConfig, type PostgresConfig } from '../config/config.js';
import { urlScheme } from '../config/inputs.js';
import { InvalidArgument } from '../core/errors/index.js';
import { schemaNewerError } from '../store/migrations.js';
import { sqliteStore } from '../store/sqlite/index.js';
import type { Store } from '../store/store.js';

export const DEFAULT_DB = './data/sluice.db';

export interface OpenStoreOptions {
  sqlite?: { synchronous?: 'FULL' | 'NORMAL' };
  /** The PostgreSQL store's settings a config may give (`postgresStore`'s options of the same names). */
  postgres?: PostgresConfig;
  /**
   * The store must already exist: a SQLite file is not created (a mistyped path would otherwise
   * leave an empty database behind), for commands that read or act on what is there.
   */
  existing?: boolean;
  /** Where the value came from, for the message when it is empty. Default: `--db`, else `SLUICE_DB`. */
  source?: string;
}

export async function openStore(db: string | undefined, options: OpenStoreOptions = {}): Promise<Store> {
  const target = db ?? process.env.SLUICE_DB ?? DEFAULT_DB;
  // An empty path would open SQLite's anonymous temporary database: accepted work lost at exit.
  if (target.trim() === '') {
    throw new InvalidArgument(
      `${options.source ?? (db === undefined ? 'SLUICE_DB' : '--db')} is empty: name a SQLite file or a postgres:// URL`,
    );
  }
  // A URL's scheme is case-insensitive (RFC 3986 §3.1); any other scheme is a mistake, not a
  // file path: `postgress://host/db` would otherwise create a SQLite file of that name, and each
  // host would run on a database of its own.
  if (/^postgres(ql)?:\/\//i.test(target)) {
    const { postgresStore } = await import('../store/postgres/index.js');
    return postgresStore({ connectionString: target, ...options.postgres });
  }
  const scheme = urlScheme(target);
  if (scheme !== undefined) {
    throw new InvalidArgument(
      `${options.source ?? (db === undefined ? 'SLUICE_DB' : '--db')} names a ${scheme}:// URL: a store is a postgres:// (or postgresql://) URL or a SQLite file path`,
    );
  }
  if (target !== ':memory:' && options.existing && !existsSync(target)) {
    throw new InvalidArgument(
      `no database at ${target}: run \`sluice migrate --db ${target}\` to create one`,
    );
  }
  // The store makes the file's folder if it is missing (and says so if it cannot).
  return sqliteStore({ path: target, ...options.sqlite });
}

/** The flags of every command that opens the store, worded once. */
export const STORE_OPTIONS = {
  db: [
    '--db <sqlite-path|postgres-url>',
    "the store (default: $SLUICE_DB, the config file's, or ./data/sluice.db)",
  ],
  config: [
    '--config <file>',
    'take the store from this config file (default: sluice.config.* in the current folder, as serve finds it): its db, PostgreSQL schema and SQLite settings',
  ],
} as const satisfies Record<string, readonly [string, string]>;

/** What names the store on a command line: `--db`, and the config file it may come from. */
export interface StoreFlags {
  db?: string;
  config?: string;
}

/**
 * Opens the store `--db` names, else `$SLUICE_DB`, else the one the config file names (`--config`,
 * else `sluice.config.*` in the current folder, with its PostgreSQL schema and SQLite settings,
 * which `--db` alone cannot give), else the default.
 */
export async function openStoreFromFlags(
  flags: StoreFlags,
  options: Pick<OpenStoreOptions, 'existing'> = {},
) {
  // The file `--config` names, else the one `sluice serve` would find in the current folder: a
  // command run beside the service's config acts on the service's store.
  const config =
    flags.db === undefined || flags.config !== undefined ? await loadConfig(flags.config) : undefined;
  const db = flags.db ?? process.env.SLUICE_DB ?? config?.db;
  const source =
    flags.db !== undefined
      ? '--db'
      : process.env.SLUICE_DB !== undefined
        ? 'SLUICE_DB'
        : `the db of ${flags.config ?? 'the config file'}`;
  const store = await openStore(db, {
    ...options,
    source,
    sqlite: config?.sqlite,
    postgres: config?.postgres,
  });
  return { store, db };
}

/**
 * Refuses a store whose schema is older than this code's, naming the command that fixes it, and
 * one a newer build migrated past a version it marked breaking (`store-schema-newer`).
 */
export async function assertMigrated(store: Store, db: string | undefined): Promise<void> {
  const status = await store.migrationStatus();
  if (status.breakingAhead !== null) throw schemaNewerError(status);
  const { applied, latest } = status;
  if (applied >= latest) return;
  const how = `run \`sluice migrate${db ? ` --db ${redact(db)}` : ''}\``;
  throw new InvalidArgument(
    applied === 0
      ? `the store was never migrated: ${how} first`
      : `the store's schema is at version ${applied} of ${latest}: ${how} first`,
  );
}

/** A URL's password is not printed. */
export const redact = (db: string) => db.replace(/\/\/([^:/@]+):[^@]*@/, '//$1:***@');
