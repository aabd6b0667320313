/**
 * @module store/sqlite/finish
 * The end of attempts and the heartbeat, both fenced: a write takes effect only while the
 * operation is still `running` under the caller's epoch. A worker that lost its lease (paused
 * past it, then resumed) is told so by the result and changes nothing.
 */
import { adjustFailure } from '../../core/decisions.js';
import type { ErrorRecord } from '../../core/errors/index.js';
import type { OperationState } from '../../core/states.js';
import { byteOrder } from '../byte-order.js';
import type { AttemptOutcome, FinishParams, LeaseRef, LeaseStatus } from '../types.js';
import type { SqliteContext } from './connection.js';
import { markFenced, markOne } from './effects.js';
import { queueEnter, queueLeave } from './queue-counters.js';
import { jsonText, type RawOperation } from './rows.js';

export function extendMany(ctx: SqliteContext, leases: LeaseRef[], leaseMs: number): LeaseStatus[] {
  if (leases.length === 0) return [];
  return ctx.write((now) => {
    const stmt = ctx.stmt(
      `UPDATE operations SET lease_expires_at = ?
       WHERE tenant = ? AND id = ? AND epoch = ? AND state = 'running'
       RETURNING cancel`,
    );
    return leases.map((l) => {
      const row = stmt.get(now + leaseMs, l.tenant, l.id, l.epoch) as { cancel: string | null } | undefined;
      return { ok: row !== undefined, cancelRequested: row?.cancel === 'requested' };
    });
  });
}

/** Whether the operation (by its `seq`) has an effect whose outcome is unknown. */
export function hasPendingEffect(ctx: SqliteContext, seq: number): boolean {
  return (
    ctx.stmt(`SELECT 1 FROM effects WHERE op_seq = ? AND state = 'pending' LIMIT 1`).get(seq) !== undefined
  );
}

/** The names of an operation's effects that happened (`committed`), for a record of its end. */
export function effectsHappened(ctx: SqliteContext, seq: number): string[] {
  const rows = ctx
    .stmt(`SELECT name FROM effects WHERE op_seq = ? AND state = 'committed' ORDER BY name`)
    .all(seq) as Array<{ name: string }>;
  return rows.map((r) => r.name);
}

/**
 * The point of no return for cancel: an effect is committed or may have happened (`pending`).
 * Effects that are `absent` or `failed` certainly did not happen and do not block a cancel.
 */
export function pastNoReturn(ctx: SqliteContext, seq: number): boolean {
  return (
    ctx
      .stmt(`SELECT 1 FROM effects WHERE op_seq = ? AND state IN ('pending', 'committed') LIMIT 1`)
      .get(seq) !== undefined
  );
}

const sameLease = (a: LeaseRef, b: LeaseRef) => a.tenant === b.tenant && a.id === b.id && a.epoch === b.epoch;

/** The ended attempts of one (class, tenant) in a batch: its queue row moves once for them all. */
interface Ended {
  cls: string;
  tenant: string;
  /** Attempts that ended, each leaving `running`. */
  ended: number;
  /** Of them, operations back in the queue, and the earliest `run_after` among those. */
  requeued: number;
  runAfter: number;
}

/**
 * Ends a batch of attempts. Each end is decided and written in order; the queue counters move
 * once per (class, tenant) after them, in that order (as the PostgreSQL store's `finish_many`
 * does): one row update for a tenant's 32 ends instead of 32.
 */
export function finishMany(ctx: SqliteContext, items: FinishParams[]): boolean[] {
  if (items.length === 0) return [];
  return ctx.write((now) => {
    const groups = new Map<string, Ended>();
    const out = items.map((item) => finishOne(ctx, item, now, groups));
    const ordered = [...groups.values()].sort(
      (a, b) => byteOrder(a.cls, b.cls) || byteOrder(a.tenant, b.tenant),
    );
    for (const g of ordered) {
      if (g.requeued > 0) queueEnter(ctx, g.cls, g.tenant, g.requeued, g.runAfter, g.ended);
      else queueLeave(ctx, g.cls, g.tenant, 0, g.ended);
    }
    return out;
  });
}

/** What an end reads of its operation (not the input, which can be large). */
type Running = Pick<
  RawOperation,
  | 'seq'
  | 'tenant'
  | 'id'
  | 'class'
  | 'epoch'
  | 'attempt'
  | 'run_after'
  | 'started_at'
  | 'lease_owner'
  | 'cancel'
  | 'error'
>;

/** The operation an end is for, still `running` under its epoch; read as an array (`runningOf`). */
const RUNNING = `SELECT seq, tenant, id, class, epoch, attempt, run_after, started_at, lease_owner, cancel, error
  FROM operations WHERE tenant = ? AND id = ? AND epoch = ? AND state = 'running'`;

function runningOf(v: unknown[]): Running {
  return {
    seq: v[0] as number,
    tenant: v[1] as string,
    id: v[2] as string,
    class: v[3] as string,
    epoch: v[4] as number,
    attempt: v[5] as number,
    run_after: v[6] as number,
    started_at: v[7] as number | null,
    lease_owner: v[8] as string | null,
    cancel: v[9] as Running['cancel'],
    error: v[10] as string | null,
  };
}

function finishOne(ctx: SqliteContext, p: FinishParams, now: number, groups: Map<string, Ended>): boolean {
  const found = ctx.rawStmt(RUNNING).get(p.lease.tenant, p.lease.id, p.lease.epoch) as unknown[] | undefined;
  if (!found) return false;
  const op = runningOf(found);
  // Effect marks riding with the end go first, so the end's look at the journal sees them; the
  // read above is their fence too. A mark is refused when its lease is lost, and so is its end.
  if (p.marks)
    for (const m of p.marks) {
      if (sameLease(m.lease, p.lease)) markFenced(ctx, op.seq, m, now);
      else markOne(ctx, m, now);
    }

  let to: OperationState;
  let error: ErrorRecord | null = null;
  let result: unknown = null;
  let retryDelayMs: number | null = null;
  let attemptOutcome: AttemptOutcome = p.outcome;
  const cancelAsked = op.cancel === 'requested' && !pastNoReturn(ctx, op.seq);
  switch (p.outcome) {
    case 'succeeded':
      to = 'succeeded';
      result = p.result;
      break;
    case 'failed':
      to = adjustFailure('failed', hasPendingEffect(ctx, op.seq));
      error = p.error;
      break;
    case 'dead':
    case 'needs_reconciliation':
      to = p.outcome;
      error = p.error;
      break;
    case 'retry':
      to = cancelAsked ? 'cancelled' : 'queued';
      error = p.error;
      retryDelayMs = to === 'queued' ? Math.max(0, p.delayMs) : null;
      break;
    case 'cancelled':
      // Only an operation not past the point of no return may end cancelled; otherwise it runs again.
      to = pastNoReturn(ctx, op.seq) ? 'queued' : 'cancelled';
      if (to === 'queued') attemptOutcome = 'released';
      break;
    case 'released':
      to = cancelAsked ? 'cancelled' : 'queued';
      break;
    case 'deferred':
      to = cancelAsked ? 'cancelled' : 'queued';
      error = p.error;
      retryDelayMs = to === 'queued' ? Math.max(0, p.delayMs) : null;
      break;
  }

  const requeue = to === 'queued';
  const runAfter = requeue ? now + (retryDelayMs ?? 0) : op.run_after;
  // A release (shutdown, a cancel that came too late) or a deferral does not consume an attempt.
  const attempt =
    attemptOutcome === 'released' || attemptOutcome === 'deferred' ? op.attempt - 1 : op.attempt;
  // A cancel that did not stop the operation is reported as too late, also when it goes back to
  // the queue: it only does so with a cancel pending once an effect may have happened, and a
  // `requested` left on it would refuse every effect of its next attempts.
  const cancel = op.cancel === 'requested' && to !== 'cancelled' ? 'too_late' : op.cancel;
  ctx
    .stmt(
      `UPDATE operations SET state = ?, attempt = ?, run_after = ?, result = ?, error = ?,
         finished_at = ?, updated_at = ?, lease_owner = NULL, lease_expires_at = NULL, cancel = ?
       WHERE seq = ?`,
    )
    .run(
      to,
      attempt,
      runAfter,
      jsonText(result),
      // The last error stays visible while the operation waits to retry; success clears it.
      to === 'succeeded' ? null : (jsonText(error) ?? op.error),
      requeue ? null : now,
      now,
      cancel,
      op.seq,
    );
  ctx
    .stmt(
      `INSERT INTO attempts (op_seq, epoch, attempt, owner, started_at, ended_at, outcome, error, retry_delay_ms)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    )
    .run(
      op.seq,
      op.epoch,
      op.attempt,
      op.lease_owner,
      op.started_at ?? now,
      now,
      attemptOutcome === 'retry' && to === 'cancelled' ? 'cancelled' : attemptOutcome,
      jsonText(error),
      retryDelayMs,
    );
  const key = `${op.class}\u0000${op.tenant}`;
  let g = groups.get(key);
  if (!g) {
    g = { cls: op.class, tenant: op.tenant, ended: 0, requeued: 0, runAfter: Number.POSITIVE_INFINITY };
    groups.set(key, g);
  }
  g.ended++;
  if (requeue) {
    g.requeued++;
    g.runAfter = Math.min(g.runAfter, runAfter);
  }
  return true;
}
