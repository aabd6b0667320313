/**
 * @module store/sqlite/submit
 * Acceptance of a batch of operations in one transaction. For each item, in this order: an
 * existing record answers (same digest: the operation; other digest: a conflict) before any
 * capacity check, so duplicates never count against capacity; a tombstone refuses a purged id;
 * the tenant's waiting cap refuses with nothing stored; only then the row is inserted and the
 * queue counters move. SQLite serialises writers, so check-then-insert is atomic.
 */
import type { OperationRow, SubmitOutcome, SubmitParams } from '../types.js';
import type { SqliteContext } from './connection.js';
import { queueEnter } from './queue-counters.js';
import { type RawOperation, toOperationRow } from './rows.js';

export function submitMany(ctx: SqliteContext, items: SubmitParams[]): SubmitOutcome[] {
  return ctx.write((now) => items.map((item) => submitOne(ctx, item, now)));
}

function submitOne(ctx: SqliteContext, p: SubmitParams, now: number): SubmitOutcome {
  const existing = ctx.stmt('SELECT * FROM operations WHERE tenant = ? AND id = ?').get(p.tenant, p.id) as
    | RawOperation
    | undefined;
  if (existing) {
    const row: OperationRow = toOperationRow(existing);
    return { status: row.digest === p.digest ? 'existing' : 'conflict', row };
  }
  const tomb = ctx.stmt('SELECT digest FROM tombstones WHERE tenant = ? AND id = ?').get(p.tenant, p.id) as
    | { digest: string }
    | undefined;
  if (tomb) return { status: 'expired', digestMatches: tomb.digest === p.digest };

  const maxWaiting = p.limits?.maxWaiting ?? null;
  const maxQueued = p.limits?.maxQueued ?? null;
  if (maxWaiting !== null || maxQueued !== null) {
    const q = ctx
      .stmt('SELECT waiting, running FROM queues WHERE class = ? AND tenant = ?')
      .get(p.class, p.tenant) as { waiting: number; running: number } | undefined;
    const waiting = q?.waiting ?? 0;
    const running = q?.running ?? 0;
    if (maxWaiting !== null && waiting >= maxWaiting) {
      return { status: 'rejected', reason: 'tenant-queue-full', waiting, running };
    }
    if (maxQueued !== null) {
      const c = ctx.stmt('SELECT waiting FROM classes WHERE class = ?').get(p.class) as
        | { waiting: number }
        | undefined;
      if ((c?.waiting ?? 0) >= maxQueued) {
        return { status: 'rejected', reason: 'class-queue-full', waiting: c?.waiting ?? 0, running };
      }
    }
  }

  const runAfter = now + Math.max(0, p.delayMs ?? 0);
  const raw = ctx
    .stmt(
      `INSERT INTO operations (tenant, id, kind, class, digest, input, state, max_attempts, run_after,
                               deadline_at, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?)
       RETURNING *`,
    )
    .get(
      p.tenant,
      p.id,
      p.kind,
      p.class,
      p.digest,
      p.inputJson,
      p.maxAttempts,
      runAfter,
      p.deadlineMs === null ? null : now + p.deadlineMs,
      now,
      now,
    ) as RawOperation;
  queueEnter(ctx, p.class, p.tenant, 1, runAfter, 0, p.limits);
  return { status: 'created', row: toOperationRow(raw) };
}
