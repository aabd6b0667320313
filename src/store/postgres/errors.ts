/**
 * @module store/postgres/errors
 * Maps node-postgres failures to the store's closed set of reasons, so the engine never looks
 * at a SQLSTATE: a lost or refused connection, or a server that cannot take writes now (read-only
 * after a failover, out of disk or memory), is `unavailable` (the engine backs off and tries
 * again; the HTTP API answers 503 with `Retry-After`, not a 500 that says Sluice failed), a deadlock or serialization failure is `serialization` (the whole transaction rolled
 * back: safe to run again), a lock wait refused is `busy`, a cancelled statement is
 * `statement-timeout`, a duplicate key is `unique-violation`. Anything else is `unknown`.
 */
import { isSluiceError, MIGRATE_HINT, StoreError, type StoreErrorReason } from '../../core/errors/index.js';

/** Socket-level failures: the server is down, restarting, or unreachable. */
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/** Messages node-postgres and pg-pool raise without a code when a connection is gone or cannot be had. */
const CONNECTION_MESSAGES =
  /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Client was closed|Cannot use a pool after calling end|not queryable/i;

function reasonOfSqlState(code: string): StoreErrorReason | undefined {
  if (code.startsWith('08')) return 'unavailable';
  switch (code) {
    case '57P01': // admin_shutdown
    case '57P02': // crash_shutdown
    case '57P03': // cannot_connect_now (starting up, shutting down, in recovery)
    case '53300': // too_many_connections
    case '57P05': // idle_session_timeout (the server closed the connection)
    case '25P03': // idle_in_transaction_session_timeout (likewise)
    case '25006': // read_only_sql_transaction: a standby, after a failover or switchover
    case '3D000': // invalid_catalog_name: the database is not there (dropped, or not yet made)
    case '57P04': // database_dropped: dropped under a session
    case '28000': // invalid_authorization_specification (a login refused: pg_hba, a role)
    case '28P01': // invalid_password (credentials rotated under a running process)
    case '53100': // disk_full
    case '53200': // out_of_memory
      return 'unavailable';
    case '40001': // serialization_failure
    case '40P01': // deadlock_detected
      return 'serialization';
    case '55P03': // lock_not_available
      return 'busy';
    case '57014': // query_canceled (statement_timeout)
      return 'statement-timeout';
    case '23505': // unique_violation
      return 'unique-violation';
    // Only the store's own statements come here, each naming its schema's tables and functions:
    // one missing is a schema never migrated, or not to this build.
    case '3F000': // invalid_schema_name
    case '42P01': // undefined_table
    case '42883': // undefined_function
    case '42703': // undefined_column
      return 'not-migrated';
    default:
      return undefined;
  }
}

/**
 * "Database is not currently accepting connections" (`ALTER DATABASE … ALLOW_CONNECTIONS false`):
 * a 55000, which as an ERROR is a statement's unmet precondition, refused at login as a FATAL.
 * Told apart by the routine that refuses the login, or by the severity, which a server set to
 * another language translates (`FATALE`); not by FATAL alone, which is also what a login with a
 * setting the server refuses (`-c statement_timeout=abc`) gets: a mistake to show, not to retry.
 */
function closedDatabase(error: unknown, code: string): boolean {
  if (code !== '55000') return false;
  const { severity, routine } = error as { severity?: unknown; routine?: unknown };
  return routine === 'CheckMyDatabase' || severity === 'FATAL';
}

function networkCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && NETWORK_CODES.has(code)) return code;
  // Node reports a failed connection to every address of a host as an AggregateError.
  const inner = (error as { errors?: unknown } | null)?.errors;
  if (Array.isArray(inner)) for (const e of inner) if (networkCode(e)) return networkCode(e);
  return undefined;
}

/** Maps a node-postgres error to a `StoreError`; passes Sluice's own errors through. */
export function classifyPgError(error: unknown): unknown {
  if (isSluiceError(error)) return error;
  const message = error instanceof Error ? error.message : String(error);
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    const reason = reasonOfSqlState(code) ?? (closedDatabase(error, code) ? 'unavailable' : 'unknown');
    const hint = reason === 'not-migrated' ? ` (${MIGRATE_HINT})` : '';
    return new StoreError(reason, `PostgreSQL ${code}: ${message}${hint}`, { cause: error });
  }
  const net = networkCode(error);
  if (net)
    return new StoreError('unavailable', `PostgreSQL unreachable (${net}): ${message}`, { cause: error });
  if (CONNECTION_MESSAGES.test(message)) {
    return new StoreError('unavailable', `PostgreSQL connection lost: ${message}`, { cause: error });
  }
  return error;
}
