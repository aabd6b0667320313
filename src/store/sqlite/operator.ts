/**
 * @module store/sqlite/operator
 * Client and operator actions on one operation: cancel, redrive (dead → queued, new attempt
 * count) and reconcile (needs_reconciliation → queued | succeeded | failed, with the effects'
 * outcomes a person or a reconciler established). Redrive and reconcile are recorded in
 * `events` with who and why.
 */
import { InvalidStateTransition, OperationNotFound } from '../../core/errors/index.js';
import { isNewCancel } from '../cancel-record.js';
import type { CancelAnswer, CancelOutcome, OperationRow, ReconcileParams } from '../types.js';
import { settleReservations } from './budgets.js';
import type { SqliteContext } from './connection.js';
import { pastNoReturn } from './finish.js';
import { queueEnter, queueLeave } from './queue-counters.js';
import { jsonText, OF_OP, type RawOperation, toOperationRow } from './rows.js';

function load(ctx: SqliteContext, tenant: string, id: string): RawOperation | undefined {
  return ctx.stmt('SELECT * FROM operations WHERE tenant = ? AND id = ?').get(tenant, id) as
    | RawOperation
    | undefined;
}

function record(
  ctx: SqliteContext,
  op: RawOperation,
  now: number,
  action: string,
  by: string,
  reason: string,
  detail: unknown,
) {
  ctx
    .stmt('INSERT INTO events (tenant, op_id, at, action, by, reason, detail) VALUES (?, ?, ?, ?, ?, ?, ?)')
    .run(op.tenant, op.id, now, action, by, reason, jsonText(detail));
}

export function cancel(
  ctx: SqliteContext,
  tenant: string,
  id: string,
  by: string | undefined,
): CancelAnswer | undefined {
  return ctx.write((now) => {
    const op = load(ctx, tenant, id);
    if (!op) return undefined;
    let outcome: CancelOutcome;
    let ended = false;
    const noReturn = (op.state === 'queued' || op.state === 'running') && pastNoReturn(ctx, op.seq);
    if (op.state === 'queued' && !noReturn) {
      ctx
        .stmt(
          `UPDATE operations SET state = 'cancelled', finished_at = ?, updated_at = ?, cancel_requested_at = ?
           WHERE seq = ?`,
        )
        .run(now, now, now, op.seq);
      queueLeave(ctx, op.class, op.tenant, 1, 0);
      // The tenant's ready time may have been this operation's: left early, claims would take the
      // tenant for one with work, find none, and spend their rounds on it.
      ctx
        .stmt(
          `UPDATE queues SET ready_at = (SELECT min(run_after) FROM operations
             WHERE class = @class AND tenant = @tenant AND state = 'queued')
           WHERE class = @class AND tenant = @tenant`,
        )
        .run({ class: op.class, tenant: op.tenant });
      outcome = 'cancelled';
      ended = true;
    } else if (op.state === 'running' && !noReturn) {
      ctx
        .stmt(
          `UPDATE operations SET cancel = 'requested', cancel_requested_at = coalesce(cancel_requested_at, ?),
             updated_at = ? WHERE seq = ?`,
        )
        .run(now, now, op.seq);
      outcome = 'requested';
    } else if (op.state === 'cancelled') {
      outcome = 'cancelled';
    } else {
      // An effect happened or may have (or the operation already ended): it cannot be made not
      // to have happened. The operation runs to its end and reports its result.
      if (op.state === 'queued' || op.state === 'running') {
        ctx
          .stmt(`UPDATE operations SET cancel = 'too_late', cancel_requested_at = coalesce(cancel_requested_at, ?),
                   updated_at = ? WHERE seq = ?`)
          .run(now, now, op.seq);
      }
      outcome = 'too_late';
    }
    // Recorded when it changed something: a cancel repeated, or of an ended operation, adds no
    // row (a tenant could otherwise grow an operation's history without bound).
    if (by && isNewCancel(op, outcome)) record(ctx, op, now, 'cancel', by, 'cancel requested', { outcome });
    return { row: toOperationRow(load(ctx, tenant, id)!), outcome, ended };
  });
}

/**
 * An operation sent back to the queue by an operator gets the time it was given at acceptance
 * again, from now: kept, a deadline that had passed (the usual case for a dead operation, an
 * hour by default) would end it `deadline-exceeded` at its first claim, its handler never run.
 * Bound to the moment of the redrive or reconcile.
 */
const FRESH_DEADLINE =
  'deadline_at = CASE WHEN deadline_at IS NULL THEN NULL ELSE ? + (deadline_at - created_at) END';

export function redrive(
  ctx: SqliteContext,
  tenant: string,
  id: string,
  by: string,
  reason: string,
): OperationRow {
  return ctx.write((now) => {
    const op = load(ctx, tenant, id);
    if (!op) throw new OperationNotFound(tenant, id);
    if (op.state !== 'dead') throw new InvalidStateTransition('redrive', op.state, id);
    ctx
      .stmt(
        `UPDATE operations SET state = 'queued', attempt = 0, lease_expiries = 0, run_after = ?, finished_at = NULL,
           updated_at = ?, cancel = NULL, ${FRESH_DEADLINE} WHERE seq = ?`,
      )
      .run(now, now, now, op.seq);
    queueEnter(ctx, op.class, op.tenant, 1, now, 0);
    record(ctx, op, now, 'redrive', by, reason, { previousError: op.error ? JSON.parse(op.error) : null });
    return toOperationRow(load(ctx, tenant, id)!);
  });
}

export function reconcile(ctx: SqliteContext, p: ReconcileParams): OperationRow {
  return ctx.write((now) => {
    const op = load(ctx, p.tenant, p.id);
    if (!op) throw new OperationNotFound(p.tenant, p.id);
    if (op.state !== 'needs_reconciliation') throw new InvalidStateTransition('reconcile', op.state, p.id);
    for (const effect of p.effects ?? []) {
      const held = ctx
        .stmt(`SELECT reservations FROM effects WHERE ${OF_OP} AND name = ?`)
        .get(op.tenant, op.id, effect.name) as { reservations: string | null } | undefined;
      if (effect.outcome === 'committed') {
        settleReservations(ctx, held?.reservations ?? null, 'commit');
        ctx
          .stmt(
            `UPDATE effects SET state = 'committed', result = ?, reference = ?, committed_at = ?, reservations = NULL
             WHERE ${OF_OP} AND name = ?`,
          )
          .run(jsonText(effect.result ?? null), effect.reference ?? null, now, op.tenant, op.id, effect.name);
      } else {
        // The provider confirmed nothing exists under the key: the next attempt sends afresh,
        // with a new retention window, and the spend it had reserved is given back.
        const changed = ctx
          .stmt(
            `UPDATE effects SET state = 'absent', reservations = NULL
             WHERE ${OF_OP} AND name = ? AND state = 'pending'`,
          )
          .run(op.tenant, op.id, effect.name).changes;
        if (changed === 1) settleReservations(ctx, held?.reservations ?? null, 'release');
      }
    }
    if (p.resolution === 'requeue') {
      ctx
        .stmt(
          `UPDATE operations SET state = 'queued', attempt = 0, lease_expiries = 0, run_after = ?,
             finished_at = NULL, updated_at = ?, ${FRESH_DEADLINE} WHERE seq = ?`,
        )
        .run(now, now, now, op.seq);
      queueEnter(ctx, op.class, op.tenant, 1, now, 0);
    } else {
      ctx
        .stmt(
          `UPDATE operations SET state = ?, result = ?, error = ?, finished_at = ?, updated_at = ? WHERE seq = ?`,
        )
        .run(
          p.resolution,
          p.resolution === 'succeeded' ? jsonText(p.result ?? null) : null,
          // A succeeded operation carries no error: what parked it stays in its history.
          p.resolution === 'failed'
            ? jsonText(p.error ?? { code: 'reconciled-failed', message: p.reason })
            : null,
          now,
          now,
          op.seq,
        );
    }
    record(ctx, op, now, 'reconcile', p.by, p.reason, { resolution: p.resolution, effects: p.effects ?? [] });
    return toOperationRow(load(ctx, p.tenant, p.id)!);
  });
}
