/**
 * @module store/postgres/finish-claim
 * Ends attempts, then claims, in one statement: one round trip and one commit where a worker
 * would otherwise make two, each with its own commit, for the ends that free its slots and the
 * claim that fills them again.
 *
 * Order matters and is forced: the claim's `now` is a column of the materialized row that also
 * holds the finish's result, so the claim (a lateral call on that row) cannot run before
 * `finish_many` has. Its statements then see the ends (each statement of a volatile function
 * takes a new snapshot): a tenant's freed running cap, a retry due at once. Locks: the finish
 * takes operation rows, then queue rows, then class rows; the claim's `SKIP LOCKED` reads pass
 * over no row this transaction holds, and it takes the class row (held already) before the
 * retry-budget row, as a claim alone does, so the pair adds no lock order of its own.
 */
import type { ClaimParams, FinishAndClaimResult, FinishParams } from '../types.js';
import { CLAIM_COLUMNS, type ClaimRow, claimResultOf } from './claim.js';
import type { PgContext } from './connection.js';
import { finishArgs, finishedOf, MARKED, marksOf } from './finish.js';
import { ms } from './rows.js';

const SQL = `WITH n AS MATERIALIZED (
  SELECT ARRAY(SELECT f.ord FROM {s}.finish_many($1, $2::text[], $3::text[], $4::bigint[], $5::text[],
                                                 $6::text[], $7::text[], $8::bigint[], $9) AS f(ord)) AS finished,
         {s}.now_ms($1::bigint) AS now)
SELECT CASE WHEN c.ordinality IS NULL OR c.ordinality = 1 THEN n.finished END AS finished, ${CLAIM_COLUMNS}
  FROM n LEFT JOIN LATERAL {s}.claim($10, $11, $12, $13, n.now, $14::bigint, $15::integer, $16::integer) WITH ORDINALITY c ON true`;

// With effect marks riding along (finish.ts, MARKED): the finish's clock comes from their row.
const SQL_MARKED = `WITH ${MARKED}, n AS MATERIALIZED (
  SELECT ARRAY(SELECT f.ord FROM {s}.finish_many(marked.now, $2::text[], $3::text[], $4::bigint[], $5::text[],
                                                 $6::text[], $7::text[], $8::bigint[], $9) AS f(ord)) AS finished,
         marked.now
    FROM marked)
SELECT CASE WHEN c.ordinality IS NULL OR c.ordinality = 1 THEN n.finished END AS finished, ${CLAIM_COLUMNS}
  FROM n LEFT JOIN LATERAL {s}.claim($11, $12, $13, $14, n.now, $15::bigint, $16::integer, $17::integer) WITH ORDINALITY c ON true`;

export async function finishAndClaim(
  ctx: PgContext,
  items: FinishParams[],
  p: ClaimParams,
): Promise<FinishAndClaimResult> {
  const marks = marksOf(items);
  const rows = await ctx.query<ClaimRow & { finished: number[] }>(marks === null ? SQL : SQL_MARKED, [
    ctx.now(),
    ...finishArgs(ctx, items),
    ...(marks === null ? [] : [marks]),
    p.class,
    p.owner,
    p.limit,
    ms(p.leaseMs),
    p.retryBudget ? ms(p.retryBudget.bucketMs) : null,
    p.retryBudget?.shard ?? null,
    p.passOver ?? null,
  ]);
  // The finish's answer comes on the first row only: repeated on every claimed row, it was parsed
  // once per row (32 arrays of 32 for a round of the default slots).
  return { finished: finishedOf(items, rows[0]?.finished ?? []), claim: claimResultOf(rows) };
}
