/**
 * @module store/postgres/connection
 * The pool, the schema and the two ways the driver talks to PostgreSQL: one statement on its
 * own (autocommit: one round trip, the common case, since the hot paths are single statements or
 * functions), or a short transaction on one connection for the operator and maintenance paths.
 *
 * - Everything lives in the store's own schema; its name is validated and quoted, and every
 *   statement names it explicitly, so the caller's `search_path` (and pool) is never changed.
 * - Statements are prepared once per connection (named by a hash of their text).
 * - The clock: `now()` is the injected clock's reading, or null, and every statement takes
 *   `coalesce($now, server clock)`. One code path; in production the server's clock stamps
 *   every lease and deadline, so no decision compares two hosts' wall clocks.
 * - Errors come out classified (errors.ts). A transaction that failed on a deadlock or a
 *   serialization conflict rolled back whole and is run again, a few times, with jitter.
 * - The connection is never held while a handler waits on the network: each call checks a
 *   client out and returns it before resolving.
 * - Every commit the store is told of is flushed: its own pool's connections are raised out of
 *   `synchronous_commit = off` as they open (`durableCommits`).
 * - Everything runs at READ COMMITTED, whatever the server's default: its own pool's connections
 *   are set so as they open, and its transactions say so (a `pool` passed in is the caller's:
 *   its single statements run at the connection's default).
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import { bounded, MAX_TIMER_MS } from '../../core/bounds.js';
import type { Clock } from '../../core/clock.js';
import { InvalidArgument, isStoreError } from '../../core/errors/index.js';
import { storeClosed } from '../closed.js';
import { pgDriver } from './driver.js';
import { classifyPgError } from './errors.js';

export interface PostgresOptions {
  /** A libpq-style URL, e.g. `postgres://user@host:5432/db`. Ignored when `pool` is given. */
  connectionString?: string;
  /** An existing pool to use; the store then leaves it open on `close()`. */
  pool?: pg.Pool;
  /** The schema that holds Sluice's tables and functions. Default `sluice`. */
  schema?: string;
  /** Connections of the store's own pool. Default 10. */
  poolSize?: number;
  /**
   * The clock that stamps leases, deadlines and effects. Default: the database server's, one
   * clock for every process. For tests: a host's clock here puts hosts' clocks back into the
   * decisions (docs/operations.md, "Clocks").
   */
  clock?: Clock;
  /** `statement_timeout` of the store's own pool's connections (ms). Default: the server's. */
  statementTimeoutMs?: number;
  /** How long to wait for a new connection before `store-unavailable`. Default 10000. */
  connectTimeoutMs?: number;
  /**
   * NOTIFY idle workers when work becomes ready (submit, retry). Default true. Each notifying
   * commit takes PostgreSQL's cluster-wide notify lock, which serialises such commits; with
   * many concurrent submitting processes, turning it off and relying on polling can be faster.
   */
  notify?: boolean;
  /**
   * Default true: a connection of the store's own pool that the server, database or role starts
   * with `synchronous_commit = off` is raised to `local`, so that every commit the store is told
   * of has been flushed (docs/operations.md: what `off` breaks). Stronger settings (`on`,
   * `remote_write`, `remote_apply`) are left as they are. False keeps the server's setting. A pool
   * passed in as `pool` is the caller's to configure.
   */
  durableCommits?: boolean;
  /**
   * `'transaction'`: `connectionString` goes through a pooler in transaction mode (PgBouncer's
   * `pool_mode = transaction`), where consecutive transactions of one client may run on different
   * server connections. Statements are then sent unnamed (parsed on every call) instead of
   * prepared once per connection; nothing is set on connections as they open, so the role or
   * database must give what the store needs (`migrate()` and `migrationStatus()` check and refuse
   * otherwise: `default_transaction_isolation` read committed, and `synchronous_commit` not `off`
   * unless `durableCommits` is false); and wake-ups are heard only through `listenUrl`.
   * Default: a direct connection or a pooler in session mode.
   */
  pooler?: 'transaction';
  /**
   * Where the connection that LISTENs for wake-ups connects, when it should not go where the
   * pool does: behind a transaction pooler, a direct URL of the same server. Default: the pool's
   * own connection settings; none behind a transaction pooler, where workers then find work by
   * polling and on every freed slot.
   */
  listenUrl?: string;
}

/** Runs one statement: `{s}` in the text stands for the quoted schema name. */
export type Query = <R = Record<string, unknown>>(sql: string, values?: unknown[]) => Promise<R[]>;

export interface PgContext {
  readonly pool: pg.Pool;
  readonly ownsPool: boolean;
  /** The schema's name as given (validated). */
  readonly schema: string;
  /** The schema's name quoted as an identifier. */
  readonly quoted: string;
  /** The LISTEN/NOTIFY channel of the schema (the migration's `wakeup_channel()`). */
  readonly channel: string;
  readonly notify: boolean;
  /** Behind a pooler in transaction mode (`pooler: 'transaction'`). */
  readonly pooled: boolean;
  /** The listening connection's URL, if it differs from the pool's (`listenUrl`). */
  readonly listenUrl: string | undefined;
  /** Whether the store raises `synchronous_commit = off` (`durableCommits`). */
  readonly durableCommits: boolean;
  readonly clock: Clock | undefined;
  /** Whether the store was closed: every call is then refused with `store-closed` (store/closed.ts). */
  readonly closed: boolean;
  /** Refuses every later call. A pool passed in stays open: it is the caller's to end. */
  markClosed(): void;
  /** The `$now` parameter: the injected clock's time, or null for the server's clock. */
  now(): number | null;
  /** One statement in its own transaction on a pooled connection; deadlocks are retried. */
  query: Query;
  /**
   * As `query`, planned for its parameters on every run (see `run`): a read of a range whose
   * best plan depends on how many rows the table holds by then.
   */
  queryEach: Query;
  /**
   * `fn` in one READ COMMITTED transaction on one connection; deadlocks are retried. With
   * `planEach`, every statement is planned for its parameters on each run (see `run`).
   */
  tx<T>(fn: (query: Query) => Promise<T>, options?: { planEach?: boolean }): Promise<T>;
  /** Statements on a caller's client, inside the caller's transaction: no BEGIN, no retry. */
  on(client: pg.ClientBase): Query;
}

/**
 * The isolation every statement, function and lock protocol of the store is written for: each
 * statement sees what committed before it started (a take that waited on the retry budget's lock
 * sees the takes before it; a migrator that waited on the migration lock sees what the one before
 * it applied). A server, database or role defaulting to `repeatable read` or `serializable` would
 * read from before the wait, so the store's own connections are set back, as they open.
 */
const READ_COMMITTED = `SET default_transaction_isolation = 'read committed'`;

/** Raises a session's `synchronous_commit` from `off` to `local`; any other value stays. */
const DURABLE_COMMITS = `SELECT set_config('synchronous_commit', 'local', false)
  WHERE current_setting('synchronous_commit') = 'off'`;

const SCHEMA_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,47}$/;
const RETRIES = 4;
/** Back-off between tries for a connection the server has no room for (`checkout`). */
const FULL_FIRST_PAUSE_MS = 10;
const FULL_MAX_PAUSE_MS = 250;

/** Checks a schema name and returns it quoted as an identifier. */
export function validateSchema(schema: string): string {
  if (!SCHEMA_NAME.test(schema)) {
    throw new InvalidArgument(
      `schema ${JSON.stringify(schema)} is not a plain identifier (letters, digits, _; at most 48)`,
    );
  }
  return `"${schema}"`;
}

/** Prepared statements, one per distinct text, named by its hash (valid on any connection). */
interface Prepared {
  name: string;
  text: string;
}

/** Connections that already have the driver's error listener. */
const guarded = new WeakSet<pg.ClientBase>();

/** Creates (or adopts) the pool and the helpers every query module uses. */
export function openPostgres(options: PostgresOptions): PgContext {
  const schema = options.schema ?? 'sluice';
  const quoted = validateSchema(schema);
  const poolSize = bounded('poolSize', options.poolSize, 10, { min: 1, max: 1000, integer: true });
  // pg waits for a connection with a timer; the server keeps statement_timeout as an int of ms.
  const connectTimeoutMs = bounded('connectTimeoutMs', options.connectTimeoutMs, 10_000, {
    min: 1,
    max: MAX_TIMER_MS,
    integer: true,
  });
  const statementTimeoutMs =
    options.statementTimeoutMs === undefined
      ? undefined
      : bounded('statementTimeoutMs', options.statementTimeoutMs, 0, {
          min: 0,
          max: MAX_TIMER_MS,
          integer: true,
        });
  // Only `false` turns durable commits off: `'false'` or `0` would keep them without a word.
  if (options.durableCommits !== undefined && typeof options.durableCommits !== 'boolean')
    throw new InvalidArgument(
      `durableCommits must be true or false, not ${JSON.stringify(options.durableCommits) ?? typeof options.durableCommits}`,
    );
  if (options.pooler !== undefined && options.pooler !== 'transaction')
    throw new InvalidArgument(`pooler is 'transaction' or left out, not ${JSON.stringify(options.pooler)}`);
  const pooled = options.pooler === 'transaction';
  if (options.listenUrl !== undefined && (typeof options.listenUrl !== 'string' || options.listenUrl === ''))
    throw new InvalidArgument('listenUrl must be a non-empty connection URL');
  // A startup parameter, which PgBouncer refuses (or, listed in ignore_startup_parameters, drops).
  if (pooled && statementTimeoutMs !== undefined)
    throw new InvalidArgument(
      'statementTimeoutMs cannot reach the server through a transaction pooler: set statement_timeout on the role (ALTER ROLE … SET statement_timeout = …)',
    );
  let pool = options.pool;
  const ownsPool = pool === undefined;
  if (!pool) {
    if (!options.connectionString)
      throw new InvalidArgument('postgresStore needs a connectionString or a pool');
    pool = new (pgDriver().Pool)({
      connectionString: options.connectionString,
      max: poolSize,
      connectionTimeoutMillis: connectTimeoutMs,
      keepAlive: true,
      application_name: 'sluice',
      ...(statementTimeoutMs !== undefined ? { statement_timeout: statementTimeoutMs } : {}),
    });
    // An idle connection the server closed (restart, admin kill) is dropped by the pool; the
    // next checkout opens a new one. Without a listener the event would crash the process.
    pool.on('error', () => {});
    const setup = options.durableCommits === false ? READ_COMMITTED : `${READ_COMMITTED}; ${DURABLE_COMMITS}`;
    // One simple query, queued on the new connection before the query it was opened for. A
    // failure here means the connection is broken, which that query will report. Not behind a
    // transaction pooler: the settings would land on whichever server connection ran them, for
    // the next client that gets it, and on none of the others.
    if (!pooled)
      pool.on('connect', (client) => {
        client.query(setup).catch(() => {});
      });
  }
  const thePool = pool;
  const cache = new Map<string, Prepared>();
  const prepared = (sql: string): Prepared => {
    let p = cache.get(sql);
    if (!p) {
      const text = sql.replaceAll('{s}', quoted);
      p = { name: `sluice_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`, text };
      cache.set(sql, p);
    }
    return p;
  };
  /**
   * Statements are named prepared statements: parsed once per connection, and after five runs
   * PostgreSQL may keep a generic plan for the connection's lifetime, costed with the statistics
   * of that moment. Right for the hot path's calls (key lookups, or functions that plan their own
   * statements, migration 6); wrong for a scan whose best plan depends on how big the table has
   * grown since, such as maintenance's range reads: a plan made on an empty table stays a full
   * scan. `planEach` sends such statements unnamed, planned for their parameters on every run.
   * Behind a transaction pooler every statement is sent so: a name prepared on one server
   * connection means nothing on the next the pooler hands out, and the same name prepared twice
   * on one is an error.
   */
  const run =
    (client: pg.ClientBase, planEach = false): Query =>
    async <R>(sql: string, values: unknown[] = []): Promise<R[]> => {
      const p = prepared(sql);
      const res = await client.query(
        planEach || pooled ? { text: p.text, values } : { name: p.name, text: p.text, values },
      );
      return res.rows as R[];
    };

  /** Set by `close()`: see store/closed.ts. */
  let closed = false;

  /**
   * A connection the server refuses for want of room (53300: its `max_connections`, or the role's
   * `CONNECTION LIMIT`, is reached) is waited for, as the pool waits for one of its own when all
   * are in use: this pool's or another process's will be released. Until `connectTimeoutMs` has
   * passed since the call asked, with a jittered back-off between tries.
   */
  const checkout = async (): Promise<pg.PoolClient> => {
    // Where the store's statements get their connection. A pool passed in would still hand one
    // out after `close()`, and an ended pool's refusal reads as a lost connection (retryable).
    if (closed) throw storeClosed('PostgreSQL');
    const deadline = performance.now() + connectTimeoutMs;
    let client: pg.PoolClient;
    for (let pause = FULL_FIRST_PAUSE_MS; ; pause = Math.min(pause * 2, FULL_MAX_PAUSE_MS)) {
      try {
        client = await thePool.connect();
      } catch (error) {
        // Waiting for a connection when the store closed: its pool ended under the wait.
        if (closed) throw storeClosed('PostgreSQL', error);
        const code = (error as { code?: unknown } | null)?.code;
        const wait = pause * (0.5 + Math.random() / 2);
        if (code !== '53300' || performance.now() + wait > deadline) throw classifyPgError(error);
        await new Promise((resolve) => setTimeout(resolve, wait));
        continue;
      }
      // Handed a connection after the store closed, as a pool passed in still does: nothing of
      // the call may reach the database.
      if (closed) {
        client.release();
        throw storeClosed('PostgreSQL');
      }
      break;
    }
    if (!guarded.has(client)) {
      // A checked-out connection that dies emits 'error' besides failing its query.
      client.on('error', () => {});
      guarded.add(client);
    }
    return client;
  };

  const retrying = async <T>(attempt: () => Promise<T>): Promise<T> => {
    for (let i = 0; ; i++) {
      try {
        return await attempt();
      } catch (error) {
        const classified = classifyPgError(error);
        if (!(isStoreError(classified) && classified.reason === 'serialization') || i >= RETRIES - 1) {
          throw classified;
        }
        // Nothing was committed; a short jittered pause lets the other transaction finish.
        await new Promise((r) => setTimeout(r, Math.random() * 5 * 2 ** i));
      }
    }
  };

  /**
   * Returns a client to the pool after a failed statement. A SQL error the server sent leaves
   * the connection usable; anything else (a lost socket, a protocol error) may not, and a
   * prepared statement gone stale (a migration changed a table under it: 0A000, 26000) would
   * fail again on that connection, so such a connection is destroyed, not handed on. So is one
   * that found its server read-only (25006): after a switchover the old primary takes no more
   * writes, and a new connection reaches the new one where DNS or a proxy now points.
   */
  const releaseAfter = (client: pg.PoolClient, error: unknown) => {
    const code = (error as { code?: unknown } | null)?.code;
    const usable =
      typeof code === 'string' &&
      /^[0-9A-Z]{5}$/.test(code) &&
      !code.startsWith('08') &&
      !code.startsWith('57P') &&
      code !== '0A000' &&
      code !== '26000' &&
      code !== '25006';
    client.release(usable ? undefined : error instanceof Error ? error : new Error(String(error)));
  };

  const single = <R>(sql: string, values: unknown[] = [], planEach: boolean) =>
    retrying(async () => {
      const client = await checkout();
      try {
        const rows = await run(client, planEach)<R>(sql, values);
        client.release();
        return rows;
      } catch (error) {
        releaseAfter(client, error);
        throw error;
      }
    });

  return {
    pool: thePool,
    ownsPool,
    schema,
    quoted,
    channel: `sluice_${schema}`,
    notify: options.notify ?? true,
    pooled,
    listenUrl: options.listenUrl,
    durableCommits: options.durableCommits !== false,
    clock: options.clock,
    get closed() {
      return closed;
    },
    markClosed() {
      closed = true;
    },
    now: () => (options.clock ? options.clock.now() : null),
    query: (sql, values) => single(sql, values, false),
    queryEach: (sql, values) => single(sql, values, true),
    tx: <T>(fn: (query: Query) => Promise<T>, txOptions: { planEach?: boolean } = {}) =>
      retrying(async () => {
        const client = await checkout();
        try {
          await client.query('BEGIN ISOLATION LEVEL READ COMMITTED');
          const out = await fn(run(client, txOptions.planEach));
          await client.query('COMMIT');
          client.release();
          return out;
        } catch (error) {
          try {
            // After a clean rollback the connection is as good as new.
            await client.query('ROLLBACK');
            client.release();
          } catch {
            client.release(true);
          }
          throw error;
        }
      }),
    on: (client) => {
      const q = run(client);
      return async (sql, values) => {
        if (closed) throw storeClosed('PostgreSQL');
        try {
          return await q(sql, values);
        } catch (error) {
          const classified = classifyPgError(error);
          // The caller's connection, not the store's: a schema it cannot find is most often a
          // client on another database (the application's own), which no migrate or retry fixes.
          if (isStoreError(classified) && classified.reason === 'not-migrated')
            throw new InvalidArgument(
              `tx: the connection given does not reach the store's schema "${schema}": it must be a ` +
                `client of the store's database, inside a transaction (${classified.message})`,
            );
          throw classified;
        }
      };
    },
  };
}
