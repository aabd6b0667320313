/**
 * @module runtime/helpers/pg-query
 * `ctx.pgQuery`: one PostgreSQL statement on the caller's `pg` pool or client, bounded by the
 * attempt's deadline twice over.
 *
 * 1. On the server, `statement_timeout` = the time the attempt has left (or the connection's own
 *    timeout if that is tighter; never 0, which would mean "none"). It holds even if this worker
 *    freezes or dies mid-query.
 * 2. In the worker, the call's signal (attempt signal, time left, end of the attempt, the
 *    caller's) sends a protocol cancel request (pg-cancel.ts) the moment it fires, and the call
 *    rejects with its typed reason once the statement has stopped on the server (its 57014 error
 *    came back) or, if the cancel got no answer, after a grace (`CANCEL_GRACE_MS`).
 *
 * How the timeout is set — always `SET LOCAL` (`set_config(…, true)`), inside a transaction:
 * - **A pool**: a client of its own is checked out, and the statement runs as
 *   `BEGIN; SET LOCAL statement_timeout; <statement>; COMMIT`. The setting dies with the
 *   transaction, whatever happens: no later user of that pooled connection inherits it. (A
 *   session `SET` + `RESET` would leak the timeout into the pool whenever the `RESET` does not
 *   run, and behind a transaction-pooling proxy such as PgBouncer the `SET`, the statement and
 *   the `RESET` may each land on a different server connection.) After an abort the connection is
 *   destroyed, not returned: a cancel request that arrives late would hit its next user.
 * - **A client outside a transaction** (`getTransactionStatus() === 'I'`): the same, on it.
 * - **A client inside the caller's transaction**: `SET LOCAL` in that transaction, put back to the
 *   previous value after the statement succeeds (if it fails, the transaction is aborted and the
 *   caller's `ROLLBACK` discards the setting). The transaction's boundaries stay the caller's.
 *
 * The cost: three round trips more than a bare `query` (`BEGIN`, the setting, `COMMIT`). And a
 * statement that cannot run in a transaction block (`VACUUM`, `CREATE INDEX CONCURRENTLY`) cannot
 * go through this helper. `pg` is never imported at run time: any object with the methods below
 * will do (node-postgres `Pool`, `Client`, `PoolClient`); cancellation needs the JS client.
 */
import { InvalidArgument } from '../../core/errors/index.js';
import { sendCancelRequest } from './pg-cancel.js';
import { type AttemptScope, waitAtMost } from './scope.js';

/** Grace for a cancelled statement to stop, and for a cancel request or a `ROLLBACK` to get through. */
export const CANCEL_GRACE_MS = 2000;
/** `statement_timeout` is a 32-bit count of milliseconds. */
const MAX_TIMEOUT_MS = 2_147_483_647;

/** The part of a node-postgres query result this helper promises. */
export interface PgQueryResult<R> {
  rows: R[];
  rowCount: number | null;
  command: string;
}

/** A node-postgres `Client` (or any client with the same `query`). */
export interface PgClientLike {
  query(config: { text: string; values?: unknown[] }): Promise<PgQueryResult<unknown>>;
  /** `'I'` idle, `'T'` in a transaction, `'E'` in a failed transaction (node-postgres ≥ 8.16). */
  getTransactionStatus?(): string | null;
}

/** A node-postgres `Pool`. */
export interface PgPoolLike {
  connect(): Promise<PgClientLike & { release(destroy?: Error | boolean): void }>;
  /** Present on a pool (tells it from a client, which also has `connect`). */
  totalCount: number;
}

type Pooled = Awaited<ReturnType<PgPoolLike['connect']>>;

const isPool = (db: PgPoolLike | PgClientLike): db is PgPoolLike =>
  typeof (db as PgPoolLike).totalCount === 'number' && typeof (db as PgPoolLike).connect === 'function';

/**
 * Reads the session's timeout and sets the tighter of it and $1 for the rest of the transaction.
 * `pg_settings` is read before `set_config` runs (the scan comes first), so `previous` is the
 * value to restore.
 */
const SET_TIMEOUT = `SELECT set_config('statement_timeout', t.ms::text, true) AS applied, t.previous
  FROM (SELECT setting AS previous,
               CASE WHEN setting::bigint > 0 AND setting::bigint < $1::bigint THEN setting::bigint
                    ELSE $1::bigint END AS ms
          FROM pg_settings WHERE name = 'statement_timeout') AS t`;
const RESTORE_TIMEOUT = `SELECT set_config('statement_timeout', $1, true)`;

export async function pgQuery<R>(
  scope: AttemptScope,
  db: PgPoolLike | PgClientLike,
  text: string,
  values?: readonly unknown[],
): Promise<PgQueryResult<R>> {
  if (typeof text !== 'string' || text.trim() === '')
    throw new InvalidArgument('pgQuery: the statement must be a non-empty string');
  const bound = scope.bind();
  if (bound.signal.aborted) throw bound.reason();
  const pooled = isPool(db);
  const client: PgClientLike = pooled ? await checkout(db, bound.signal, bound.reason) : db;
  // Our own transaction unless the caller is in one: we never end a transaction we did not begin.
  const ownTransaction = pooled || (client.getTransactionStatus?.() ?? 'I') === 'I';
  let done!: () => void;
  const settled = new Promise<void>((resolve) => {
    done = resolve;
  });
  const untrack = scope.track({ stop: () => settled });

  const run = (config: { text: string; values?: unknown[] }) => underSignal(client, config, bound.signal);
  let inTransaction = false;
  let reusable = true;
  try {
    if (ownTransaction) {
      await run({ text: 'BEGIN' });
      inTransaction = true;
    }
    // What is left of the attempt now, after the wait for a pooled connection and the BEGIN:
    // counted before them, the server would let the statement run past the attempt's end.
    const budgetMs = Math.min(MAX_TIMEOUT_MS, Math.max(1, Math.ceil(scope.remainingMs())));
    const { rows } = await run({ text: SET_TIMEOUT, values: [budgetMs] });
    const previous = (rows[0] as { previous?: string } | undefined)?.previous ?? '0';
    const result = await run({ text, values: values === undefined ? undefined : [...values] });
    if (ownTransaction) await run({ text: 'COMMIT' });
    else await run({ text: RESTORE_TIMEOUT, values: [previous] });
    inTransaction = false;
    return result as PgQueryResult<R>;
  } catch (error) {
    const aborted = bound.signal.aborted;
    // Aborted, a pooled connection may still receive our cancel request late: it is destroyed
    // (the server then rolls back) rather than handed to its next user.
    if (aborted && pooled) reusable = false;
    else if (inTransaction && ownTransaction) {
      const rollback = client.query({ text: 'ROLLBACK' });
      const ended = await waitAtMost(rollback, CANCEL_GRACE_MS);
      const failed =
        !ended ||
        (await rollback.then(
          () => false,
          () => true,
        ));
      if (failed) {
        reusable = false;
        scope.log.warn(
          pooled
            ? 'pgQuery: ROLLBACK did not complete; the connection is destroyed'
            : 'pgQuery: ROLLBACK did not complete; the client may still be in a transaction',
        );
      }
    }
    if (aborted) throw bound.reason();
    // The server's clock ran out first (ours fires at the same moment): the same typed reason.
    if ((error as { code?: unknown } | null)?.code === '57014' && scope.remainingMs() <= 0)
      throw scope.timeUp();
    throw error;
  } finally {
    if (pooled) (client as Pooled).release(reusable ? undefined : true);
    untrack();
    done();
  }
}

/** A pool checkout that gives up when the signal fires; a client that arrives later goes back. */
function checkout(pool: PgPoolLike, signal: AbortSignal, reason: () => unknown): Promise<Pooled> {
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(reason());
    signal.addEventListener('abort', onAbort, { once: true });
    pool.connect().then(
      (client) => {
        signal.removeEventListener('abort', onAbort);
        if (signal.aborted) client.release();
        else resolve(client);
      },
      (error: unknown) => {
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}

/**
 * One statement that stops when the signal fires: a cancel request goes to the server, and the
 * call settles once the statement has ended there (or after the grace). Rejects with the
 * statement's own outcome if the signal did not fire; with `signal.reason` (overwritten by the
 * caller with the typed reason) otherwise.
 */
function underSignal(
  client: PgClientLike,
  config: { text: string; values?: unknown[] },
  signal: AbortSignal,
): Promise<PgQueryResult<unknown>> {
  if (signal.aborted) return Promise.reject(signal.reason);
  const pending = client.query(config);
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      void sendCancelRequest(client, CANCEL_GRACE_MS)
        .then(() => waitAtMost(pending, CANCEL_GRACE_MS))
        .then(() => reject(signal.reason));
    };
    signal.addEventListener('abort', onAbort, { once: true });
    pending.then(
      (result) => {
        if (signal.aborted) return;
        signal.removeEventListener('abort', onAbort);
        resolve(result);
      },
      (error: unknown) => {
        if (signal.aborted) return;
        signal.removeEventListener('abort', onAbort);
        reject(error);
      },
    );
  });
}
