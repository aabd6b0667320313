/**
 * @module cli/open-store
 * Turns a `--db` value into a store: a `postgres://` URL opens PostgreSQL, anything else is a
 * SQLite file path (its folder is created, unless the command needs a store that exists).
 * Default: `SLUICE_DB`, else a `--config` file's `db`, else `./data/sluice.db`; an empty value is
 * refused. Whatever it prints of a URL goes through `redact`: a hint ends up in logs and tickets.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { CONFIG_FILES, loadConfig, type PostgresConfig } from '../config/config.js';
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
  /** The command that creates this store, for the message when it does not exist. */
  migrate?: string;
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
      `no database at ${target}: run \`${options.migrate ?? `sluice migrate --db ${shellWord(target)}`}\` to create one`,
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
    'take the store from this config file: its db, PostgreSQL schema and SQLite settings (default: sluice.config.* in the current folder, as serve finds it, unless --db or $SLUICE_DB names the store)',
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
 *
 * A config found by default is not read when `--db` or `SLUICE_DB` names the store: these
 * commands need nothing else from it (kinds, admission and auth are `serve`'s), and loading it
 * runs its code, so a broken or half-edited file beside the service would stop an operator from
 * listing or cancelling with the store named outright. `--config` given is read in any case, for
 * its schema and SQLite settings. `ignoredConfig` names the file left unread, for whoever must
 * warn that its schema was not used.
 */
export async function openStoreFromFlags(
  flags: StoreFlags,
  options: Pick<OpenStoreOptions, 'existing'> = {},
) {
  const fromEnv = process.env.SLUICE_DB;
  const named = flags.db !== undefined || fromEnv !== undefined;
  const config = flags.config !== undefined || !named ? await loadConfig(flags.config) : undefined;
  const ignoredConfig =
    flags.config === undefined && named
      ? CONFIG_FILES.find((f) => existsSync(resolve(process.cwd(), f)))
      : undefined;
  const db = flags.db ?? fromEnv ?? config?.db;
  const source =
    flags.db !== undefined
      ? '--db'
      : fromEnv !== undefined
        ? 'SLUICE_DB'
        : `the db of ${flags.config ?? 'the config file'}`;
  const migrate = migrateCommand(flags);
  const store = await openStore(db, {
    ...options,
    source,
    migrate,
    sqlite: config?.sqlite,
    postgres: config?.postgres,
  });
  return { store, db, migrate, ignoredConfig, source };
}

/**
 * The `sluice migrate` that acts on the store these flags name: the same `--db` and `--config`
 * as given. A store from `SLUICE_DB` or a config found by default needs neither (`migrate`
 * finds them as this command did); one from a config needs the config, not its URL alone,
 * which would migrate the default schema instead of the config's.
 */
export function migrateCommand(flags: StoreFlags): string {
  let command = 'sluice migrate';
  if (flags.db !== undefined) command += ` --db ${shellWord(redact(flags.db))}`;
  if (flags.config !== undefined) command += ` --config ${shellWord(flags.config)}`;
  return command;
}

/**
 * Refuses a store whose schema is older than this code's, naming the command that fixes it
 * (`hint.migrate`, else `sluice migrate --db <db>`, the password left out), and one a newer build
 * migrated past a version it marked breaking (`store-schema-newer`).
 */
export async function assertMigrated(
  store: Store,
  db: string | undefined,
  hint: { migrate?: string; note?: string } = {},
): Promise<void> {
  const status = await store.migrationStatus();
  if (status.breakingAhead !== null) throw schemaNewerError(status);
  const { applied, latest } = status;
  if (applied >= latest) return;
  const command = hint.migrate ?? `sluice migrate${db ? ` --db ${shellWord(redact(db))}` : ''}`;
  const how = `run \`${command}\` first${hint.note ? ` (${hint.note})` : ''}`;
  throw new InvalidArgument(
    applied === 0
      ? `the store was never migrated: ${how}`
      : `the store's schema is at version ${applied} of ${latest}: ${how}`,
  );
}

/**
 * Said when a config found by default was left unread on PostgreSQL: its `postgres.schema`, if
 * it sets one, is where the service's store is, and this command looked in the default schema.
 */
export function ignoredConfigNote(opened: { ignoredConfig?: string; source: string }): string | undefined {
  if (opened.ignoredConfig === undefined) return undefined;
  return (
    `${opened.ignoredConfig} in this folder was not read, as ${opened.source} names the store: ` +
    `add --config ${opened.ignoredConfig} to use the PostgreSQL schema it may set`
  );
}

/** Query parameters that carry a secret (libpq's `password`, `sslpassword`), blanked by `redact`. */
const SECRET_PARAM = /pass|secret|token/i;

/**
 * A store as it may be printed: a URL's password and secret query parameters replaced by `***`;
 * a file path as it is. Parsed as a URL, as `pg` parses it, so a password holding `@` is masked
 * whole; one that cannot be parsed is not shown beyond its scheme.
 */
export function redact(db: string): string {
  const scheme = urlScheme(db);
  if (scheme === undefined) return db;
  // `postgres://user:pw@/db?host=/socket` has no host, which URL refuses: pg parses it with a
  // stand-in host (pg-connection-string), and so does this.
  const DUMMY = 'sluice-redacted-host';
  const dummy = !canParse(db) && db.includes('@/');
  const text = dummy ? db.replace('@/', `@${DUMMY}/`) : db;
  if (!canParse(text)) return `${scheme}://***`;
  const url = new URL(text);
  // An `@` past the host means the parse did not end the credentials where pg might (a password
  // holding `/`, `?` or `#`): nothing of it can be shown safely.
  if (`${url.pathname}${url.search}${url.hash}`.includes('@')) return `${scheme}://***`;
  url.hash = '';
  if (url.password !== '') url.password = '***';
  // Pair by pair, not through searchParams, which would re-encode the others (`sslkey=%2F…`).
  if (url.search !== '')
    url.search = url.search
      .slice(1)
      .split('&')
      .map((pair) => {
        const key = pair.split('=', 1)[0]!;
        return SECRET_PARAM.test(safeDecode(key)) ? `${key}=***` : pair;
      })
      .join('&');
  return dummy ? url.href.replace(`@${DUMMY}/`, '@/') : url.href;
}

/** A query key as pg reads it; one it could not decode is tested as written. */
function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text.replaceAll('+', ' '));
  } catch {
    return text;
  }
}

function canParse(text: string): boolean {
  try {
    new URL(text);
    return true;
  } catch {
    return false;
  }
}

/** A word a POSIX shell reads back as it is: quoted when it holds anything but safe characters. */
function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}
