/**
 * @module core/errors/budget-errors
 * A budget said no: no provider call was made. The operation waits for the next window or
 * fails, as its provider's configuration says.
 */
import { hasCode, SluiceError } from './sluice-error.js';

export class BudgetExhausted extends SluiceError {
  /** The budget that refused, e.g. `spend:payments:tenant:North` or `rate:payments`. */
  readonly budget: string;
  /** When its window resets. */
  readonly retryAfterMs: number;
  constructor(budget: string, retryAfterMs: number) {
    super(
      'budget-exhausted',
      `budget ${budget} is exhausted for this window; it resets in ${retryAfterMs} ms`,
      {
        retryable: true,
      },
    );
    this.budget = budget;
    this.retryAfterMs = retryAfterMs;
  }
  get details(): unknown {
    return { budget: this.budget, retryAfterMs: this.retryAfterMs };
  }
}
export const isBudgetExhausted = (e: unknown): e is BudgetExhausted => hasCode(e, 'budget-exhausted');

/** The service-wide retry budget deferred a retry: it will run later, not now. */
export class RetryDeferred extends SluiceError {
  readonly delayMs: number;
  constructor(reason: string, delayMs: number) {
    super('retry-budget-exhausted', reason, { retryable: true });
    this.delayMs = delayMs;
  }
}
export const isRetryDeferred = (e: unknown): e is RetryDeferred => hasCode(e, 'retry-budget-exhausted');
