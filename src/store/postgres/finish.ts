/**
 * @module store/postgres/finish
 * The end of attempts and the heartbeat, both fenced on (tenant, id, epoch, state = 'running'):
 * a worker that lost its lease is told so by the result and changes nothing.
 *
 * - Finish: one call of the migration's `finish_many` (the rules of store/sqlite/finish.ts,
 *   including core/decisions.ts `adjustFailure` and the `deferred` outcome), one round trip and
 *   one commit per batch. It locks every operation row of the batch before any queue row, and
 *   moves the class counters last.
 * - Heartbeat: one call of `lease_extend` for every lease of the batch. It locks the rows in
 *   (class, tenant, seq) order, the order `finish_many` uses, so a heartbeat and a finish of the
 *   same worker's leases never deadlock.
 */
import type { FinishParams, LeaseRef, LeaseStatus } from '../types.js';
import type { PgContext } from './connection.js';
import { markPayload } from './effects.js';
import { jsonText, ms } from './rows.js';

const EXTEND = `SELECT ord, cancel FROM {s}.lease_extend($1, $2::text[], $3::text[], $4::bigint[], $5::bigint)`;

/** Extends the leases still held; one status per lease, in order. */
export async function extendMany(
  ctx: PgContext,
  leases: LeaseRef[],
  leaseMs: number,
): Promise<LeaseStatus[]> {
  if (leases.length === 0) return [];
  const rows = await ctx.query<{ ord: number; cancel: string | null }>(EXTEND, [
    ctx.now(),
    leases.map((l) => l.tenant),
    leases.map((l) => l.id),
    leases.map((l) => l.epoch),
    ms(leaseMs),
  ]);
  // A lease named twice is extended once; both items report what the row says.
  const held = new Map(rows.map((r) => [key(leases[r.ord - 1]!), r.cancel]));
  return leases.map((l) => {
    const cancel = held.get(key(l));
    return { ok: cancel !== undefined, cancelRequested: cancel === 'requested' };
  });
}

const key = (l: LeaseRef) => JSON.stringify([l.tenant, l.id, l.epoch]);

const FINISH = `SELECT ord FROM {s}.finish_many($1, $2::text[], $3::text[], $4::bigint[], $5::text[],
                                               $6::text[], $7::text[], $8::bigint[], $9) AS ord`;

/**
 * Effect marks that ride with the ends (`FinishParams.marks`), written first in the same
 * transaction: the ends' journal probes see them. The finish's clock is the marks' row's, so the
 * finish cannot run before `effect_mark_many` has. What each mark answers is not read: a mark is
 * refused when its lease is lost, and then so is the end, fenced on the same lease.
 */
export const MARKED = `marked AS MATERIALIZED (
  SELECT {s}.now_ms($1::bigint) AS now, count(k.ord) AS n FROM {s}.effect_mark_many($1::bigint, $10::jsonb) k)`;
const FINISH_MARKED = `WITH ${MARKED}
SELECT f.ord FROM marked CROSS JOIN LATERAL {s}.finish_many(marked.now, $2::text[], $3::text[], $4::bigint[],
                                                            $5::text[], $6::text[], $7::text[], $8::bigint[], $9) AS f(ord)`;

/** The marks the items carry, in order, or null when none does (the plain statement is used). */
export function marksOf(items: FinishParams[]): string | null {
  const marks = items.flatMap((i) => i.marks ?? []);
  return marks.length === 0 ? null : markPayload(marks);
}

/** The finish function's arguments after `p_now`, in order (shared with finish-claim.ts). */
export function finishArgs(ctx: PgContext, items: FinishParams[]): unknown[] {
  return [
    items.map((i) => i.lease.tenant),
    items.map((i) => i.lease.id),
    items.map((i) => i.lease.epoch),
    items.map((i) => i.outcome),
    items.map((i) => (i.outcome === 'succeeded' ? jsonText(i.result) : null)),
    items.map((i) => ('error' in i ? jsonText(i.error) : null)),
    items.map((i) => (i.outcome === 'retry' || i.outcome === 'deferred' ? ms(i.delayMs) : null)),
    ctx.notify,
  ];
}

/** Per item, whether its write took effect, from the ordinals `finish_many` returned. */
export function finishedOf(items: FinishParams[], ords: Iterable<number>): boolean[] {
  const done = new Set(ords);
  return items.map((_, i) => done.has(i + 1));
}

/** Ends attempts; per item, whether the fenced write took effect. */
export async function finishMany(ctx: PgContext, items: FinishParams[]): Promise<boolean[]> {
  if (items.length === 0) return [];
  const marks = marksOf(items);
  const rows = await ctx.query<{ ord: number }>(
    marks === null ? FINISH : FINISH_MARKED,
    marks === null ? [ctx.now(), ...finishArgs(ctx, items)] : [ctx.now(), ...finishArgs(ctx, items), marks],
  );
  return finishedOf(
    items,
    rows.map((r) => r.ord),
  );
}
