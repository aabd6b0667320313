/**
 * @module runtime/attempt-log
 * What an attempt writes to the log beyond its own lines: its failure, read defensively (any
 * value may be thrown, and a getter that throws must not leave the attempt without an end), and
 * a warning for an effect that names a provider with no budgets.
 */
import type { Logger } from 'pino';
import type { ProviderBudgets } from '../admission/budgets.js';
import { storableCode } from '../core/errors/code.js';
import { isSluiceError, messageOf } from '../core/errors/index.js';

/** What a thrown value that is not an Error says of itself: any value may be thrown. */
function describe(value: unknown): string {
  try {
    return String(value);
  } catch {
    // An object without a prototype has no toString; one whose `Symbol.toStringTag` throws, not
    // even this.
    try {
      return Object.prototype.toString.call(value);
    } catch {
      return `a ${typeof value} with no printable form`;
    }
  }
}

/** Provider names already warned about, per set of budgets (one engine's). */
const warned = new WeakMap<ProviderBudgets, Set<string>>();

/**
 * An effect that names a provider with no budgets, where other providers have some, is most
 * likely a typo (`'stripe'` for `'Stripe'`): its calls would go uncounted against any budget,
 * silently. Told once per name and engine, at `warn`; where no provider has budgets, a provider
 * name is a metrics label only and nothing is said.
 */
export function warnUnbudgeted(budgets: ProviderBudgets, provider: string | undefined, log: Logger): void {
  if (provider === undefined || Object.hasOwn(budgets, provider)) return;
  // A name told already costs one lookup: an unbudgeted provider beside budgeted ones is not
  // always a typo, and its every effect comes here.
  let seen = warned.get(budgets);
  if (seen?.has(provider)) return;
  const names = Object.keys(budgets);
  if (names.length === 0) return;
  if (!seen) {
    seen = new Set();
    warned.set(budgets, seen);
  }
  if (seen.size >= 100) return;
  seen.add(provider);
  log.warn(
    { provider, budgeted: names.slice(0, 20) },
    'an effect names a provider with no budgets: its calls count against none',
  );
}

/** What a log line may hold of a thrown value's message or stack. */
const MAX_LOGGED_CHARS = 4000;

/**
 * Reads a property of a thrown value that may be a getter that throws: a log line that could
 * not be built would leave the attempt without an end until its lease expired.
 */
function safely(read: () => unknown): string | undefined {
  try {
    const value = read();
    return value === undefined ? undefined : String(value).slice(0, MAX_LOGGED_CHARS);
  } catch {
    return '(reading it threw)';
  }
}

/**
 * An attempt's failure, as the log keeps it: the error's type, code, message and stack, not its
 * other properties. An HTTP client's error carries the request it made (`config.headers` with a
 * provider's key, the body with a card number), and `details` may hold a tenant's input: pino's
 * serializer would write them all, once per attempt. An error Sluice does not know (not one of
 * its own classes, a `TypeError`) is a bug or an unclassified failure, and is said so, at `warn`.
 *
 * The attempt's failure in the log, as a record of its own under `error` (pino's serializer of
 * `err` would name every such record's type `Object`). When the signal had fired (a cancel, a
 * timeout, the worker's stop), that reason decides the outcome, and what the handler threw on its
 * way out (an `AbortError`, most often) is no unclassified failure: logged at info with it.
 */
export function logFailure(log: Logger, error: unknown, abortReason: unknown): void {
  const known = isSluiceError(error);
  let e: Error | undefined;
  try {
    e = error instanceof Error ? error : undefined;
  } catch {
    e = undefined;
  }
  const record = {
    type: (e && safely(() => e.name)) ?? typeof error,
    // As the store keeps it: a code that is not one is not logged as it came either.
    code: storableCode(error).code,
    message: e ? messageOf(e).slice(0, MAX_LOGGED_CHARS) : describe(error).slice(0, MAX_LOGGED_CHARS),
    // Where an unclassified error came from is what its reader needs; a classified one (a
    // provider's 503 as `Retryable`, said once a retry) is its code and message, not a stack.
    stack: known ? undefined : e && safely(() => e.stack),
  };
  if (abortReason !== undefined) {
    const reason = isSluiceError(abortReason)
      ? abortReason.code
      : describe(abortReason).slice(0, MAX_LOGGED_CHARS);
    log.info({ reason, error: record }, 'attempt stopped');
  } else if (known) log.info({ error: record }, 'attempt failed');
  else log.warn({ error: record }, 'attempt failed with an unclassified error (retried as retryable)');
}
