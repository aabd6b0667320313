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
import type { WakeInterest } from '../store/store.js';

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
