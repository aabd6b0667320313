/**
 * @module store/postgres/migrate
 * Applies the PostgreSQL migrations (same numbers as SQLite's) to the store's schema.
 *
 * All pending migrations run in one transaction that first takes a transaction-scoped advisory
 * lock keyed by the schema name: processes migrating at once queue on the lock, and each
 * re-reads the applied versions only once it holds it, so every migration is applied exactly
 * once and a failed one leaves nothing behind. `SET LOCAL search_path` points the migration's
 * unqualified names at the schema for this transaction only; the connection goes back to the
 * pool as it came. A schema a newer build migrated past a breaking version is refused before
 * anything is applied (store/migrations.ts).
 */
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { InvalidArgument, StoreError } from '../../core/errors/index.js';
import { storeClosed } from '../closed.js';
import { loadMigrations, type MigrationStatus, migrationFailed, schemaNewerError } from '../migrations.js';
import type { PgContext, Query } from './connection.js';
import { classifyPgError } from './errors.js';

const DIR = fileURLToPath(new URL('./migrations/', import.meta.url));

/**
 * Applies every pending migration to the store's schema (creating it), once, whoever else migrates.
 * With nothing pending it changes nothing, and needs no right beyond reading `migrations`.
 */
export async function migratePostgres(ctx: PgContext): Promise<void> {
  const migrations = loadMigrations(DIR);
  // Its own connection, not `checkout`'s: so its own check of a closed store.
  if (ctx.closed) throw storeClosed('PostgreSQL');
  let client: pg.PoolClient;
  try {
    client = await ctx.pool.connect();
  } catch (error) {
    throw ctx.closed ? storeClosed('PostgreSQL', error) : classifyPgError(error);
  }
  const s = ctx.quoted;
  let failed: unknown;
  try {
    // READ COMMITTED whatever the default (connection.ts), so that the versions read once the
    // lock is held are those the migrator before committed, not a snapshot from before the wait.
    await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
    // A migration may take longer than the pool's statement_timeout allows a query.
    await client.query('SET LOCAL statement_timeout = 0');
    await client.query(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, [
      `sluice:migrate:${ctx.schema}`,
    ]);
    // Created only when missing, not with IF NOT EXISTS, which checks the privilege to create
    // before it looks: CREATE on the database for a schema, on the schema for a table. So a
    // migrator may own a schema made for it, and a role with only DML rights may run a migrate
    // that has nothing to apply (`migrate: 'auto'` at a service's start).
    // A read-only connection (a standby's URL, or default_transaction_read_only) is refused here,
    // at a service's start, even with nothing to apply: every write would fail after it.
    const [found] = (
      await client.query<{ schema: boolean; table: boolean; readOnly: boolean }>(
        `SELECT to_regnamespace($1) IS NOT NULL AS schema, to_regclass($2) IS NOT NULL AS table,
                current_setting('transaction_read_only') = 'on' AS "readOnly"`,
        [s, `${s}.migrations`],
      )
    ).rows;
    if (found?.readOnly) {
      throw new StoreError(
        'unknown',
        'PostgreSQL 25006: the connection is read-only (transaction_read_only = on: a standby, or ' +
          'default_transaction_read_only set for the server, database or role); the store writes',
      );
    }
    const query: Query = async (sql, values) => (await client.query(sql, values)).rows;
    await checkPooledSession(ctx, query);
    if (!found?.schema) await client.query(`CREATE SCHEMA ${s}`);
    if (!found?.table) {
      await client.query(`CREATE TABLE ${s}.migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at bigint NOT NULL,
        breaking boolean NOT NULL DEFAULT true)`);
    }
    // Schemas migrated before migrations were marked: every version they hold counts as breaking.
    // Looked up first, so a migrate with nothing to do takes no lock on the table and needs no
    // right to alter it.
    if (!(await hasBreakingColumn(query, `${s}.migrations`)))
      await client.query(`ALTER TABLE ${s}.migrations ADD COLUMN breaking boolean NOT NULL DEFAULT true`);
    const status = await readStatus(query, `${s}.migrations`, migrations.at(-1)?.version ?? 0, true);
    if (status.breakingAhead !== null) throw schemaNewerError(status);
    const applied = new Set(
      (await client.query<{ version: number }>(`SELECT version FROM ${s}.migrations`)).rows.map(
        (r) => r.version,
      ),
    );
    for (const migration of migrations) {
      if (applied.has(migration.version)) continue;
      await client.query(`SET LOCAL search_path TO ${s}, pg_temp`);
      try {
        await client.query(migration.sql);
      } catch (error) {
        const detail = `${(error as Error).message} (SQLSTATE ${(error as { code?: string }).code})`;
        throw migrationFailed(migration, classifyPgError(error), detail);
      }
      await client.query(
        `INSERT INTO ${s}.migrations (version, name, applied_at, breaking)
         VALUES ($1, $2, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, $3)`,
        [migration.version, migration.name, migration.breaking],
      );
    }
    await client.query('COMMIT');
  } catch (error) {
    failed = error;
    await client.query('ROLLBACK').catch(() => {});
    throw classifyPgError(error);
  } finally {
    client.release(failed !== undefined);
  }
}

/** The highest applied migration version (0 when the schema was never migrated) against this build's. */
export async function migrationStatusPostgres(ctx: PgContext): Promise<MigrationStatus> {
  const latest = loadMigrations(DIR).at(-1)?.version ?? 0;
  const table = `${ctx.quoted}.migrations`;
  return ctx.tx(async (query) => {
    await checkPooledSession(ctx, query);
    const [found] = await query<{ r: string | null }>('SELECT to_regclass($1)::text AS r', [table]);
    if (!found?.r) return { applied: 0, latest, breakingAhead: null };
    return readStatus(query, table, latest, await hasBreakingColumn(query, table));
  });
}

/**
 * Behind a transaction pooler the store sets nothing on its connections (connection.ts), so the
 * sessions must start as it needs them: every statement and function of the store is written for
 * READ COMMITTED (a statement that waited for a lock sees what committed meanwhile), and every
 * commit it is told of must be flushed. Checked where a service starts (migrate, or the status a
 * manual migration reads), with the fix named.
 */
async function checkPooledSession(ctx: PgContext, query: Query): Promise<void> {
  if (!ctx.pooled) return;
  const [session] = await query<{ isolation: string; sync: string }>(
    `SELECT current_setting('default_transaction_isolation') AS isolation,
            current_setting('synchronous_commit') AS sync`,
  );
  if (session?.isolation !== 'read committed')
    throw new InvalidArgument(
      `behind a transaction pooler the store's sessions start at ${session?.isolation}, and it needs read committed: ` +
        "ALTER ROLE … SET default_transaction_isolation = 'read committed' (or ALTER DATABASE)",
    );
  if (ctx.durableCommits && session.sync === 'off')
    throw new InvalidArgument(
      "behind a transaction pooler the store's sessions start with synchronous_commit = off, which can lose " +
        "commits it was told of: ALTER ROLE … SET synchronous_commit = 'local' (or on), or durableCommits: false " +
        "(postgresStore's option; postgres.durableCommits in the service's config)",
    );
}

async function hasBreakingColumn(query: Query, table: string): Promise<boolean> {
  const rows = await query<{ found: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM pg_attribute
                     WHERE attrelid = to_regclass($1) AND attname = 'breaking' AND NOT attisdropped) AS found`,
    [table],
  );
  return rows[0]?.found === true;
}

async function readStatus(
  query: Query,
  table: string,
  latest: number,
  marked: boolean,
): Promise<MigrationStatus> {
  // Without the column every version counts as breaking, as migrate() would record it.
  const rows = await query<{ applied: number | null; ahead: number | null }>(
    `SELECT max(version) AS applied, max(version) FILTER (WHERE version > $1 AND ${marked ? 'breaking' : 'true'}) AS ahead
       FROM ${table}`,
    [latest],
  );
  return { applied: rows[0]?.applied ?? 0, latest, breakingAhead: rows[0]?.ahead ?? null };
}
