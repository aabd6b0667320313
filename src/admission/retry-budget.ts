/**
 * @module admission/retry-budget
 * The service-wide retry budget (Google SRE ch. 21: a retry budget of ~10% of requests turns a
 * worst case of 3× load into 1.1×). Every process sharing the store draws on one budget kept in
 * the store: first attempts are counted when claimed; a failure about to be retried asks first.
 * A denied retry is deferred — back to the queue marked `retry-budget-exhausted`, asking again
 * when next claimed — never run; denials are counted and visible. Redeliveries after a crash are
 * not retries of a failure: they are bounded by `maxLeaseExpiries` instead.
 */

export interface RetryBudgetConfig {
  /** Retries allowed per first attempt in the window. */
  ratio: number;
  /** Retries always allowed per window, so a quiet service can still retry. */
  floor: number;
  /** The sliding window. */
  windowMs: number;
  /** Granularity of the window's buckets. */
  bucketMs: number;
  /**
   * How long a denied retry waits before asking again: a random delay up to this, doubling with
   * each further denial of the same retry, up to `windowMs`.
   */
  deferMaxMs: number;
}

export const DEFAULT_RETRY_BUDGET: RetryBudgetConfig = {
  ratio: 0.1,
  floor: 10,
  windowMs: 60_000,
  bucketMs: 1000,
  deferMaxMs: 5000,
};
