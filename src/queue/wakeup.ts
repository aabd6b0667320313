/**
 * @module queue/wakeup
 * Wakes idle claim loops. A local submit wakes its class at once; other processes' submits are
 * heard through the store: LISTEN/NOTIFY (PostgreSQL), a watch on the file (SQLite), else the
 * poll. A wake that arrives while the loop is busy is remembered, so it is never lost between a
 * claim and the next wait.
 *
 * Only for the classes this process's loops claim for: the store announces every class whose work
 * became ready, other processes' classes too (kinds this process does not define, classes that a
 * deploy retired), and a wake remembered for a class no loop consumes stayed for ever, one per
 * class the service ever heard of. A loop consumes before its first claim, so no wake for its
 * class goes unremembered from then on.
 */
import type { Logger } from 'pino';
import type { Store, WakeInterest } from '../store/store.js';

export class Wakeup {
  private readonly pending = new Set<string>();
  /** Classes a loop has consumed or waited for: the only ones whose wakes are remembered. */
  private readonly served = new Set<string>();
  private readonly waiters = new Map<string, Set<() => void>>();
  /** Loops waiting for work (not for a slot to free). */
  private forWork = 0;
  private readonly starts = new Set<() => void>();
  /**
   * Whether a loop waits for work now, so a wake would be acted on, and when that starts: a store
   * that has to look for other processes' work (SQLite) looks only then.
   */
  readonly interest: WakeInterest = {
    now: () => this.forWork > 0,
    onStart: (listener) => {
      this.starts.add(listener);
      return () => this.starts.delete(listener);
    },
  };

  /** How many wakes are remembered (tests). */
  get remembered(): number {
    return this.pending.size;
  }

  notify(cls: string): void {
    if (!this.served.has(cls)) return;
    this.pending.add(cls);
    const set = this.waiters.get(cls);
    if (set) for (const w of [...set]) w();
  }

  notifyAll(): void {
    for (const cls of this.waiters.keys()) this.notify(cls);
  }

  /** Forget a remembered wake: called right before a claim, which will see the new work. */
  consume(cls: string): void {
    this.served.add(cls);
    this.pending.delete(cls);
  }

  /**
   * Resolves on a wake for `cls` (or one remembered since `consume`), or after `timeoutMs`.
   * `forWork: false` for a loop that waits for a slot to free rather than for work.
   */
  wait(cls: string, timeoutMs: number, forWork = true): Promise<void> {
    this.served.add(cls);
    if (this.pending.has(cls)) return Promise.resolve();
    return new Promise((resolve) => {
      let set = this.waiters.get(cls);
      if (!set) {
        set = new Set();
        this.waiters.set(cls, set);
      }
      if (forWork && this.forWork++ === 0) for (const start of [...this.starts]) start();
      const done = () => {
        clearTimeout(timer);
        if (!set.delete(done)) return;
        if (forWork) this.forWork--;
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      set.add(done);
    });
  }
}

/**
 * Wakes `wakeup`'s loops on the work other processes make ready, where the store can tell
 * (PostgreSQL's LISTEN/NOTIFY, SQLite's watch on the file). `onAnnounced` says whether the
 * store's writes are heard now, so that a freed slot need not look for work itself: false while
 * the connection is lost, true again when it is back. Resolves to what stops listening, or to
 * undefined where the store cannot be listened to (polling only).
 */
export function listenForWork(
  store: Store,
  wakeup: Wakeup,
  log: Logger,
  onAnnounced: (announced: boolean) => void,
): Promise<(() => Promise<void>) | undefined> {
  if (!store.subscribe) return Promise.resolve(undefined);
  let deaf = false;
  return store
    .subscribe((cls) => wakeup.notify(cls), {
      onLost: (error) => {
        deaf = true;
        onAnnounced(false);
        log.warn({ err: error }, 'lost the wake-up connection; polling until it is back');
      },
      onReconnect: () => {
        if (deaf) log.info('listening for wake-ups again');
        deaf = false;
        onAnnounced(store.announcesWork === true);
        wakeup.notifyAll();
      },
      interest: wakeup.interest,
    })
    .then((stop) => {
      onAnnounced(!deaf && store.announcesWork === true);
      return stop;
    })
    .catch((error: unknown) => {
      log.warn({ err: error }, 'cannot listen for wake-ups; polling only');
      return undefined;
    });
}
