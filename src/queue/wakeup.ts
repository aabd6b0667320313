/**
 * @module queue/wakeup
 * Wakes idle claim loops. A local submit wakes its class at once; other processes' submits are
 * found by polling (SQLite) or LISTEN/NOTIFY (PostgreSQL). A wake that arrives while the loop
 * is busy is remembered, so it is never lost between a claim and the next wait.
 */

export class Wakeup {
  private readonly pending = new Set<string>();
  private readonly waiters = new Map<string, Set<() => void>>();

  notify(cls: string): void {
    this.pending.add(cls);
    const set = this.waiters.get(cls);
    if (set) for (const w of [...set]) w();
  }

  notifyAll(): void {
    for (const cls of this.waiters.keys()) this.notify(cls);
  }

  /** Forget a remembered wake: called right before a claim, which will see the new work. */
  consume(cls: string): void {
    this.pending.delete(cls);
  }

  /** Resolves on a wake for `cls` (or one remembered since `consume`), or after `timeoutMs`. */
  wait(cls: string, timeoutMs: number): Promise<void> {
    if (this.pending.has(cls)) return Promise.resolve();
    return new Promise((resolve) => {
      let set = this.waiters.get(cls);
      if (!set) {
        set = new Set();
        this.waiters.set(cls, set);
      }
      const done = () => {
        clearTimeout(timer);
        set.delete(done);
        resolve();
      };
      const timer = setTimeout(done, timeoutMs);
      set.add(done);
    });
  }
}
