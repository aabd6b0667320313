/**
 * @module store/postgres/claim
 * The claim: one call of the migration's `claim` function, one round trip whatever the batch.
 * The function is the SQLite algorithm (start-time fair queuing over the `queues` rows, see
 * store/sqlite/claim.ts) with `FOR UPDATE SKIP LOCKED` on the candidate queue rows and on the
 * operations: claimers in any number of processes proceed without waiting on each other, never
 * take the same operation, and never exceed a tenant's `max_running` (it is read from the
 * locked row and updated before the lock is released).
 *
 * With `retryBudget`, the function also counts the first attempts it started into the retry
 * budget's current bucket (retry-budget.ts), in the same transaction.
 *
 * The store's `now` is fixed once, before the function runs, and returned with the rows: with
 * no rows claimed the single result row carries only `now`. Each row also says whether its
 * tenant has a running cap in the class (read with the statement's snapshot, from before the
 * claim: the cap is set at submit, so it is already there), which the worker needs to know
 * (ClaimResult.capped).
 *
 * With `passOver` it passes over operations on their last chance (migration 34).
 *
 * A claim short of its limit also says whether it may have left ready work behind
 * (ClaimResult.contended, migration 7): a tenant with ready work that it did not serve, most
 * often because another transaction (a submit, a finish, another claimer) held the tenant's queue
 * row, which `SKIP LOCKED` passes over.
 *
 * A claim alone commits without waiting for the WAL flush (`synchronous_commit = off` for its
 * transaction only; the ends-and-claim call of finish-claim.ts waits, for the ends' sake). Losing
 * it to a crash of the server, or to a failover, is safe: the operation is back in the queue as
 * before the claim, the next claim gives it another epoch (a random step, migration 15), so the
 * worker that read the lost claim is refused at its next fenced write; and every later commit
 * that waits for the flush (that worker's own journal entry or end among them) flushes the
 * claim's WAL first, so nothing durable can rest on a claim that is not. It takes the claim's
 * flush, ~0.25 ms, out of enqueue→start latency (docs/benchmarks.md).
 */
import { StoreError } from '../../core/errors/index.js';
import type { ClaimParams, ClaimResult } from '../types.js';
import type { PgContext } from './connection.js';
import { ms, num, type PgRow, toOperationRow } from './rows.js';

// The function has run to completion before the first row is projected (a PL/pgSQL set-returning
// function fills its result before returning it), so `claim_contended` reads what it set.
// `n` names the row that carries the claim's `now`; `c` the claimed rows (shared with finish-claim.ts).
export const CLAIM_COLUMNS = `n.now AS claim_now,
       current_setting('sluice.claim_contended', true) = 'on' AS claim_contended, c.*,
       (SELECT q.max_running IS NOT NULL FROM {s}.queues q WHERE q.class = c.class AND q.tenant = c.tenant)
         AS claim_capped`;

const SQL = `SELECT ${CLAIM_COLUMNS}
  FROM (SELECT {s}.now_ms($5::bigint) AS now,
               set_config('synchronous_commit', 'off', true) AS unflushed) n
  LEFT JOIN LATERAL {s}.claim($1, $2, $3, $4, n.now, $6::bigint, $7::integer, $8::integer) c ON true`;

/** Claims up to `p.limit` ready operations of `p.class` for `p.owner`, one round trip. */
export async function claimMany(ctx: PgContext, p: ClaimParams): Promise<ClaimResult> {
  const rows = await ctx.query<ClaimRow>(SQL, [
    p.class,
    p.owner,
    p.limit,
    ms(p.leaseMs),
    ctx.now(),
    p.retryBudget ? ms(p.retryBudget.bucketMs) : null,
    p.retryBudget?.shard ?? null,
    p.passOver ?? null,
  ]);
  return claimResultOf(rows);
}

/** A claim's result rows, as the statements of claim.ts and finish-claim.ts project them. */
export type ClaimRow = PgRow & {
  claim_now: string;
  claim_contended: boolean | null;
  claim_capped: boolean | null;
};

export function claimResultOf(rows: ClaimRow[]): ClaimResult {
  // The server's time, which the attempts' deadlines are counted from; the statements always
  // answer a row carrying it (claimed or not). Never this host's clock in its place.
  const now = num(rows[0]?.claim_now);
  if (now === null) throw new StoreError('unknown', "PostgreSQL's claim answered without the server's time");
  const claimed = rows.filter((r) => r.seq !== null);
  const capped = new Set(claimed.filter((r) => r.claim_capped).map((r) => String(r.tenant)));
  return { now, rows: claimed.map(toOperationRow), capped, contended: rows[0]?.claim_contended === true };
}
