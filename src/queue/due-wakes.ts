/**
 * @module queue/due-wakes
 * Wakes a class's claim loop when an operation this worker put back in the queue for later (a
 * retry after its back-off, a deferral by a budget) comes due within a minute, instead of at the
 * loop's next poll: with the default poll (500 ms), a retry backed off 100 ms otherwise started
 * some 250 ms late on average, and the back-off a kind declares was not the one it got. Only this
 * worker's own: the workers of other processes wake for theirs, and whichever worker is idle then
 * claims it.
 *
 * The due instant is counted from when the end was reported, after its commit stamped the
 * operation's `run_after`, so the wake comes at or just after it on one clock. With the store on
 * another host, a skew between the clocks can make the claim early and find nothing; the poll
 * then finds it, as before.
 */

/** More due instants than this per class are left to the poll. */
const MAX_PENDING = 1024;
/**
 * Instants further away than this are left to the poll too: one poll late is nothing beside such
 * a wait, and a timer cannot hold a wait past 2^31 − 1 ms (about 25 days; a budget's window may
 * be a month), which Node turns into 1 ms, again and again.
 */
const HORIZON_MS = 60_000;

export class DueWakes {
  /** Per class, the due instants (`performance.now()` time), earliest first. */
  private readonly due = new Map<string, number[]>();
  private readonly timers = new Map<string, NodeJS.Timeout>();

  constructor(private readonly wake: (cls: string) => void) {}

  add(cls: string, inMs: number): void {
    if (!(inMs <= HORIZON_MS)) return;
    const at = performance.now() + Math.max(0, inMs);
    let list = this.due.get(cls);
    if (!list) {
      list = [];
      this.due.set(cls, list);
    }
    if (list.length >= MAX_PENDING) return;
    let i = list.length;
    while (i > 0 && list[i - 1]! > at) i--;
    list.splice(i, 0, at);
    if (i === 0) this.arm(cls);
  }

  /** How many wakes are pending (tests). */
  get pending(): number {
    let n = 0;
    for (const list of this.due.values()) n += list.length;
    return n;
  }

  stop(): void {
    for (const timer of this.timers.values()) clearTimeout(timer);
    this.timers.clear();
    this.due.clear();
  }

  private arm(cls: string): void {
    clearTimeout(this.timers.get(cls));
    const next = this.due.get(cls)?.[0];
    if (next === undefined) {
      this.timers.delete(cls);
      return;
    }
    const timer = setTimeout(() => this.fire(cls), Math.max(0, Math.ceil(next - performance.now())));
    timer.unref();
    this.timers.set(cls, timer);
  }

  private fire(cls: string): void {
    const list = this.due.get(cls);
    if (!list) return;
    // A timer may fire up to a millisecond before its instant: those count as due.
    const now = performance.now() + 1;
    let due = 0;
    while (list.length > 0 && list[0]! <= now) {
      list.shift();
      due++;
    }
    if (due > 0) this.wake(cls);
    this.arm(cls);
  }
}
