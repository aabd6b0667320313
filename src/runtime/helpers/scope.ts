/**
 * @module runtime/helpers/scope
 * What the context helpers (`ctx.fetch`, `ctx.exec`, `ctx.pgQuery`) share within one attempt:
 * the attempt's signal and clock, and a registry of what they started, so that nothing a
 * handler started outlives its attempt.
 *
 * Every helper call binds a signal of its own that fires at the earliest of
 * - the attempt's `ctx.signal` (attempt timeout, operation deadline, cancel, lost lease, shutdown,
 *   a per-operation limit),
 * - the time left (`AbortSignal.timeout(remainingMs)`: a second clock, so a helper stops on time
 *   even if the attempt's own timer is late),
 * - the end of the attempt (`AttemptEnded`: the handler returned or threw while the helper was
 *   still running — a subprocess it did not await, say),
 * - any signal the caller passed.
 *
 * When it fires, the helper rejects with a typed reason (`reasonOf`): the attempt's own reason if
 * its signal fired, `AttemptEnded` at the end of the attempt, the caller's reason, or — when only
 * the time-left clock fired — the same error the attempt's timer gives (`AttemptTimeout` or
 * `DeadlineExceeded`), so errors classify the same whichever clock fired first.
 *
 * The attempt calls `close()` on every exit path, before it removes its temporary folders: it
 * fires the end signal and awaits each tracked resource's `stop()` (a subprocess group killed and
 * reaped, a query cancelled), each bounded by the helper's own grace.
 */
import type { Logger } from 'pino';
import { AttemptEnded, isAttemptEnded } from '../../core/errors/index.js';

export { AttemptEnded, isAttemptEnded } from '../../core/errors/index.js';

/** Something a helper started that the attempt must stop (and wait for) when it ends. */
export interface Tracked {
  /** Stops it and resolves once it is gone. Never rejects. */
  stop(): Promise<void>;
}

/** A signal bound to one helper call, and how to tell why it fired. */
export interface Bound {
  signal: AbortSignal;
  /** The typed reason to reject with, once `signal` has fired. */
  reason(): unknown;
}

export interface ScopeOptions {
  /**
   * Holds the attempt's `ctx.signal`, read by the first helper call (runtime/attempt.ts makes the
   * signal on first read); an `AbortController` will do.
   */
  attempt: { readonly signal: AbortSignal };
  /** Milliseconds left before the attempt's signal fires for time. */
  remainingMs(): number;
  /** The error the attempt's signal gives when its time runs out. */
  timeUp(): Error;
  /** The attempt's logger, made when first used (runtime/lazy-log.ts); `{ log }` will do. */
  logs: { readonly log: Logger };
  /** Records a subprocess group so a later worker can kill it if this one dies (temp-dirs.ts). */
  registerGroup?(pgid: number): () => void;
}

export class AttemptScope {
  readonly #options: ScopeOptions;
  /**
   * Fired at the end of the attempt. Made by the first helper call: most attempts call none, and
   * a controller, its abort and the `AttemptEnded` error are a measurable share of a short
   * attempt's cost (docs/benchmarks.md).
   */
  #ended: AbortController | undefined;
  #closed = false;
  readonly #tracked = new Set<Tracked>();

  constructor(options: ScopeOptions) {
    this.#options = options;
  }

  get log(): Logger {
    return this.#options.logs.log;
  }

  remainingMs(): number {
    return this.#options.remainingMs();
  }

  registerGroup(pgid: number): () => void {
    return this.#options.registerGroup?.(pgid) ?? (() => {});
  }

  timeUp(): Error {
    return this.#options.timeUp();
  }

  /**
   * A signal for one helper call. It has already fired if the attempt is aborted, has ended, or
   * has no time left.
   */
  bind(...callerSignals: Array<AbortSignal | null | undefined>): Bound {
    const extra = callerSignals.filter((s): s is AbortSignal => s != null);
    const attempt = this.#options.attempt.signal;
    const ended = this.#endedSignal();
    const remaining = this.remainingMs();
    // An expired clock must not become `AbortSignal.timeout(0)`: that fires on a later tick,
    // and a helper would start work it cannot finish.
    const sources = [attempt, ended, ...extra];
    if (remaining <= 0) sources.push(AbortSignal.abort(this.timeUp()));
    else if (Number.isFinite(remaining)) sources.push(AbortSignal.timeout(Math.ceil(remaining)));
    const signal = AbortSignal.any(sources);
    const reason = () => {
      if (attempt.aborted) return attempt.reason;
      if (ended.aborted) return ended.reason;
      for (const s of extra) if (s.aborted) return s.reason;
      return this.timeUp();
    };
    return { signal, reason };
  }

  /**
   * The promise a helper hands to the handler. A rejection caused by the end of the attempt
   * (`AttemptEnded`: the handler returned without awaiting the call), or one that comes once the
   * attempt is over (a call a leftover callback made after an attempt that timed out rejects with
   * its timeout), can be observed by no one: it is logged and marked handled, so that a
   * handler's floating promise cannot take the whole worker down with an unhandled rejection.
   * Every other outcome passes through untouched.
   */
  guard<T>(work: Promise<T>, what: string): Promise<T> {
    const outer: Promise<T> = new Promise<T>((resolve, reject) => {
      work.then(resolve, (error: unknown) => {
        if (this.#closed || isAttemptEnded(error)) {
          outer.catch(() => {});
          this.log.warn(
            { helper: what },
            'a helper call was still running when its attempt ended: it was stopped',
          );
        }
        reject(error);
      });
    });
    return outer;
  }

  /** The end-of-attempt signal, made on first use: already fired once the scope is closed. */
  #endedSignal(): AbortSignal {
    if (!this.#ended) {
      this.#ended = new AbortController();
      if (this.#closed) this.#ended.abort(new AttemptEnded());
    }
    return this.#ended.signal;
  }

  /** Registers something to stop at the end of the attempt; returns its deregistration. */
  track(item: Tracked): () => void {
    this.#tracked.add(item);
    return () => this.#tracked.delete(item);
  }

  /**
   * Ends the scope: fires every bound signal with `AttemptEnded` (helpers whose signal already
   * fired keep their reason), then waits for everything tracked to stop. Idempotent; never throws.
   */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#ended && !this.#ended.signal.aborted) this.#ended.abort(new AttemptEnded());
    const items = [...this.#tracked];
    this.#tracked.clear();
    await Promise.all(
      items.map((item) =>
        item
          .stop()
          .catch((error: unknown) => this.log.error({ err: error }, 'could not stop a helper resource')),
      ),
    );
  }
}

/** Resolves after `ms`, or earlier if `until` settles; never rejects; leaves no timer behind. */
export function waitAtMost(until: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), Math.max(0, ms));
    until.then(
      () => {
        clearTimeout(timer);
        resolve(true);
      },
      () => {
        clearTimeout(timer);
        resolve(true);
      },
    );
  });
}
