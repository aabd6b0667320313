/**
 * @module store/sqlite/busy
 * Waiting for another connection's write lock without stopping the process. better-sqlite3 is
 * synchronous: SQLite's own wait for a lock (`busy_timeout`) sleeps in the thread that runs
 * everything else, so a lock held for seconds elsewhere froze the event loop for as long (no
 * heartbeat beat, no HTTP request answered, no timer fired; a lock the same process's code held
 * across an `await` could not even be let go until the wait gave up). SQLite waits 50 ms at most
 * here, which covers the queue of other processes' ordinary transactions; past them the call is
 * tried again from a timer, until `busyTimeoutMs` has passed since its first try, and fails
 * `store-busy` then, as before.
 *
 * One call of the process waits on the timer at a time: the others that find the lock taken
 * meanwhile queue behind it and try in turn once it got through. Each trying on its own timer,
 * they took the lock from one another and from the other processes in a herd, each failed try
 * spending its wait in the thread.
 *
 * Trying a call again whole is safe: a busy SQLite write fails at its `BEGIN IMMEDIATE`, or rolls
 * its transaction back; a busy read changed nothing.
 */
import { isStoreError } from '../../core/errors/index.js';

/**
 * How long SQLite itself waits for a lock, blocking the thread, before a try fails. Long enough
 * for the queue of a busy file's ordinary transactions: three worker processes draining one file
 * made 0.94× the rate of a wait of 5 s in the thread at 5 ms, 0.85× at 20 ms and 1.0× at 50 ms,
 * and spent more CPU an operation below it (bench `scale.js --store sqlite --processes 3`).
 */
export const BUSY_SPIN_MS = 50;
/** The longest pause between two tries. */
const PAUSE_MAX_MS = 25;

const isBusy = (error: unknown) => isStoreError(error) && error.reason === 'busy';

/** The calls of one connection waiting for the lock, in the order they found it taken. */
export class BusyQueue {
  private tail: Promise<unknown> = Promise.resolve();
  private waiting = 0;

  constructor(private readonly busyTimeoutMs: number) {}

  /**
   * `fn()`, tried again while it fails `store-busy` until `busyTimeoutMs` from its first try has
   * passed; the first try runs at once, in this turn.
   */
  run<T>(fn: () => T): Promise<T> {
    try {
      return Promise.resolve(fn());
    } catch (error) {
      if (!isBusy(error) || this.busyTimeoutMs <= BUSY_SPIN_MS) return Promise.reject(error);
      const giveUpAt = performance.now() + this.busyTimeoutMs - BUSY_SPIN_MS;
      // Behind the calls already waiting: the first of them tries on the timer, the others in turn.
      const ahead = this.waiting > 0 ? this.tail : undefined;
      this.waiting++;
      const turn = this.again(fn, giveUpAt, ahead).finally(() => {
        this.waiting--;
      });
      this.tail = turn.catch(() => {});
      return turn;
    }
  }

  private async again<T>(fn: () => T, giveUpAt: number, ahead: Promise<unknown> | undefined): Promise<T> {
    if (ahead) {
      await ahead;
      // The one ahead got through (or gave up): the lock is likely free now, so try at once.
      try {
        return fn();
      } catch (error) {
        if (!isBusy(error) || performance.now() >= giveUpAt) throw error;
      }
    }
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
}
