/**
 * @module core/errors/outcomes
 * The classified outcomes a handler or an effect's `call` raises. The engine is the only layer
 * that retries, and it decides from these:
 *
 * - `Permanent`: validation, a 4xx, a business refusal. Never retried: the operation `failed`.
 * - `Retryable`: the call certainly did not take effect (a 503, connection refused before the
 *   request was sent). Retried with back-off.
 * - `Ambiguous`: the call may have taken effect (a timeout after sending, a reset connection).
 *   Retried only under the same effect key inside the provider's retention; beyond it, the
 *   operation waits for reconciliation.
 * - `EffectConflict`: the provider refused the effect key because it was used with other
 *   parameters. Retrying cannot fix it and a person must look: the operation is dead-lettered.
 *
 * Anything else thrown counts as retryable and is logged as unclassified.
 */
import { hasCode, SluiceError } from './sluice-error.js';

export interface OutcomeOptions {
  cause?: unknown;
  /** A stable code for the failure, stored with the operation; defaults to the outcome's own. */
  code?: string;
  details?: unknown;
  /**
   * For a retry: wait at least this long before the next attempt (a provider's `Retry-After`).
   * The back-off's jitter still applies above it; a wait that would pass the operation's
   * deadline fails it then instead. At most a day; a value that is not a finite number of zero or
   * more is ignored.
   */
  retryAfterMs?: number;
}

/** The longest wait a failure may ask for before its retry. */
export const MAX_RETRY_AFTER_MS = 86_400_000;

/** A wait asked for, bounded; never thrown over: this runs on a failure path already. */
function boundedWait(after: unknown): number | undefined {
  return typeof after === 'number' && Number.isFinite(after) && after >= 0
    ? Math.min(Math.ceil(after), MAX_RETRY_AFTER_MS)
    : undefined;
}

abstract class Outcome extends SluiceError {
  readonly details?: unknown;
  readonly retryAfterMs?: number;
  constructor(defaultCode: string, message: string, retryable: boolean, options: OutcomeOptions) {
    super(options.code ?? defaultCode, message, { cause: options.cause, retryable });
    if (options.details !== undefined) this.details = options.details;
    const after = boundedWait(options.retryAfterMs);
    if (after !== undefined) this.retryAfterMs = after;
  }
}

/**
 * The wait a retryable or ambiguous failure asked for before its retry, if any. Read by its mark
 * and property, not by class, as the `is…` helpers are: an outcome made by another copy of the
 * package (a provider client's own dependency) keeps its wait.
 */
export function retryAfterOf(error: unknown): number | undefined {
  try {
    return isRetryable(error) || isAmbiguous(error)
      ? boundedWait((error as { retryAfterMs?: unknown }).retryAfterMs)
      : undefined;
  } catch {
    // A getter that throws asks for no wait.
    return undefined;
  }
}

const OUTCOME = Symbol.for('sluice.outcome');
function mark(error: SluiceError, outcome: string): void {
  Object.defineProperty(error, OUTCOME, { value: outcome });
}
function outcomeOf(value: unknown): string | undefined {
  try {
    return typeof value === 'object' && value !== null
      ? ((value as Record<symbol, unknown>)[OUTCOME] as string | undefined)
      : undefined;
  } catch {
    // A Proxy's trap that throws: no outcome of Sluice's is read that way.
    return undefined;
  }
}

/**
 * Throw it from a handler or an effect's `call` for a failure that the same input will always
 * meet (a validation error, a provider's 4xx): never retried, the operation ends `failed`. Give
 * it a `code` of your own (`card-declined`) for clients to act on; an effect that committed
 * before stays committed.
 */
export class Permanent extends Outcome {
  constructor(message: string, options: OutcomeOptions = {}) {
    super('permanent-failure', message, false, options);
    mark(this, 'permanent');
  }
}
export const isPermanent = (e: unknown): e is Permanent => outcomeOf(e) === 'permanent';

/**
 * Sluice's refusal of a result a handler returned that the store cannot keep (`result-not-json`,
 * `result-too-large`). The same code returns it again, so it is permanent; and it comes after
 * whatever the handler did, charges included: the operation is dead at once (retry/classify.ts),
 * for a fix and a redrive that replays its journaled effects, rather than failed over them.
 */
export class ResultRefused extends Permanent {}
export const isResultRefused = (e: unknown): e is ResultRefused => {
  try {
    return e instanceof ResultRefused;
  } catch {
    // `instanceof` asks a Proxy for its prototype, and its trap may throw.
    return false;
  }
};

/**
 * Throw it for a failure that may pass (a 503, a connection refused before anything was sent):
 * the operation is retried after a full-jitter back-off (`retryAfterMs` asks for a wait of at
 * least that), within its attempts, deadline and the retry budget.
 */
export class Retryable extends Outcome {
  constructor(message: string, options: OutcomeOptions = {}) {
    super('retryable-failure', message, true, options);
    mark(this, 'retryable');
  }
}
export const isRetryable = (e: unknown): e is Retryable => outcomeOf(e) === 'retryable';

/**
 * Throw it from an effect's `call` when the request may have reached the provider without an
 * answer (a timeout after sending, a reset): the effect stays `pending` and is looked up, or sent
 * again under the same key, within the provider's retention; past it, unless `lookup` answers,
 * the operation waits in `needs_reconciliation`. Never a blind resend.
 */
export class Ambiguous extends Outcome {
  constructor(message: string, options: OutcomeOptions = {}) {
    super('ambiguous-outcome', message, true, options);
    mark(this, 'ambiguous');
  }
}
export const isAmbiguous = (e: unknown): e is Ambiguous => outcomeOf(e) === 'ambiguous';

/**
 * Throw it from an effect's `call` when the provider says the key was used with other parameters
 * (Stripe's `idempotency_error`): the operation ends `dead` (`effect-key-conflict`) for a person
 * to look at, since sending again cannot succeed and another key could charge twice.
 */
export class EffectConflict extends SluiceError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super('effect-key-conflict', message, { cause: options.cause });
  }
}
/**
 * An `EffectConflict`, made by a provider client or a handler (another copy of the package's
 * included), not a `Permanent`, `Retryable` or `Ambiguous` that carries its code: that one is
 * classified as its own class says, as an error carrying any of the engine's codes is.
 */
export const isEffectConflict = (e: unknown): e is EffectConflict =>
  hasCode(e, 'effect-key-conflict') && outcomeOf(e) === undefined;

/** An effect's outcome is unknown and no blind retry is safe: the operation waits for a person. */
export class EffectOutcomeUnknown extends SluiceError {
  readonly effect: string;
  constructor(effect: string, message: string) {
    super('effect-outcome-unknown', message);
    this.effect = effect;
  }
}
export const isEffectOutcomeUnknown = (e: unknown): e is EffectOutcomeUnknown =>
  hasCode(e, 'effect-outcome-unknown');
