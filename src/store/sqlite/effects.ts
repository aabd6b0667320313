/**
 * @module store/sqlite/effects
 * The effect journal. `begin` is steps 2 and 3 of the protocol: in one transaction it checks the
 * caller's lease and that no cancel is pending, draws on the budgets (budgets.ts), marks the
 * operation's point of no return, and writes the `pending` row with the effect key and the first-sent time (or returns the row an
 * earlier attempt wrote). Cancel takes the same row lock (SQLite: the write lock), so a cancel
 * and the first effect cannot both win.
 */
import {
  CancelRequested,
  type ErrorRecord,
  InvalidStateTransition,
  isSluiceError,
  LeaseLost,
} from '../../core/errors/index.js';
import { createdEffectRow } from '../created-row.js';
import type {
  BudgetCharge,
  EffectBeginParams,
  EffectBeginResult,
  EffectMarkParams,
  EffectRow,
  LeaseRef,
  Settled,
} from '../types.js';
import {
  checkCallLimit,
  checkMaxCalls,
  drawBudgets,
  type Reservation,
  settleReservations,
} from './budgets.js';
import type { SqliteContext } from './connection.js';
import { EFFECT_ROW, jsonText, type RawEffect, toEffectRow } from './rows.js';

/** The operation's `seq` while it runs under the lease's epoch; undefined once it does not. */
function fence(ctx: SqliteContext, lease: LeaseRef): number | undefined {
  return ctx
    .stmt(`SELECT seq FROM operations WHERE tenant = ? AND id = ? AND epoch = ? AND state = 'running'`)
    .pluck()
    .get(lease.tenant, lease.id, lease.epoch) as number | undefined;
}

function getEffect(ctx: SqliteContext, lease: LeaseRef, name: string): EffectRow | undefined {
  const raw = ctx
    .stmt(
      `SELECT ${EFFECT_ROW} FROM operations o JOIN effects e ON e.op_seq = o.seq
        WHERE o.tenant = ? AND o.id = ? AND e.name = ?`,
    )
    .get(lease.tenant, lease.id, name) as RawEffect | undefined;
  return raw ? toEffectRow(raw) : undefined;
}

export function effectBegin(ctx: SqliteContext, p: EffectBeginParams): EffectBeginResult {
  return ctx.write((now) => beginOne(ctx, p, now));
}

/**
 * Several attempts' begins in one transaction (one fsync). Each item is answered alone: a refusal
 * (lease lost, cancel pending, a limit or budget) is decided before the item writes anything
 * (`beginOne`), so the items before and after it stand without a savepoint per item, which SQLite
 * pays with a copy of every page the item changes.
 */
export function effectBeginMany(
  ctx: SqliteContext,
  items: EffectBeginParams[],
): Array<Settled<EffectBeginResult>> {
  return ctx.write((now) =>
    items.map((p): Settled<EffectBeginResult> => {
      try {
        return { ok: true, value: beginOne(ctx, p, now) };
      } catch (error) {
        if (!isSluiceError(error)) throw error;
        return { ok: false, error };
      }
    }),
  );
}

/** Every refusal throws before the first write: `effectBeginMany` relies on it. */
function beginOne(ctx: SqliteContext, p: EffectBeginParams, now: number): EffectBeginResult {
  const { lease } = p;
  // The fence, the cancel, whether the effect has a row, and the requests made so far: one read.
  const op = ctx
    .stmt(
      `SELECT o.seq, o.cancel,
              EXISTS (SELECT 1 FROM effects e WHERE e.op_seq = o.seq AND e.name = ?) AS found,
              (SELECT coalesce(sum(e.sends), 0) FROM effects e WHERE e.op_seq = o.seq) AS made
         FROM operations o WHERE o.tenant = ? AND o.id = ? AND o.epoch = ? AND o.state = 'running'`,
    )
    .get(p.name, lease.tenant, lease.id, lease.epoch) as
    | { seq: number; cancel: string | null; found: number; made: number }
    | undefined;
  if (!op) throw new LeaseLost(lease.id);
  if (op.cancel === 'requested') throw new CancelRequested(lease.id);
  const existing = op.found ? getEffect(ctx, lease, p.name) : undefined;
  // Step 2, before anything is written: a refusal leaves the transaction as it found it
  // (drawBudgets checks every charge before it applies one).
  let reservations: Reservation[] = [];
  if (!existing) {
    checkCallLimit(lease.id, op.made, p.maxCalls);
    reservations = drawBudgets(ctx, now, { spend: p.spend, rates: p.rates });
  }
  // The operation's point of no return for cancel, under the fence just read.
  ctx
    .stmt(
      `UPDATE operations SET effect_started_at = coalesce(effect_started_at, ?), updated_at = ?
       WHERE seq = ?`,
    )
    .run(now, now, op.seq);
  // An existing row is returned as it is: any further request goes through recordSend.
  if (existing) return { row: existing, created: false, now };
  // The new row holds what was sent and the clock: built here, not read back (created-row.ts),
  // its cost in whole units as PostgreSQL's bigint column keeps it.
  const row = createdEffectRow(p, now);
  ctx
    .stmt(
      `INSERT INTO effects (op_seq, name, key, state, provider, cost, first_sent_at, last_sent_at, sends, epoch,
                            reservations)
       VALUES (?, ?, ?, 'pending', ?, ?, ?, ?, 1, ?, ?)`,
    )
    .run(
      op.seq,
      p.name,
      p.key,
      row.provider,
      row.cost,
      now,
      now,
      lease.epoch,
      reservations.length ? JSON.stringify(reservations) : null,
    );
  return { row, created: true, now };
}

export function effectRecordSend(
  ctx: SqliteContext,
  p: { lease: LeaseRef; name: string; spend?: BudgetCharge[]; rates?: BudgetCharge[]; maxCalls?: number },
): { row: EffectRow; now: number } {
  const { lease, name } = p;
  return ctx.write((now) => {
    const op = ctx
      .stmt(`SELECT cancel FROM operations WHERE tenant = ? AND id = ? AND epoch = ? AND state = 'running'`)
      .get(lease.tenant, lease.id, lease.epoch) as { cancel: string | null } | undefined;
    if (!op) throw new LeaseLost(lease.id);
    // A cancel accepted while every earlier request was refused (`absent`) wins over a new send,
    // as it does over a new effect. (With a `pending` effect the cancel was answered too_late.)
    if (op.cancel === 'requested') throw new CancelRequested(lease.id);
    const current = getEffect(ctx, lease, name);
    if (!current || (current.state !== 'pending' && current.state !== 'absent')) {
      throw new InvalidStateTransition('send under', current?.state ?? 'missing', `${lease.id}/${name}`);
    }
    checkMaxCalls(ctx, lease.tenant, lease.id, p.maxCalls);
    // A resend of a pending effect still holds its reservation; from `absent` it was released.
    const reservations = drawBudgets(ctx, now, {
      rates: p.rates,
      spend: current.state === 'absent' ? p.spend : [],
    });
    const raw = ctx
      .stmt(
        `UPDATE effects SET sends = sends + 1, last_sent_at = @now, epoch = @epoch, state = 'pending',
           first_sent_at = CASE WHEN state = 'absent' THEN @now ELSE first_sent_at END,
           reservations = CASE WHEN state = 'absent' THEN @reservations ELSE reservations END
         WHERE op_seq = (SELECT seq FROM operations WHERE tenant = @tenant AND id = @id) AND name = @name
         RETURNING *`,
      )
      .get({
        now,
        epoch: lease.epoch,
        tenant: lease.tenant,
        id: lease.id,
        name,
        reservations: reservations.length ? JSON.stringify(reservations) : null,
      }) as Omit<RawEffect, 'tenant' | 'op_id'>;
    return { row: toEffectRow({ ...raw, tenant: lease.tenant, op_id: lease.id }), now };
  });
}

export function effectMarkAbsent(ctx: SqliteContext, lease: LeaseRef, name: string): boolean {
  return ctx.write((now) => markOne(ctx, { lease, name, state: 'absent' }, now));
}

export function effectMark(
  ctx: SqliteContext,
  lease: LeaseRef,
  name: string,
  outcome:
    | { state: 'committed'; result: unknown; reference: string | null }
    | { state: 'failed'; error: ErrorRecord },
): boolean {
  return ctx.write((now) => markOne(ctx, { lease, name, ...outcome }, now));
}

/** Several attempts' marks in one transaction (one fsync). */
export function effectMarkMany(ctx: SqliteContext, items: EffectMarkParams[]): boolean[] {
  return ctx.write((now) => items.map((p) => markOne(ctx, p, now)));
}

/**
 * The end of an effect's uncertainty, fenced by the lease: `absent` (from `pending`), or
 * `committed` / `failed` (from `pending` or `absent`). Settles its spend reservations: committed
 * → committed; absent, failed → released.
 */
export function markOne(ctx: SqliteContext, p: EffectMarkParams, now: number): boolean {
  const seq = fence(ctx, p.lease);
  return seq !== undefined && markFenced(ctx, seq, p, now);
}

/**
 * The mark's write, once the caller has read the operation under the mark's lease in this
 * transaction (`markOne`, or an end the mark rides with: finish.ts) and with it the operation's
 * `seq`, which keys its effects. One statement moves the row
 * if its state allows and hands back the reservations it held, still in place (RETURNING shows
 * the row as written, so the statement leaves that column to a second one, which only an
 * effect that drew on a budget needs).
 */
export function markFenced(ctx: SqliteContext, seq: number, p: EffectMarkParams, now: number): boolean {
  const { lease, name } = p;
  const moved = ctx
    .stmt(
      `UPDATE effects SET state = ?, result = ?, reference = ?, error = ?, committed_at = ?, epoch = ?
       WHERE op_seq = ? AND name = ? AND (state = 'pending' OR (state = 'absent' AND ? <> 'absent'))
       RETURNING reservations`,
    )
    .get(
      p.state,
      p.state === 'committed' ? jsonText(p.result) : null,
      p.state === 'committed' ? p.reference : null,
      p.state === 'failed' ? jsonText(p.error) : null,
      p.state === 'committed' ? now : null,
      lease.epoch,
      seq,
      name,
      p.state,
    ) as { reservations: string | null } | undefined;
  if (!moved) return false;
  if (moved.reservations !== null) {
    settleReservations(ctx, moved.reservations, p.state === 'committed' ? 'commit' : 'release');
    ctx.stmt('UPDATE effects SET reservations = NULL WHERE op_seq = ? AND name = ?').run(seq, name);
  }
  return true;
}
