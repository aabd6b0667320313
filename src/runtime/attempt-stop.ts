/**
 * @module runtime/attempt-stop
 * An attempt's stop, whoever stops it, and the wait that gives a handler that ignores it a grace.
 */
import { engineMade } from '../core/errors/engine-made.js';
import { AttemptEnded } from '../core/errors/index.js';

/**
 * What stops an attempt. Whoever stops it (its timer, a lost lease, a cancel, the worker's
 * shutdown, a limit) calls `abort`; the reason is kept, the signal's listeners run, and then
 * `afterAbort`: the attempt's own wait hears of it without a listener on the signal, which Node
 * would add and remove for every attempt.
 *
 * The `AbortSignal` itself (`ctx.signal`, the helpers', an effect's call's) is made on first
 * read, already fired if the attempt has been stopped by then: a controller and its signal cost
 * Node 20 about 3 µs, a measurable share of a short attempt whose handler never reads it
 * (docs/benchmarks.md). Its `reason` is the one `abort` was given, whenever it is made.
 */
export class AttemptStop {
  #controller: AbortController | undefined;
  #aborted = false;
  #reason: unknown;
  /** Ended with nothing holding the signal: the `AttemptEnded` reason is made only if asked for. */
  #endedUnread = false;
  afterAbort: (() => void) | undefined;

  get aborted(): boolean {
    return this.#aborted || this.#endedUnread;
  }

  /** Why the attempt was stopped; undefined while it runs. */
  get reason(): unknown {
    this.#settleEnd();
    return this.#reason;
  }

  get signal(): AbortSignal {
    if (!this.#controller) {
      this.#settleEnd();
      this.#controller = new AbortController();
      if (this.#aborted) this.#controller.abort(this.#reason);
    }
    return this.#controller.signal;
  }

  /**
   * The first call wins; later ones change nothing, as with `AbortController`. Only the engine
   * stops an attempt: its reason is the engine's own, and keeps its meaning when the handler
   * throws it (core/errors/engine-made.ts).
   */
  abort(reason: unknown): void {
    if (this.aborted) return;
    this.#aborted = true;
    this.#reason = engineMade(reason);
    this.#controller?.abort(reason);
    this.afterAbort?.();
  }

  /**
   * The attempt is over: whatever still holds its signal (an effect's call the handler did not
   * await, a callback that runs later) is stopped with `AttemptEnded`, and nothing new may start.
   * A stop already fired keeps its reason. Most attempts end with their signal never read: for
   * them the error is made only if something asks later (an `Error` costs its stack trace).
   */
  end(): void {
    if (this.aborted) return;
    if (this.#controller) this.abort(new AttemptEnded());
    else this.#endedUnread = true;
  }

  throwIfAborted(): void {
    this.#settleEnd();
    if (this.#aborted) throw this.#reason;
  }

  #settleEnd(): void {
    if (!this.#endedUnread) return;
    this.#endedUnread = false;
    this.#aborted = true;
    this.#reason = engineMade(new AttemptEnded());
  }
}

/**
 * Waits for the handler; once the attempt is aborted, waits at most `graceMs` more. A handler that
 * ignores its signal then runs on unobserved, but its slot is freed and its writes are refused.
 */
export function untilAbortedPlusGrace<T>(work: Promise<T>, stop: AttemptStop, graceMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const onAbort = () => {
      timer = setTimeout(() => reject(stop.reason), graceMs);
    };
    if (stop.aborted) onAbort();
    else stop.afterAbort = onAbort;
    const settle = () => {
      clearTimeout(timer);
      stop.afterAbort = undefined;
    };
    work.then(
      (v) => {
        settle();
        resolve(v);
      },
      (e) => {
        settle();
        reject(e);
      },
    );
  });
}
