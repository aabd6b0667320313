/**
 * @module store/sqlite/retry-budget
 * The service-wide retry budget (Google SRE ch. 21–22: retries at most ~10% of requests). First
 * attempts are counted by the claim that starts them; a retry asks `take` before it runs. Counts
 * live in time buckets, summed over a sliding window, so every process sharing the store draws on
 * one budget.
 */
import type { RetryBudgetParams, RetryBudgetStats } from '../types.js';
import type { SqliteContext } from './connection.js';

export function countRetryBudget(
  ctx: SqliteContext,
  now: number,
  p: { bucketMs: number; shard: number },
  column: 'firsts' | 'retries' | 'denials',
  n: number,
): void {
  const bucket = Math.floor(now / p.bucketMs) * p.bucketMs;
  ctx
    .stmt(
      `INSERT INTO retry_budget (bucket, shard, ${column}) VALUES (?, ?, ?)
       ON CONFLICT (bucket, shard) DO UPDATE SET ${column} = ${column} + excluded.${column}`,
    )
    .run(bucket, p.shard, n);
}

function sums(ctx: SqliteContext, since: number): RetryBudgetStats {
  const r = ctx
    .stmt(
      `SELECT coalesce(sum(firsts), 0) AS f, coalesce(sum(retries), 0) AS r, coalesce(sum(denials), 0) AS d
       FROM retry_budget WHERE bucket >= ?`,
    )
    .get(since) as { f: number; r: number; d: number };
  return { firstAttempts: r.f, retries: r.r, denials: r.d };
}

/**
 * Allows and counts one retry if, counted, retries stay within `floor + ratio × first attempts`;
 * otherwise counts a denial. Atomic: SQLite serialises writers. The retry being asked for counts:
 * under the bound before it would round a fractional bound up (10.5 allowing 11). The 1e-9 keeps
 * a bound that floating point puts a hair under a whole number (0.29 × 100) at that number; the
 * PostgreSQL function (migration 30) compares the same way.
 */
export function retryBudgetTake(ctx: SqliteContext, p: RetryBudgetParams): { allowed: boolean } {
  return ctx.write((now) => {
    const s = sums(ctx, now - p.windowMs);
    const allowed = s.retries + 1 <= p.floor + p.ratio * s.firstAttempts + 1e-9;
    countRetryBudget(ctx, now, p, allowed ? 'retries' : 'denials', 1);
    return { allowed };
  });
}

export function retryBudgetStats(ctx: SqliteContext, windowMs: number): RetryBudgetStats {
  return sums(ctx, ctx.clock.now() - windowMs);
}
