/**
 * @module effects/inflight
 * The effects of one attempt that have not settled yet.
 *
 * Two `ctx.effect` calls of the same name at once (`Promise.all`) are one effect: the second
 * joins the first and gets its result or its error. Left to run side by side, both would pass
 * step 1 before either had written, and the provider would be asked twice; the journal row
 * would then refuse the second mark and the attempt would take that for a lost lease.
 *
 * The attempt's end waits for them too. A handler that fails on one effect while another is
 * still waiting for its provider (`Promise.all` rejects at the first error) would otherwise write
 * its end with that effect `pending`: an operation parked for reconciliation, or retried, over a
 * call that may be about to succeed. Waiting, the end carries what the provider answered.
 *
 * Once the handler has returned or thrown, no new effect starts (`close`): what the end waits
 * for is then all there is. A callback the handler left behind (a timer) that started one while
 * the end waited would send a request nobody waited for, and leave it `pending` under an
 * operation already ended, or resent by the next attempt while still out. The refusal is told
 * (logged) and its promise marked handled: that callback seldom awaits it.
 *
 * An effect asked for by its own name from inside its own `call`, `lookup` or `record` would join
 * the run that waits for that callback, and wait for itself: refused (`invoke`).
 */

import { engineMade } from '../core/errors/engine-made.js';
import { AttemptEnded, InvalidArgument } from '../core/errors/index.js';

export interface InflightOptions {
  /**
   * Told of a new effect refused because the handler had settled (a callback it left behind): the
   * refusal rejects the promise `ctx.effect` returned, which that callback seldom awaits.
   */
  late?(name: string): void;
}

export class InflightEffects {
  /** Made by the first effect: most attempts of a plain kind run none. */
  #running: Map<string, Promise<unknown>> | undefined;
  #closed = false;
  /** The effects whose `call`, `lookup` or `record` is being invoked, synchronously, right now. */
  readonly #inside: string[] = [];
  readonly #options: InflightOptions;

  constructor(options: InflightOptions = {}) {
    this.#options = options;
  }

  /**
   * Runs the effect `name`, or joins the run of it already under way in this attempt; after
   * `close`, a new one is refused with `AttemptEnded` before anything is written or sent. Each
   * refusal's promise is marked handled: a callback that called and did not await it would
   * otherwise take the whole process down with an unhandled rejection. Whoever awaits it still
   * hears of the refusal.
   */
  run<T>(name: string, start: () => Promise<T>): Promise<T> {
    if (!this.#running) this.#running = new Map();
    const running = this.#running;
    const under = running.get(name);
    if (under) {
      // Asked for from inside its own callback, a join would wait for the run that waits for the
      // callback: until the attempt's timeout, every attempt. The same code asks again: a wrong
      // call, refused at once (dead, retry/classify.ts).
      if (this.#inside.includes(name))
        return refused(
          new InvalidArgument(
            `effect ${name} was asked for again from inside its own call, lookup or record: it would wait for itself; ` +
              'give the inner effect a name of its own',
          ),
        );
      return under as Promise<T>;
    }
    if (this.#closed) {
      this.#options.late?.(name);
      return refused(engineMade(new AttemptEnded()));
    }
    const run = start();
    running.set(name, run);
    const settled = () => {
      if (running.get(name) === run) running.delete(name);
    };
    run.then(settled, settled);
    return run;
  }

  /**
   * Invokes one of effect `name`'s callbacks. A `ctx.effect` of the same name made while it runs,
   * before its first `await`, comes from inside it, and is refused rather than joined. (One made
   * after that `await` cannot be told from another caller's join without tracking every promise
   * of the process, AsyncLocalStorage's cost on Node 20: it waits for itself, until the timeout.)
   */
  invoke<T>(name: string, callback: () => T): T {
    this.#inside.push(name);
    try {
      return callback();
    } finally {
      this.#inside.pop();
    }
  }

  /** The handler has settled: from now on, no new effect starts. */
  close(): void {
    this.#closed = true;
  }

  /** How many effects are under way. */
  get size(): number {
    return this.#running?.size ?? 0;
  }

  /** The names of the effects under way. */
  names(): string[] {
    return [...(this.#running?.keys() ?? [])];
  }

  /** Resolves once every effect under way now has settled, however; never rejects. */
  async settled(): Promise<void> {
    await Promise.allSettled([...(this.#running?.values() ?? [])]);
  }
}

/**
 * A refusal made before anything ran, marked handled: the callback a handler left behind that
 * asked seldom awaits it, and unhandled it would take the process down; whoever awaits it still
 * hears of it. (`run`, and `ctx.tempDir()` once the attempt is over.)
 */
export function refused(error: Error): Promise<never> {
  const rejected = Promise.reject(error);
  rejected.catch(() => {});
  return rejected;
}
