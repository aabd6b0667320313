/**
 * @module store/sqlite/busy
 * Waiting for another connection's write lock without stopping the process. better-sqlite3 is
 * synchronous: SQLite's own wait for a lock (`busy_timeout`) sleeps in the thread that runs
 * everything else, so a lock held for seconds elsewhere froze the event loop for as long (no
 * heartbeat beat, no HTTP request answered, no timer fired; a lock the same process's code held
 * across an `await` could not even be let go until the wait gave up). SQLite waits only a few
 * milliseconds here; past them the call is tried again from a timer, until `busyTimeoutMs` has
 * passed since its first try, and fails `store-busy` then, as before.
 *
 * Trying a call again whole is safe: a busy SQLite write fails at its `BEGIN IMMEDIATE`, or rolls
 * its transaction back; a busy read changed nothing.
 */
import { isStoreError } from '../../core/errors/index.js';

/** How long SQLite itself waits for a lock, blocking the thread, before a try fails. */
export const BUSY_SPIN_MS = 5;
/** The longest pause between two tries. */
const PAUSE_MAX_MS = 25;

const isBusy = (error: unknown) => isStoreError(error) && error.reason === 'busy';

/**
 * `fn()`, tried again while it fails `store-busy` until `busyTimeoutMs` from now has passed; the
 * first try runs at once, in this turn.
 */
export function whileBusy<T>(fn: () => T, busyTimeoutMs: number): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (error) {
    if (!isBusy(error) || busyTimeoutMs <= BUSY_SPIN_MS) return Promise.reject(error);
    return again(fn, performance.now() + busyTimeoutMs - BUSY_SPIN_MS);
  }
}

async function again<T>(fn: () => T, giveUpAt: number): Promise<T> {
  for (let n = 0; ; n++) {
    const pause = Math.min(PAUSE_MAX_MS, 2 ** n, Math.max(0, giveUpAt - performance.now()));
    await new Promise((resolve) => setTimeout(resolve, pause));
    try {
      return fn();
    } catch (error) {
      if (!isBusy(error) || performance.now() >= giveUpAt) throw error;
    }
  }
}
