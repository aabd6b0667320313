/**
 * @module core/errors/store-errors
 * Store failures classified into a closed set, each knowing whether a retry may succeed. Each
 * driver maps its native errors here (SQLITE_BUSY, PostgreSQL SQLSTATE classes 08, 40001,
 * 40P01, 57014…), so the engine never inspects a driver's error.
 */
import { isSluiceError, SluiceError } from './sluice-error.js';

export type StoreErrorReason =
  | 'unavailable'
  | 'busy'
  | 'serialization'
  | 'unique-violation'
  | 'statement-timeout'
  | 'schema-newer'
  | 'not-migrated'
  | 'closed'
  | 'unknown';

const RETRYABLE: Record<StoreErrorReason, boolean> = {
  unavailable: true,
  busy: true,
  serialization: true,
  'unique-violation': false,
  'statement-timeout': true,
  'schema-newer': false,
  // Another process may be migrating it now (`sluice serve` does at start).
  'not-migrated': true,
  // Closed by this process: it never opens again, and a caller that retried it would loop for ever.
  closed: false,
  unknown: false,
};

/** The codes of Sluice's store errors (`store-<reason>`): a handler's own code may begin `store-` too. */
export const STORE_ERROR_CODES: ReadonlySet<string> = new Set(
  Object.keys(RETRYABLE).map((reason) => `store-${reason}`),
);

/** What a `not-migrated` store error says to do. */
export const MIGRATE_HINT =
  'the store is not migrated to this build: run `sluice migrate`, or `await sluice.migrate()` at start';

export class StoreError extends SluiceError {
  readonly reason: StoreErrorReason;
  constructor(reason: StoreErrorReason, message: string, options: { cause?: unknown } = {}) {
    super(`store-${reason}`, message, { cause: options.cause, retryable: RETRYABLE[reason] });
    this.reason = reason;
  }
}
export function isStoreError(value: unknown): value is StoreError {
  try {
    return isSluiceError(value) && typeof value.code === 'string' && value.code.startsWith('store-');
  } catch {
    // Asked of anything a failure path caught: a getter that throws is no store error.
    return false;
  }
}
export const isStoreUnavailable = (e: unknown): e is StoreError =>
  isStoreError(e) && e.reason === 'unavailable';
/** A call made on a store after its `close()` (or `sluice.close()`): a mistake, never retried. */
export const isStoreClosed = (e: unknown): e is StoreError => isStoreError(e) && e.reason === 'closed';
