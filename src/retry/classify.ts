/**
 * @module retry/classify
 * Turns how an attempt ended into what happens to the operation. Pure: the worker supplies the
 * facts (the error, why the signal fired, attempts used, time left) and a random source.
 *
 * | ended with                                  | operation                                        |
 * |---------------------------------------------|--------------------------------------------------|
 * | lease lost                                  | nothing written (the new owner decides)          |
 * | worker shutdown                             | back to the queue, the attempt not counted       |
 * | cancel (no effect begun)                    | cancelled                                        |
 * | deadline passed                             | failed `deadline-exceeded` (or reconciliation)   |
 * | effect outcome unknown past retention       | needs_reconciliation                             |
 * | effect key conflict at the provider         | dead                                             |
 * | a budget exhausted (provider set to `wait`) | deferred to the window's reset, attempt not used |
 * | `Permanent`, invalid input, over a per-operation limit (temp bytes, calls) | failed              |
 * | Sluice's refusal of a call the handler made (invalid argument, key reused)  | dead, at once       |
 * | `Retryable`, `Ambiguous`, timeout, other    | retry after full-jitter back-off, or dead when   |
 * |                                             | attempts are exhausted / failed when the back-off |
 * |                                             | would pass the deadline                           |
 *
 * The engine's own outcomes (the first rows, and a spent budget, an unknown effect outcome, a
 * refused result) are recognised only from what the engine made: why the signal fired, or an
 * error it registered where it made it (core/errors/engine-made.ts), which a handler may rethrow.
 * A handler's error that carries one of their codes (`new Permanent('…', { code:
 * 'cancel-requested' })`) is classified as its class says, its code kept: read by its code, it
 * cancelled an operation no one asked to cancel, or, after a charge, gave its attempt back for
 * ever. What the handler threw has been read once already (core/errors/thrown.ts).
 */
import { endAtDeadline } from '../core/decisions.js';
import { isEngineMade } from '../core/errors/engine-made.js';
import {
  type BudgetExhausted,
  type ErrorRecord,
  isAmbiguous,
  isAttemptTimeout,
  isBudgetExhausted,
  isCancelRequested,
  isDeadlineExceeded,
  isEffectConflict,
  isEffectOutcomeUnknown,
  isInputInvalid,
  isInvalidArgument,
  isLeaseLost,
  isOperationConflict,
  isOperationExpired,
  isOperationLimitExceeded,
  isPermanent,
  isResultRefused,
  isRetryable,
  isWorkerShutdown,
  retryAfterOf,
  toErrorRecord,
} from '../core/errors/index.js';
import { type BackoffOptions, fullJitterDelay } from './backoff.js';

export type AttemptEnd =
  | { outcome: 'abandon' }
  | { outcome: 'released' }
  | { outcome: 'cancelled' }
  | { outcome: 'failed'; error: ErrorRecord }
  | { outcome: 'dead'; error: ErrorRecord }
  | { outcome: 'needs_reconciliation'; error: ErrorRecord }
  | { outcome: 'retry'; error: ErrorRecord; delayMs: number }
  | { outcome: 'deferred'; error: ErrorRecord; delayMs: number };

export interface FailureFacts {
  error: unknown;
  /** `signal.reason` when the attempt's signal had fired, else undefined. */
  abortReason: unknown;
  /** Attempts used so far, this one included. */
  attempt: number;
  maxAttempts: number;
  backoff: BackoffOptions;
  /** Milliseconds until the operation's deadline, or null for none. */
  deadlineInMs: number | null;
}

/** Sluice's refusal of a call a handler made: a bug in the handler (the classification above). */
function wrongCall(error: unknown): boolean {
  if (isPermanent(error) || isRetryable(error) || isAmbiguous(error)) return false;
  return isInvalidArgument(error) || isOperationConflict(error) || isOperationExpired(error);
}

/** Whether a failure may be retried, and how it is labelled in the attempt history. */
export function failureClass(error: unknown): 'permanent' | 'retryable' | 'ambiguous' {
  if (isPermanent(error) || (isEngineMade(error) && isInputInvalid(error))) return 'permanent';
  if (isAmbiguous(error)) return 'ambiguous';
  return 'retryable';
}

export function classifyFailure(f: FailureFacts, random: () => number = Math.random): AttemptEnd {
  // The error thrown, when the engine made it (a handler that rethrows what `ctx.effect` or its
  // signal gave it): only then may it stand for one of the engine's own outcomes.
  const own = isEngineMade(f.error) ? f.error : undefined;
  // Why the signal fired takes precedence over what the handler threw on its way out.
  const cause = f.abortReason ?? own;
  if (isLeaseLost(cause) || isLeaseLost(own)) return { outcome: 'abandon' };
  // Only the worker's own stop gives an attempt back: a WorkerShutdown the handler kept from an
  // earlier stop and threw again would run the operation again and again without using one.
  if (isWorkerShutdown(f.abortReason)) return { outcome: 'released' };
  if (isCancelRequested(cause) || isCancelRequested(own)) return { outcome: 'cancelled' };
  if (isOperationLimitExceeded(cause) || isOperationLimitExceeded(own)) {
    return {
      outcome: 'failed',
      error: toErrorRecord(isOperationLimitExceeded(cause) ? cause : own, 'permanent'),
    };
  }
  if (isDeadlineExceeded(cause)) {
    const end = endAtDeadline(false);
    return { outcome: 'failed', error: end.error! };
  }
  if (isEffectOutcomeUnknown(own)) {
    return { outcome: 'needs_reconciliation', error: toErrorRecord(own, 'ambiguous') };
  }
  // The provider's refusal of the key, as a provider client or the handler says it: its own class.
  if (isEffectConflict(f.error)) return { outcome: 'dead', error: toErrorRecord(f.error, 'permanent') };
  // Sluice's refusal of a call the handler made wrongly (a bad argument, a child's idempotency key
  // reused with another input or already purged) is a bug: the same code makes the same call
  // again, so retrying only spends the attempts. Dead at once, for a fix and a redrive. Sluice's
  // own errors only (a handler's Permanent with one of these codes fails, as any Permanent), and
  // not on the way out of a timed-out attempt, whose timeout decides.
  if (wrongCall(own) && !isAttemptTimeout(cause))
    return { outcome: 'dead', error: toErrorRecord(own, 'permanent') };
  // A result the store cannot keep is the handler's bug, found after all it did: dead, so that a
  // fixed handler can be redriven and its journaled effects replayed, not failed over a charge.
  if (isResultRefused(own)) return { outcome: 'dead', error: toErrorRecord(own, 'permanent') };
  // A provider set to `fail` turns the refusal into a Permanent that keeps the code: it fails.
  const budget = isBudgetExhausted(own) && !isPermanent(own) ? (own as BudgetExhausted) : undefined;
  if (budget) {
    // Wait for the budget's window to reset, without using an attempt; never past the deadline.
    const delayMs =
      budget.retryAfterMs + Math.floor(random() * Math.min(1000, budget.retryAfterMs * 0.1 + 1));
    if (f.deadlineInMs !== null && delayMs >= f.deadlineInMs) {
      return {
        outcome: 'failed',
        error: { ...toErrorRecord(budget, 'retryable'), code: 'budget-exhausted' },
      };
    }
    return { outcome: 'deferred', error: toErrorRecord(budget, 'retryable'), delayMs };
  }
  // A timeout is retried whatever the handler threw on its way out (a Permanent made of the
  // aborted call it was in): the attempt ran out of time, it did not find the work impossible.
  const thrown = failureClass(f.error);
  const kind = thrown === 'permanent' && isAttemptTimeout(cause) ? 'retryable' : thrown;
  if (kind === 'permanent') return { outcome: 'failed', error: toErrorRecord(f.error, 'permanent') };

  const error = toErrorRecord(isAttemptTimeout(cause) ? cause : f.error, kind);
  if (!isRetryable(f.error) && !isAmbiguous(f.error) && !isAttemptTimeout(cause)) error.outcome = 'retryable';
  if (f.attempt >= f.maxAttempts) {
    return {
      outcome: 'dead',
      error: {
        code: 'attempts-exhausted',
        message: `all ${f.maxAttempts} attempts failed; last: ${error.message}`,
        outcome: kind,
        details: { lastError: error },
      },
    };
  }
  // A provider's Retry-After is a floor under the back-off: retried sooner, the call is refused
  // again and the attempts run out in seconds.
  const delayMs = Math.max(fullJitterDelay(f.attempt - 1, f.backoff, random), retryAfterOf(f.error) ?? 0);
  if (f.deadlineInMs !== null && delayMs >= f.deadlineInMs) {
    return { outcome: 'failed', error: endAtDeadline(false).error! };
  }
  return { outcome: 'retry', error, delayMs };
}
