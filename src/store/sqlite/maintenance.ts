/**
 * @module store/sqlite/maintenance
 * The rescuer (expired leases) and the retention purge. Both work in bounded batches so a large
 * backlog never makes one transaction hold the write lock for long. The purge also deletes spend
 * windows that ended more than a day ago and call-rate windows that ended, retry-budget buckets
 * older than a day, and the queue rows of tenants it left with no operation.
 */
import { afterLeaseExpiry, leaseExpiredError } from '../../core/decisions.js';
import type { PurgeParams, PurgeResult, RescuedOperation, RescueParams } from '../types.js';
import type { SqliteContext } from './connection.js';
import { effectsHappened, hasPendingEffect, pastNoReturn } from './finish.js';
import { queueEnter, queueLeave } from './queue-counters.js';
import { jsonText, type RawOperation } from './rows.js';

export function rescue(ctx: SqliteContext, p: RescueParams): RescuedOperation[] {
  return ctx.write((now) => {
    const expired = ctx
      .stmt(
        `SELECT * FROM operations WHERE state = 'running' AND lease_expires_at < ? ORDER BY lease_expires_at, seq LIMIT ?`,
      )
      .all(now, p.limit) as RawOperation[];
    return expired.map((op) => {
      const expiries = op.lease_expiries + 1;
      const decision = afterLeaseExpiry(
        {
          attempt: op.attempt,
          maxAttempts: op.max_attempts,
          leaseExpiries: expiries,
          deadlineAt: op.deadline_at,
          cancelRequested: op.cancel === 'requested',
          pastNoReturn: op.cancel === 'requested' && pastNoReturn(ctx, op.seq),
          hasPendingEffect: hasPendingEffect(ctx, op.seq),
          effectsHappened: effectsHappened(ctx, op.seq),
          now,
        },
        p.maxLeaseExpiries,
      );
      const requeue = decision.to === 'queued';
      ctx
        .stmt(
          `UPDATE operations SET state = ?, lease_expiries = ?, run_after = ?, error = coalesce(?, error),
             finished_at = ?, updated_at = ?, lease_owner = NULL, lease_expires_at = NULL,
             cancel = CASE WHEN cancel = 'requested' AND ? <> 'cancelled' THEN 'too_late' ELSE cancel END
           WHERE seq = ?`,
        )
        .run(
          decision.to,
          expiries,
          requeue ? now : op.run_after,
          jsonText(decision.error),
          requeue ? null : now,
          now,
          decision.to,
          op.seq,
        );
      ctx
        .stmt(
          `INSERT INTO attempts (op_seq, epoch, attempt, owner, started_at, ended_at, outcome, error)
           VALUES (?, ?, ?, ?, ?, ?, 'lease-expired', ?)`,
        )
        .run(
          op.seq,
          op.epoch,
          op.attempt,
          op.lease_owner,
          op.started_at ?? now,
          now,
          jsonText(leaseExpiredError(op.lease_owner)),
        );
      if (requeue) queueEnter(ctx, op.class, op.tenant, 1, now, 1);
      else queueLeave(ctx, op.class, op.tenant, 0, 1);
      return {
        tenant: op.tenant,
        id: op.id,
        kind: op.kind,
        class: op.class,
        to: decision.to,
        endToEndMs: requeue ? null : now - op.created_at,
      };
    });
  });
}

/** How long budget windows and retry-budget buckets are kept after they ended. */
const DAY_MS = 86_400_000;

/**
 * Terminal states the purge removes. `needs_reconciliation` is never purged: a person owes it an
 * answer. Nor is a `dead` one whose journal still holds an effect of unknown outcome (out of
 * attempts mid-call): its row is the only record of a charge that may exist, and a redrive settles
 * it under the same key. (A handler that caught an ambiguous error and succeeded anyway chose to
 * leave its effect unknown; nothing would ever settle it, so it goes as any other.)
 */
const PURGEABLE = `('succeeded', 'failed', 'cancelled', 'dead')`;
const NOT_DEAD_WITH_PENDING_EFFECT = `NOT (state = 'dead' AND EXISTS (SELECT 1 FROM effects e WHERE e.op_seq = operations.seq AND e.state = 'pending'))`;

export function purge(ctx: SqliteContext, p: PurgeParams): PurgeResult {
  return ctx.write((now) => {
    const old = ctx
      .stmt(
        `SELECT seq, tenant, id, kind, digest, state, finished_at FROM operations
         WHERE finished_at IS NOT NULL AND finished_at < ? AND state IN ${PURGEABLE} AND ${NOT_DEAD_WITH_PENDING_EFFECT}
         ORDER BY finished_at LIMIT ?`,
      )
      .all(now - p.retentionMs, p.limit) as Array<
      Pick<RawOperation, 'seq' | 'tenant' | 'id' | 'kind' | 'digest' | 'state'> & { finished_at: number }
    >;
    for (const op of old) {
      ctx
        .stmt(
          `INSERT OR REPLACE INTO tombstones (tenant, id, kind, digest, state, finished_at, purged_at)
           VALUES (?, ?, ?, ?, ?, ?, ?)`,
        )
        .run(op.tenant, op.id, op.kind, op.digest, op.state, op.finished_at, now);
      ctx.stmt('DELETE FROM attempts WHERE op_seq = ?').run(op.seq);
      ctx.stmt('DELETE FROM effects WHERE op_seq = ?').run(op.seq);
      ctx.stmt('DELETE FROM events WHERE tenant = ? AND op_id = ?').run(op.tenant, op.id);
      ctx.stmt('DELETE FROM operations WHERE seq = ?').run(op.seq);
    }
    // The positions just freed stay taken (migration 25): SQLite would otherwise give the newest
    // of them to the next submit.
    if (old.length > 0)
      ctx
        .stmt('UPDATE seq_floor SET seq = max(seq, ?)')
        .run(old.reduce((top, op) => Math.max(top, op.seq), 0));
    // The queue rows of tenants left with no operation at all: a tenant that comes back is counted
    // in afresh by its next submit, which carries its limits. Found by the queues' key, through
    // `classes`, not by a scan of every tenant's rows.
    let queuesDeleted = 0;
    for (const tenant of new Set(old.map((op) => op.tenant)))
      queuesDeleted += ctx
        .stmt(
          `DELETE FROM queues
            WHERE class IN (SELECT class FROM classes) AND tenant = @tenant
              AND waiting = 0 AND running = 0 AND ready_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM operations WHERE tenant = @tenant)`,
        )
        .run({ tenant }).changes;
    const tombs = ctx.stmt('DELETE FROM tombstones WHERE finished_at < ?').run(now - p.tombstoneMs);
    // Old budget windows and retry-budget buckets: nothing reads a window once it has ended. A
    // spend window is kept a day after it ended (what was spent, for whoever looks in the table; a
    // reservation settled late lands in it), a call-rate window goes at the next pass, since a
    // per-tenant rate of one-second windows makes a row a second for each busy tenant. Both are
    // found by their end (migrations/0026_budget_windows_by_end.sql), the rate windows by key.
    ctx.stmt('DELETE FROM budgets WHERE window_start + window_ms < ?').run(now - DAY_MS);
    ctx
      .stmt(`DELETE FROM budgets WHERE key >= 'rate:' AND key < 'rate;' AND window_start + window_ms < ?`)
      .run(now);
    ctx.stmt('DELETE FROM retry_budget WHERE bucket < ?').run(now - DAY_MS);
    return { purged: old.length, tombstonesDeleted: tombs.changes, queuesDeleted };
  });
}
