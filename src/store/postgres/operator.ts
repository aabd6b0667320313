/**
 * @module store/postgres/operator
 * Client and operator actions on one operation (the rules of store/sqlite/operator.ts): cancel,
 * redrive (dead → queued, new attempt count) and reconcile (needs_reconciliation → queued |
 * succeeded | failed). Each is a short transaction that first locks the operation's row
 * (`FOR UPDATE`) and only then reads the effect journal, in a later statement, so it sees every
 * effect whose `begin` committed before the lock was granted: a cancel and the first effect of
 * a running attempt cannot both win. Redrive and reconcile are recorded in `events`.
 *
 * Locks follow the migration's order: the operation row, then (reconcile) the budget rows its
 * effects' reservations are settled on, then the queue row, then the class row last.
 */
import { InvalidStateTransition, OperationNotFound } from '../../core/errors/index.js';
import { isNewCancel } from '../cancel-record.js';
import type { CancelAnswer, CancelOutcome, OperationRow, ReconcileParams } from '../types.js';
import type { PgContext, Query } from './connection.js';
import { jsonText, num, type PgRow, toOperationRow } from './rows.js';

interface Locked {
  op: PgRow & { tenant: string; id: string; class: string; state: string; error: string | null };
  now: number;
}

/** Locks the operation row and fixes the transaction's `now`. */
async function lock(ctx: PgContext, q: Query, tenant: string, id: string): Promise<Locked | undefined> {
  const [op] = await q<Locked['op'] & { tx_now: string }>(
    `SELECT o.*, {s}.now_ms($3::bigint) AS tx_now FROM {s}.operations o
      WHERE o.tenant = $1 AND o.id = $2 FOR UPDATE`,
    [tenant, id, ctx.now()],
  );
  return op ? { op, now: num(op.tx_now)! } : undefined;
}

/** The point of no return: an effect is committed or may have happened (`pending`). */
async function pastNoReturn(q: Query, tenant: string, id: string): Promise<boolean> {
  const rows = await q(
    `SELECT 1 FROM {s}.effects
      WHERE op_seq = (SELECT seq FROM {s}.operations WHERE tenant = $1 AND id = $2)
        AND state IN ('pending', 'committed') LIMIT 1`,
    [tenant, id],
  );
  return rows.length > 0;
}

async function record(
  q: Query,
  op: Locked['op'],
  now: number,
  action: string,
  by: string,
  reason: string,
  detail: unknown,
): Promise<void> {
  await q(
    `INSERT INTO {s}.events (tenant, op_id, at, action, by, reason, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
    [op.tenant, op.id, now, action, by, reason, jsonText(detail)],
  );
}

async function reload(q: Query, op: Locked['op']): Promise<OperationRow> {
  const [row] = await q(`SELECT * FROM {s}.operations WHERE seq = $1`, [op.seq]);
  return toOperationRow(row!);
}

/** A cancel request, answered by state: cancelled, requested (running), or too late. */
export function cancel(
  ctx: PgContext,
  tenant: string,
  id: string,
  by: string | undefined,
): Promise<CancelAnswer | undefined> {
  return ctx.tx(async (q) => {
    const locked = await lock(ctx, q, tenant, id);
    if (!locked) return undefined;
    const { op, now } = locked;
    const live = op.state === 'queued' || op.state === 'running';
    const noReturn = live && (await pastNoReturn(q, op.tenant, op.id));
    let outcome: CancelOutcome;
    let ended = false;
    if (op.state === 'queued' && !noReturn) {
      await q(
        `UPDATE {s}.operations SET state = 'cancelled', finished_at = $2, updated_at = $2, cancel_requested_at = $2
          WHERE seq = $1`,
        [op.seq, now],
      );
      await q('SELECT {s}.queue_leave($1, $2, 1, 0)', [op.class, op.tenant]);
      // The tenant's ready time may have been this operation's: left early, claims would take the
      // tenant for one with work, find none, and spend their rounds on it.
      await q(
        `UPDATE {s}.queues SET ready_at = (SELECT min(o.run_after) FROM {s}.operations o
                 WHERE o.class = $1 AND o.tenant = $2 AND o.state = 'queued')
          WHERE class = $1 AND tenant = $2`,
        [op.class, op.tenant],
      );
      await q('SELECT {s}.classes_move(ARRAY[$1::text], ARRAY[-1])', [op.class]);
      outcome = 'cancelled';
      ended = true;
    } else if (op.state === 'running' && !noReturn) {
      await q(
        `UPDATE {s}.operations SET cancel = 'requested', cancel_requested_at = coalesce(cancel_requested_at, $2),
                updated_at = $2 WHERE seq = $1`,
        [op.seq, now],
      );
      outcome = 'requested';
    } else if (op.state === 'cancelled') {
      outcome = 'cancelled';
    } else {
      // An effect happened or may have (or the operation already ended): it cannot be made not
      // to have happened. The operation runs to its end and reports its result.
      if (live) {
        await q(
          `UPDATE {s}.operations SET cancel = 'too_late', cancel_requested_at = coalesce(cancel_requested_at, $2),
                  updated_at = $2 WHERE seq = $1`,
          [op.seq, now],
        );
      }
      outcome = 'too_late';
    }
    // Recorded when it changed something (store/sqlite/operator.ts).
    if (by && isNewCancel(op, outcome))
      await record(q, op, now, 'cancel', by, 'cancel requested', { outcome });
    return { row: await reload(q, op), outcome, ended };
  });
}

/**
 * An operation sent back to the queue by an operator gets the time it was given at acceptance
 * again, from now (`$2`): kept, a deadline that had passed (the usual case for a dead operation,
 * an hour by default) would end it `deadline-exceeded` at its first claim, its handler never run.
 */
const FRESH_DEADLINE =
  'deadline_at = CASE WHEN deadline_at IS NULL THEN NULL ELSE $2 + (deadline_at - created_at) END';

/** dead → queued under a new attempt count, recorded with who and why. */
export function redrive(
  ctx: PgContext,
  tenant: string,
  id: string,
  by: string,
  reason: string,
): Promise<OperationRow> {
  return ctx.tx(async (q) => {
    const locked = await lock(ctx, q, tenant, id);
    if (!locked) throw new OperationNotFound(tenant, id);
    const { op, now } = locked;
    if (op.state !== 'dead') throw new InvalidStateTransition('redrive', op.state, id);
    await q(
      `UPDATE {s}.operations SET state = 'queued', attempt = 0, lease_expiries = 0, run_after = $2,
              finished_at = NULL, updated_at = $2, cancel = NULL, ${FRESH_DEADLINE} WHERE seq = $1`,
      [op.seq, now],
    );
    await enter(ctx, q, op, now);
    await record(q, op, now, 'redrive', by, reason, {
      previousError: op.error ? JSON.parse(op.error) : null,
    });
    return reload(q, op);
  });
}

/** The operation is queued again now: counters, and a wake-up for idle workers on commit. */
async function enter(ctx: PgContext, q: Query, op: Locked['op'], now: number): Promise<void> {
  await q('SELECT {s}.queue_enter($1, $2, 1, $3, 0, false, 1, NULL, NULL)', [op.class, op.tenant, now]);
  await q('SELECT {s}.classes_move(ARRAY[$1::text], ARRAY[1])', [op.class]);
  if (ctx.notify) await q('SELECT pg_notify({s}.wakeup_channel(), $1)', [op.class]);
}

/** needs_reconciliation → queued | succeeded | failed, with the effects' established outcomes. */
export function reconcile(ctx: PgContext, p: ReconcileParams): Promise<OperationRow> {
  return ctx.tx(async (q) => {
    const locked = await lock(ctx, q, p.tenant, p.id);
    if (!locked) throw new OperationNotFound(p.tenant, p.id);
    const { op, now } = locked;
    if (op.state !== 'needs_reconciliation') throw new InvalidStateTransition('reconcile', op.state, p.id);
    // What the effects held is settled in one call, so the budget rows are locked in one order.
    const commit: unknown[] = [];
    const release: unknown[] = [];
    for (const effect of p.effects ?? []) {
      if (effect.outcome === 'committed') {
        const [held] = await q<{ reservations: unknown[] | null }>(
          `UPDATE {s}.effects e SET state = 'committed', result = $3, reference = $4, committed_at = $5,
                  reservations = NULL
             FROM (SELECT x.reservations FROM {s}.effects x WHERE x.op_seq = $1 AND x.name = $2 FOR UPDATE) old
            WHERE e.op_seq = $1 AND e.name = $2
           RETURNING old.reservations`,
          [op.seq, effect.name, jsonText(effect.result ?? null), effect.reference ?? null, now],
        );
        commit.push(...(held?.reservations ?? []));
      } else {
        // The provider confirmed nothing exists under the key: the next attempt sends afresh,
        // with a new retention window, and the spend it had reserved is given back.
        const [held] = await q<{ reservations: unknown[] | null }>(
          `UPDATE {s}.effects e SET state = 'absent', reservations = NULL
             FROM (SELECT x.reservations FROM {s}.effects x WHERE x.op_seq = $1 AND x.name = $2 FOR UPDATE) old
            WHERE e.op_seq = $1 AND e.name = $2 AND e.state = 'pending'
           RETURNING old.reservations`,
          [op.seq, effect.name],
        );
        release.push(...(held?.reservations ?? []));
      }
    }
    if (commit.length > 0 || release.length > 0) {
      await q('SELECT {s}.budget_settle($1::jsonb, $2::jsonb)', [
        JSON.stringify(commit),
        JSON.stringify(release),
      ]);
    }
    if (p.resolution === 'requeue') {
      await q(
        `UPDATE {s}.operations SET state = 'queued', attempt = 0, lease_expiries = 0, run_after = $2,
                finished_at = NULL, updated_at = $2, ${FRESH_DEADLINE} WHERE seq = $1`,
        [op.seq, now],
      );
      await enter(ctx, q, op, now);
    } else {
      await q(
        `UPDATE {s}.operations SET state = $2, result = $3, error = $4, finished_at = $5, updated_at = $5 WHERE seq = $1`,
        [
          op.seq,
          p.resolution,
          p.resolution === 'succeeded' ? jsonText(p.result ?? null) : null,
          // A succeeded operation carries no error: what parked it stays in its history.
          p.resolution === 'failed'
            ? jsonText(p.error ?? { code: 'reconciled-failed', message: p.reason })
            : null,
          now,
        ],
      );
    }
    await record(q, op, now, 'reconcile', p.by, p.reason, {
      resolution: p.resolution,
      effects: p.effects ?? [],
    });
    return reload(q, op);
  });
}
