/**
 * @module store/closed
 * The refusal of every call made on a store after its `close()`. A closed store never opens
 * again, so the error is not retryable: a caller that retries retryable store errors (an
 * application's loop, a worker writing an attempt's end) stops at once instead of trying for
 * ever. Each driver checks a flag before anything else, which costs the hot paths one boolean;
 * a call already waiting when the store closed (for SQLite's write lock, for a pooled
 * PostgreSQL connection) fails the same way.
 */
import { StoreError } from '../core/errors/index.js';

export function storeClosed(driver: 'SQLite' | 'PostgreSQL', cause?: unknown): StoreError {
  return new StoreError(
    'closed',
    `${driver}: the store was closed by this process (store.close() or sluice.close()); ` +
      'a closed store stays closed: open a new one',
    cause === undefined ? {} : { cause },
  );
}
