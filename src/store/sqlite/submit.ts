/**
 * @module store/sqlite/submit
 * Acceptance of a batch of operations in one transaction. For each item, in this order: an
 * existing record answers (same digest: the operation; other digest: a conflict) before any
 * capacity check, so duplicates never count against capacity; a tombstone refuses a purged id;
 * the tenant's waiting cap refuses with nothing stored; only then the row is inserted and the
 * queue counters move. SQLite serialises writers, so check-then-insert is atomic.
 */
import { createdRow } from '../created-row.js';
import type { OperationRow, SubmitOutcome, SubmitParams } from '../types.js';
import type { SqliteContext } from './connection.js';
import { queueEnter } from './queue-counters.js';
import { operationColumns, operationRowOf } from './rows.js';

/**
 * The record and the tombstone in one statement: most submits find neither. Read as an array:
 * the record's columns first (all NULL when there is none), then the tombstone's digest.
 */
const LOOKUP = `SELECT ${operationColumns('o')}, t.digest FROM (SELECT 1) AS one
  LEFT JOIN operations o ON o.tenant = @tenant AND o.id = @id
  LEFT JOIN tombstones t ON t.tenant = @tenant AND t.id = @id`;

/**
 * The new row's `seq`: NULL, so SQLite numbers it one past the highest left, unless the purge has
 * removed positions at or above that (migration 25): then the one after them, so a cursor taken
 * before the purge never passes a later operation.
 */
const SEQ_AFTER_PURGED = `(SELECT f.seq + 1 FROM seq_floor f
  WHERE f.seq >= coalesce((SELECT max(seq) FROM operations), 0))`;

export function submitMany(ctx: SqliteContext, items: SubmitParams[]): SubmitOutcome[] {
  return ctx.write((now) => items.map((item) => submitOne(ctx, item, now)));
}

function submitOne(ctx: SqliteContext, p: SubmitParams, now: number): SubmitOutcome {
  const found = ctx.rawStmt(LOOKUP).get({ tenant: p.tenant, id: p.id }) as unknown[];
  if (found[0] !== null) {
    const row: OperationRow = operationRowOf(found);
    return { status: row.digest === p.digest ? 'existing' : 'conflict', row };
  }
  const tomb = found[found.length - 1] as string | null;
  if (tomb !== null) return { status: 'expired', digestMatches: tomb === p.digest };

  const maxWaiting = p.limits?.maxWaiting ?? null;
  const maxQueued = p.limits?.maxQueued ?? null;
  if (maxWaiting !== null || maxQueued !== null) {
    // The tenant's counters and the class's, in one statement.
    const counts = ctx
      .stmt(
        `SELECT q.waiting, q.running, q.ready_at, c.waiting AS class_waiting FROM (SELECT 1) AS one
           LEFT JOIN queues q ON q.class = @class AND q.tenant = @tenant
           LEFT JOIN classes c ON c.class = @class`,
      )
      .get({ class: p.class, tenant: p.tenant }) as {
      waiting: number | null;
      running: number | null;
      ready_at: number | null;
      class_waiting: number | null;
    };
    const waiting = counts.waiting ?? 0;
    const running = counts.running ?? 0;
    if (maxWaiting !== null && waiting >= maxWaiting) {
      const dueInMs = waiting > 0 && counts.ready_at !== null ? Math.max(0, counts.ready_at - now) : null;
      return { status: 'rejected', reason: 'tenant-queue-full', waiting, running, dueInMs };
    }
    const classWaiting = counts.class_waiting ?? 0;
    if (maxQueued !== null && classWaiting >= maxQueued) {
      return {
        status: 'rejected',
        reason: 'class-queue-full',
        waiting: classWaiting,
        running,
        dueInMs: null,
      };
    }
  }

  const runAfter = now + Math.max(0, p.delayMs ?? 0);
  const deadlineAt = p.deadlineMs === null ? null : now + p.deadlineMs;
  const { seq } = ctx
    .stmt(
      `INSERT INTO operations (seq, tenant, id, kind, class, digest, input, state, max_attempts, run_after,
                               deadline_at, created_at, updated_at)
       VALUES (${SEQ_AFTER_PURGED}, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?)
       RETURNING seq`,
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
      deadlineAt,
      now,
      now,
    ) as { seq: number };
  queueEnter(ctx, p.class, p.tenant, 1, runAfter, 0, p.limits);
  return { status: 'created', row: createdRow(p, { seq, createdAt: now, runAfter, deadlineAt }) };
}
