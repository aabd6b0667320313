/**
 * @module store/postgres/retry-budget
 * The service-wide retry budget (the rules of store/sqlite/retry-budget.ts): first attempts are
 * counted by the claim that starts them (inside the migration's `claim`), a retry asks
 * `retry_budget_take` before it runs. Takes are serialised by an advisory lock of the schema,
 * so concurrent takes in any number of processes never allow more than
 * `floor + ratio × first attempts` retries in the window.
 */
import type { RetryBudgetParams, RetryBudgetStats } from '../types.js';
import type { PgContext } from './connection.js';
import { ms, num } from './rows.js';

/** Allows and counts one retry, or counts a denial; one round trip. */
export async function retryBudgetTake(ctx: PgContext, p: RetryBudgetParams): Promise<{ allowed: boolean }> {
  const [row] = await ctx.query<{ allowed: boolean }>(
    'SELECT {s}.retry_budget_take($1::bigint, $2::bigint, $3::bigint, $4::float8, $5::float8, $6::integer) AS allowed',
    [ctx.now(), ms(p.windowMs), ms(p.bucketMs), p.ratio, p.floor, p.shard],
  );
  return { allowed: row!.allowed };
}

/** First attempts, retries and denials counted in the last `windowMs`, all shards together. */
export async function retryBudgetStats(ctx: PgContext, windowMs: number): Promise<RetryBudgetStats> {
  const [row] = await ctx.query<{ f: string; r: string; d: string }>(
    `SELECT coalesce(sum(firsts), 0) AS f, coalesce(sum(retries), 0) AS r, coalesce(sum(denials), 0) AS d
       FROM {s}.retry_budget WHERE bucket >= {s}.now_ms($1::bigint) - $2::bigint`,
    [ctx.now(), ms(windowMs)],
  );
  return { firstAttempts: num(row!.f)!, retries: num(row!.r)!, denials: num(row!.d)! };
}
