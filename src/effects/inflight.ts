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
 * operation already ended, or resent by the next attempt while still out.
 */
import { AttemptEnded } from '../core/errors/index.js';

export class InflightEffects {
  /** Made by the first effect: most attempts of a plain kind run none. */
  #running: Map<string, Promise<unknown>> | undefined;
  #closed = false;

  /**
   * Runs the effect `name`, or joins the run of it already under way in this attempt; after
   * `close`, a new one is refused with `AttemptEnded` before anything is written or sent.
   */
  run<T>(name: string, start: () => Promise<T>): Promise<T> {
    if (!this.#running) this.#running = new Map();
    const running = this.#running;
    const under = running.get(name);
    if (under) return under as Promise<T>;
    if (this.#closed) return Promise.reject(new AttemptEnded());
    const run = start();
    running.set(name, run);
    const settled = () => {
      if (running.get(name) === run) running.delete(name);
    };
    run.then(settled, settled);
    return run;
  }

  /** The handler has settled: from now on, no new effect starts. */
  close(): void {
    this.#closed = true;
  }

  /** How many effects are under way. */
  get size(): number {
    return this.#running?.size ?? 0;
  }

  /** Resolves once every effect under way now has settled, however; never rejects. */
  async settled(): Promise<void> {
    await Promise.allSettled([...(this.#running?.values() ?? [])]);
  }
}
