/**
 * @module admission/retry-draw
 * The attempt's side of the service-wide retry budget (admission/retry-budget.ts): a failure
 * about to be retried draws a retry first; denied, the operation goes back to the queue marked
 * `retry-budget-exhausted` after a random wait that grows with each denial, without using an
 * attempt, and asks again when next claimed.
 */
import type { Logger } from 'pino';
import { endAtDeadline } from '../core/decisions.js';
import type { ErrorRecord } from '../core/errors/index.js';
import type { SluiceEvents } from '../observability/events.js';
import type { AttemptEnd } from '../retry/classify.js';
import type { Store } from '../store/store.js';
import type { OperationRow } from '../store/types.js';
import type { RetryBudgetConfig } from './retry-budget.js';

/** What drawing on the retry budget needs of the attempt's engine. */
export interface RetryDrawEnv {
  store: Pick<Store, 'retryBudgetTake'>;
  events: SluiceEvents;
  random: () => number;
  retryBudget: (RetryBudgetConfig & { shard: number }) | false;
}

/** The attempt's log, made when first written to. */
interface Logs {
  readonly log: Logger;
}

/** The code that marks an operation whose retry the service-wide budget denied. */
export const RETRY_DENIED = 'retry-budget-exhausted';

/** Draws a retry from the budget; a denial is logged and told to observers. */
export async function takeRetry(env: RetryDrawEnv, row: OperationRow, logs: Logs): Promise<boolean> {
  if (!env.retryBudget) return true;
  const { allowed } = await env.store.retryBudgetTake(env.retryBudget);
  if (!allowed) {
    logs.log.warn('retry denied by the service-wide retry budget');
    env.events.emit('retry-denied', { tenant: row.tenant, id: row.id, kind: row.kind, class: row.class });
  }
  return allowed;
}

/** Back to the queue after a random wait, without using an attempt; never past the deadline. */
export function deferRetry(
  env: RetryDrawEnv,
  cause: ErrorRecord | null,
  deadlineInMs: number | null,
): Extract<AttemptEnd, { outcome: 'deferred' | 'failed' }> {
  const budget = env.retryBudget as RetryBudgetConfig;
  const earlier =
    cause?.code === RETRY_DENIED
      ? ((cause.details ?? {}) as { lastError?: unknown; denials?: unknown })
      : null;
  // Full jitter on a ceiling that doubles with each denial of this retry, up to the budget's
  // window: a long outage must not turn every waiting retry into a query every few seconds. (A
  // handler's own error may carry this code, and details of its own: a count that is not one is
  // none.)
  const counted = earlier?.denials;
  const denials =
    (typeof counted === 'number' && Number.isSafeInteger(counted) && counted > 0 ? counted : 0) + 1;
  const ceiling = Math.min(budget.windowMs, budget.deferMaxMs * 2 ** Math.min(denials - 1, 30));
  const delayMs = Math.floor(env.random() * ceiling);
  if (deadlineInMs !== null && delayMs >= deadlineInMs)
    return { outcome: 'failed', error: endAtDeadline(false).error! };
  const lastError = earlier ? earlier.lastError : cause;
  return {
    outcome: 'deferred',
    delayMs,
    error: {
      code: RETRY_DENIED,
      message: 'the service-wide retry budget is spent; the retry is deferred',
      outcome: 'retryable',
      details: { lastError: lastError ?? null, denials },
    },
  };
}

/**
 * A failure about to be retried draws on the service-wide retry budget; denied, the retry is
 * marked and deferred (the failed attempt did run, so it counts). Every retry does, whatever
 * failed: a worker without the kind retries too.
 */
export async function budgetedRetry<E extends AttemptEnd | { outcome: 'succeeded'; result: unknown }>(
  env: RetryDrawEnv,
  row: OperationRow,
  logs: Logs,
  deadlineInMs: number | null,
  end: E,
): Promise<E | AttemptEnd> {
  if (end.outcome !== 'retry' || !env.retryBudget || (await takeRetry(env, row, logs))) return end;
  const deferred = deferRetry(env, end.error, deadlineInMs);
  return deferred.outcome === 'deferred'
    ? { outcome: 'retry', delayMs: Math.max(end.delayMs, deferred.delayMs), error: deferred.error }
    : deferred;
}
