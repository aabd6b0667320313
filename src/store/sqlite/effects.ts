/**
 * @module store/sqlite/effects
 * The effect journal. `begin` is step 3 of the protocol: in one transaction it checks the
 * caller's lease and that no cancel is pending, marks the operation's point of no return, and
 * writes the `pending` row with the effect key and the first-sent time (or returns the row an
 * earlier attempt wrote). Cancel takes the same row lock (SQLite: the write lock), so a cancel
 * and the first effect cannot both win.
 */
import {
  CancelRequested,
  type ErrorRecord,
  InvalidStateTransition,
  LeaseLost,
} from '../../core/errors/index.js';
import type { EffectBeginParams, EffectBeginResult, EffectRow, LeaseRef } from '../types.js';
import type { SqliteContext } from './connection.js';
import { jsonText, type RawEffect, toEffectRow } from './rows.js';

function fence(ctx: SqliteContext, lease: LeaseRef): boolean {
  return (
    ctx
      .stmt(`SELECT 1 FROM operations WHERE tenant = ? AND id = ? AND epoch = ? AND state = 'running'`)
      .get(lease.tenant, lease.id, lease.epoch) !== undefined
  );
}

function getEffect(ctx: SqliteContext, lease: LeaseRef, name: string): EffectRow | undefined {
  const raw = ctx
    .stmt('SELECT * FROM effects WHERE tenant = ? AND op_id = ? AND name = ?')
    .get(lease.tenant, lease.id, name) as RawEffect | undefined;
  return raw ? toEffectRow(raw) : undefined;
}

export function effectBegin(ctx: SqliteContext, p: EffectBeginParams): EffectBeginResult {
  return ctx.write((now) => {
    const { lease } = p;
    const marked = ctx
      .stmt(
        `UPDATE operations SET effect_started_at = coalesce(effect_started_at, ?), updated_at = ?
         WHERE tenant = ? AND id = ? AND epoch = ? AND state = 'running' AND cancel IS NOT 'requested'
         RETURNING 1`,
      )
      .get(now, now, lease.tenant, lease.id, lease.epoch);
    if (!marked) {
      if (fence(ctx, lease)) throw new CancelRequested(lease.id);
      throw new LeaseLost(lease.id);
    }
    const existing = getEffect(ctx, lease, p.name);
    if (existing) return { row: existing, created: false, now };
    const raw = ctx
      .stmt(
        `INSERT INTO effects (tenant, op_id, name, key, state, provider, cost, first_sent_at, last_sent_at, sends, epoch)
         VALUES (?, ?, ?, ?, 'pending', ?, ?, ?, ?, 1, ?) RETURNING *`,
      )
      .get(
        lease.tenant,
        lease.id,
        p.name,
        p.key,
        p.provider ?? null,
        p.cost ?? null,
        now,
        now,
        lease.epoch,
      ) as RawEffect;
    return { row: toEffectRow(raw), created: true, now };
  });
}

export function effectRecordSend(
  ctx: SqliteContext,
  lease: LeaseRef,
  name: string,
): { row: EffectRow; now: number } {
  return ctx.write((now) => {
    const op = ctx
      .stmt(`SELECT cancel FROM operations WHERE tenant = ? AND id = ? AND epoch = ? AND state = 'running'`)
      .get(lease.tenant, lease.id, lease.epoch) as { cancel: string | null } | undefined;
    if (!op) throw new LeaseLost(lease.id);
    // A cancel accepted while every earlier request was refused (`absent`) wins over a new send,
    // as it does over a new effect. (With a `pending` effect the cancel was answered too_late.)
    if (op.cancel === 'requested') throw new CancelRequested(lease.id);
    const raw = ctx
      .stmt(
        `UPDATE effects SET sends = sends + 1, last_sent_at = @now, epoch = @epoch, state = 'pending',
           first_sent_at = CASE WHEN state = 'absent' THEN @now ELSE first_sent_at END
         WHERE tenant = @tenant AND op_id = @id AND name = @name AND state IN ('pending', 'absent') RETURNING *`,
      )
      .get({ now, epoch: lease.epoch, tenant: lease.tenant, id: lease.id, name }) as RawEffect | undefined;
    if (!raw) {
      const current = getEffect(ctx, lease, name);
      throw new InvalidStateTransition('send under', current?.state ?? 'missing', `${lease.id}/${name}`);
    }
    return { row: toEffectRow(raw), now };
  });
}

export function effectMarkAbsent(ctx: SqliteContext, lease: LeaseRef, name: string): boolean {
  return ctx.write(() => {
    if (!fence(ctx, lease)) return false;
    return (
      ctx
        .stmt(
          `UPDATE effects SET state = 'absent', epoch = ? WHERE tenant = ? AND op_id = ? AND name = ? AND state = 'pending'`,
        )
        .run(lease.epoch, lease.tenant, lease.id, name).changes === 1
    );
  });
}

export function effectMark(
  ctx: SqliteContext,
  lease: LeaseRef,
  name: string,
  outcome:
    | { state: 'committed'; result: unknown; reference: string | null }
    | { state: 'failed'; error: ErrorRecord },
): boolean {
  return ctx.write((now) => {
    if (!fence(ctx, lease)) return false;
    const info = ctx
      .stmt(
        `UPDATE effects SET state = ?, result = ?, reference = ?, error = ?, committed_at = ?, epoch = ?
         WHERE tenant = ? AND op_id = ? AND name = ? AND state IN ('pending', 'absent')`,
      )
      .run(
        outcome.state,
        outcome.state === 'committed' ? jsonText(outcome.result) : null,
        outcome.state === 'committed' ? outcome.reference : null,
        outcome.state === 'failed' ? jsonText(outcome.error) : null,
        outcome.state === 'committed' ? now : null,
        lease.epoch,
        lease.tenant,
        lease.id,
        name,
      );
    return info.changes === 1;
  });
}
