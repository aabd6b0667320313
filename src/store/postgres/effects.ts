/**
 * @module store/postgres/effects
 * The effect journal (the rules of store/sqlite/effects.ts), one statement per call.
 *
 * `begin` is the migration's `effect_begin` function: it checks the lease and that no cancel is
 * pending, marks the point of no return and writes the `pending` row, all under the operation's
 * row lock, the lock cancel takes too. The other writes are fenced by a `FOR SHARE` lock on the
 * operation row held by the lease: a rescuer or claimer changing the row waits for the write,
 * and a write after the lease moved on finds no row and changes nothing.
 */
import {
  CancelRequested,
  type ErrorRecord,
  InvalidStateTransition,
  LeaseLost,
} from '../../core/errors/index.js';
import type { EffectBeginParams, EffectBeginResult, EffectRow, LeaseRef } from '../types.js';
import type { PgContext } from './connection.js';
import { jsonText, num, type PgRow, toEffectRow } from './rows.js';

const BEGIN = `SELECT r.status, r.clock, (r.eff).*
  FROM {s}.effect_begin($1::bigint, $2, $3, $4, $5, $6, $7, $8::bigint) r`;

/** Step 3 of the effect protocol; throws `LeaseLost` or `CancelRequested` when refused. */
export async function effectBegin(ctx: PgContext, p: EffectBeginParams): Promise<EffectBeginResult> {
  const { lease } = p;
  const [r] = await ctx.query<PgRow & { status: string; clock: string }>(BEGIN, [
    ctx.now(),
    lease.tenant,
    lease.id,
    lease.epoch,
    p.name,
    p.key,
    p.provider ?? null,
    p.cost === undefined || p.cost === null ? null : Math.round(p.cost),
  ]);
  if (!r || r.status === 'lease-lost') throw new LeaseLost(lease.id);
  if (r.status === 'cancel-requested') throw new CancelRequested(lease.id);
  return { row: toEffectRow(r), created: r.status === 'created', now: num(r.clock)! };
}

/**
 * The lease's operation row, locked against a rescue or claim for the rest of the statement.
 * Found by its (tenant, id) key, then read by `seq`: a `state` condition next to the key could
 * be planned as a scan of every running row.
 */
const FENCE = `SELECT 1 FROM {s}.operations
   WHERE seq = (SELECT x.seq FROM {s}.operations x WHERE x.tenant = $1 AND x.id = $2)
     AND epoch = $3 AND state = 'running'
     FOR SHARE`;

// The fence also refuses while a cancel is pending: a cancel accepted while every earlier request
// was refused (`absent`) wins over a new send, as it does over a new effect.
const RECORD_SEND = `WITH fence AS (${FENCE.replace("AND state = 'running'", "AND state = 'running' AND cancel IS DISTINCT FROM 'requested'")}),
       t AS (SELECT {s}.now_ms($5::bigint) AS now)
  UPDATE {s}.effects e SET sends = e.sends + 1, last_sent_at = t.now, epoch = $3, state = 'pending',
         first_sent_at = CASE WHEN e.state = 'absent' THEN t.now ELSE e.first_sent_at END
    FROM t
   WHERE e.tenant = $1 AND e.op_id = $2 AND e.name = $4 AND e.state IN ('pending', 'absent')
     AND EXISTS (SELECT 1 FROM fence)
  RETURNING e.*, t.now AS clock`;

/** One more request under an existing key (`pending` or `absent`); throws `LeaseLost` when fenced out. */
export async function effectRecordSend(
  ctx: PgContext,
  lease: LeaseRef,
  name: string,
): Promise<{ row: EffectRow; now: number }> {
  const [r] = await ctx.query<PgRow & { clock: string }>(RECORD_SEND, [
    lease.tenant,
    lease.id,
    lease.epoch,
    name,
    ctx.now(),
  ]);
  if (!r) {
    // Why was it refused? Rare path: one more read to name the cause precisely.
    const [why] = await ctx.query<{ cancel: string | null; effect: string | null }>(
      `SELECT o.cancel, (SELECT e.state FROM {s}.effects e WHERE e.tenant = $1 AND e.op_id = $2 AND e.name = $4) AS effect
         FROM {s}.operations o WHERE o.tenant = $1 AND o.id = $2 AND o.epoch = $3 AND o.state = 'running'`,
      [lease.tenant, lease.id, lease.epoch, name],
    );
    if (!why) throw new LeaseLost(lease.id);
    if (why.cancel === 'requested') throw new CancelRequested(lease.id);
    throw new InvalidStateTransition('send under', why.effect ?? 'missing', `${lease.id}/${name}`);
  }
  return { row: toEffectRow(r), now: num(r.clock)! };
}

const MARK_ABSENT = `WITH fence AS (${FENCE})
  UPDATE {s}.effects SET state = 'absent', epoch = $3
   WHERE tenant = $1 AND op_id = $2 AND name = $4 AND state = 'pending' AND EXISTS (SELECT 1 FROM fence)
  RETURNING 1`;

/** A `pending` effect certainly did not happen. False when fenced out or not pending. */
export async function effectMarkAbsent(ctx: PgContext, lease: LeaseRef, name: string): Promise<boolean> {
  const rows = await ctx.query(MARK_ABSENT, [lease.tenant, lease.id, lease.epoch, name]);
  return rows.length === 1;
}

const MARK = `WITH fence AS (${FENCE})
  UPDATE {s}.effects SET state = $5, result = $6, reference = $7, error = $8,
         committed_at = CASE WHEN $5 = 'committed' THEN {s}.now_ms($9::bigint) END, epoch = $3
   WHERE tenant = $1 AND op_id = $2 AND name = $4 AND state IN ('pending', 'absent')
     AND EXISTS (SELECT 1 FROM fence)
  RETURNING 1`;

/** The effect is `committed` (with its result) or `failed` for good. False when fenced out. */
export async function effectMark(
  ctx: PgContext,
  lease: LeaseRef,
  name: string,
  outcome:
    | { state: 'committed'; result: unknown; reference: string | null }
    | { state: 'failed'; error: ErrorRecord },
): Promise<boolean> {
  const rows = await ctx.query(MARK, [
    lease.tenant,
    lease.id,
    lease.epoch,
    name,
    outcome.state,
    outcome.state === 'committed' ? jsonText(outcome.result) : null,
    outcome.state === 'committed' ? outcome.reference : null,
    outcome.state === 'failed' ? jsonText(outcome.error) : null,
    ctx.now(),
  ]);
  return rows.length === 1;
}
