/**
 * @module store/postgres/maintenance
 * The rescuer (expired leases) and the retention purge (the rules of
 * store/sqlite/maintenance.ts), in bounded batches. Both take their rows `FOR UPDATE SKIP
 * LOCKED`, so several rescuers or purgers in different processes split the work instead of
 * colliding, and a row some other transaction holds (a finishing attempt, a cancel) is left
 * for the next pass.
 *
 * The purge also deletes spend windows that ended more than a day ago and call-rate windows that
 * ended (skipping, as it skips operations, those another transaction holds), retry-budget buckets
 * older than a day, and the queue rows of tenants it left with no operation.
 *
 * The rescuer decides with core/decisions.ts `afterLeaseExpiry`, on facts read from the journal
 * after the rows are locked (a later statement: it sees every effect written before the lock).
 *
 * Both plan their statements on every run (`planEach`): they read ranges (leases expired by now,
 * rows finished before the cutoff) of tables that grow from empty, and a plan cached for the
 * connection while a table was small stays a full scan once it is large.
 */
import { afterLeaseExpiry, leaseExpiredError } from '../../core/decisions.js';
import { byteOrder } from '../byte-order.js';
import type { PurgeParams, PurgeResult, RescuedOperation, RescueParams } from '../types.js';
import type { PgContext, Query } from './connection.js';
import { jsonText, ms, num, type PgRow } from './rows.js';

interface Expired extends PgRow {
  seq: string;
  tenant: string;
  id: string;
  kind: string;
  class: string;
  attempt: number;
  max_attempts: number;
  /** A bigint: passed back as it came. */
  epoch: string;
  lease_expiries: number;
  deadline_at: string | null;
  run_after: string;
  cancel: string | null;
  lease_owner: string | null;
  started_at: string | null;
  created_at: string;
  tx_now: string;
}

/** One transaction of maintenance: its statements are planned on every run (module header). */
function maintenanceTx<T>(ctx: PgContext, fn: (q: Query) => Promise<T>): Promise<T> {
  return ctx.tx(fn, { planEach: true });
}

/**
 * The committed class deltas of transactional submits, folded into their class rows so that they
 * stay few (migration 31): one class per statement, each its own transaction, so that the fold
 * holds nothing while it could wait. Returns the delta rows folded.
 */
export async function foldClassDeltas(ctx: PgContext): Promise<number> {
  const classes = await ctx.query<{ class: string }>('SELECT DISTINCT class FROM {s}.class_deltas');
  let folded = 0;
  for (const { class: cls } of classes)
    folded += (await ctx.query<{ n: number }>('SELECT {s}.class_deltas_fold($1) AS n', [cls]))[0]?.n ?? 0;
  return folded;
}

/** Moves up to `p.limit` operations whose lease expired back to the queue, or parks them. */
export function rescue(ctx: PgContext, p: RescueParams): Promise<RescuedOperation[]> {
  return maintenanceTx(ctx, async (q) => {
    const expired = await q<Expired>(
      `SELECT o.*, t.now AS tx_now FROM (SELECT {s}.now_ms($1::bigint) AS now) t, {s}.operations o
        WHERE o.state = 'running' AND o.lease_expires_at < t.now
        ORDER BY o.lease_expires_at, o.seq LIMIT $2
          FOR UPDATE OF o SKIP LOCKED`,
      [ctx.now(), p.limit],
    );
    if (expired.length === 0) return [];
    const now = num(expired[0]!.tx_now)!;
    const facts = await q<{
      tenant: string;
      op_id: string;
      pending: boolean;
      no_return: boolean;
      happened: string[] | null;
    }>(
      `SELECT e.tenant, e.op_id, bool_or(e.state = 'pending') AS pending,
              bool_or(e.state IN ('pending', 'committed')) AS no_return,
              array_agg(e.name ORDER BY e.name COLLATE "C") FILTER (WHERE e.state = 'committed') AS happened
         FROM {s}.effects e
        WHERE e.op_seq = ANY ($1::bigint[])
        GROUP BY e.tenant, e.op_id`,
      [expired.map((o) => o.seq)],
    );
    const journal = new Map(facts.map((f) => [`${f.tenant}\u0000${f.op_id}`, f]));
    const rescued: RescuedOperation[] = [];
    const ready = new Set<string>();
    // Operations that went back to the queue, per class: the class counters move last.
    const requeued = new Map<string, number>();
    // Queue rows are locked in (class, tenant) order, as everywhere else, all before the first
    // entry; the entries are then made in the order the leases expired, as on SQLite: an idle
    // tenant re-entering the queue is raised to the least-served tenant's virtual time, so the
    // order of one rescue's entries decides who is served next.
    const pairs = [...new Map(expired.map((o) => [`${o.class}\u0000${o.tenant}`, o])).values()].sort(
      (a, b) => byteOrder(a.class, b.class) || byteOrder(a.tenant, b.tenant),
    );
    await q(
      `SELECT 1 FROM {s}.queues q
         JOIN unnest($1::text[], $2::text[]) AS k(class, tenant) ON q.class = k.class AND q.tenant = k.tenant
        ORDER BY q.class COLLATE "C", q.tenant COLLATE "C"
          FOR UPDATE OF q`,
      [pairs.map((o) => o.class), pairs.map((o) => o.tenant)],
    );
    for (const op of expired) {
      const fact = journal.get(`${op.tenant}\u0000${op.id}`);
      const expiries = op.lease_expiries + 1;
      const decision = afterLeaseExpiry(
        {
          attempt: op.attempt,
          maxAttempts: op.max_attempts,
          leaseExpiries: expiries,
          deadlineAt: num(op.deadline_at),
          cancelRequested: op.cancel === 'requested',
          pastNoReturn: op.cancel === 'requested' && fact?.no_return === true,
          hasPendingEffect: fact?.pending === true,
          effectsHappened: fact?.happened ?? [],
          now,
        },
        p.maxLeaseExpiries,
      );
      const requeue = decision.to === 'queued';
      await q(
        `UPDATE {s}.operations SET state = $2, lease_expiries = $3, run_after = $4, error = coalesce($5, error),
                finished_at = $6, updated_at = $7, lease_owner = NULL, lease_expires_at = NULL,
                cancel = CASE WHEN cancel = 'requested' AND $2 <> 'cancelled' THEN 'too_late' ELSE cancel END
          WHERE seq = $1`,
        [
          op.seq,
          decision.to,
          expiries,
          requeue ? now : op.run_after,
          jsonText(decision.error),
          requeue ? null : now,
          now,
        ],
      );
      await q(
        `INSERT INTO {s}.attempts (op_seq, epoch, attempt, owner, started_at, ended_at, outcome, error)
         VALUES ($1, $2, $3, $4, $5, $6, 'lease-expired', $7)`,
        [
          op.seq,
          op.epoch,
          op.attempt,
          op.lease_owner,
          op.started_at ?? now,
          now,
          jsonText(leaseExpiredError(op.lease_owner)),
        ],
      );
      if (requeue) {
        await q('SELECT {s}.queue_enter($1, $2, 1, $3, 1, false, 1, NULL, NULL)', [op.class, op.tenant, now]);
        ready.add(op.class);
        requeued.set(op.class, (requeued.get(op.class) ?? 0) + 1);
      } else {
        await q('SELECT {s}.queue_leave($1, $2, 0, 1)', [op.class, op.tenant]);
      }
      rescued.push({
        tenant: op.tenant,
        id: op.id,
        kind: op.kind,
        class: op.class,
        to: decision.to,
        endToEndMs: requeue ? null : now - num(op.created_at)!,
      });
    }
    if (requeued.size > 0) {
      await q('SELECT {s}.classes_move($1::text[], $2::integer[])', [
        [...requeued.keys()],
        [...requeued.values()],
      ]);
    }
    if (ctx.notify) for (const cls of ready) await q('SELECT pg_notify({s}.wakeup_channel(), $1)', [cls]);
    return rescued;
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
const NOT_DEAD_WITH_PENDING_EFFECT = `NOT (state = 'dead' AND EXISTS (SELECT 1 FROM {s}.effects e WHERE e.op_seq = o.seq AND e.state = 'pending'))`;

/** Purges old terminal operations to tombstones and deletes old tombstones. */
export function purge(ctx: PgContext, p: PurgeParams): Promise<PurgeResult> {
  return maintenanceTx(ctx, async (q) => {
    const [clock] = await q<{ now: string }>('SELECT {s}.now_ms($1::bigint) AS now', [ctx.now()]);
    const now = num(clock!.now)!;
    const old = await q<{
      seq: string;
      tenant: string;
      id: string;
      kind: string;
      digest: string;
      state: string;
      finished_at: string;
    }>(
      `SELECT seq, tenant, id, kind, digest, state, finished_at FROM {s}.operations o
        WHERE finished_at IS NOT NULL AND finished_at < $1 AND state IN ${PURGEABLE} AND ${NOT_DEAD_WITH_PENDING_EFFECT}
        ORDER BY finished_at LIMIT $2
          FOR UPDATE SKIP LOCKED`,
      [ms(now - p.retentionMs), p.limit],
    );
    if (old.length > 0) {
      await q(
        `WITH k AS (SELECT * FROM unnest($1::text[], $2::text[]) AS k(tenant, id)),
              a AS (DELETE FROM {s}.attempts x WHERE x.op_seq = ANY ($3::bigint[])),
              e AS (DELETE FROM {s}.effects x WHERE x.op_seq = ANY ($3::bigint[])),
              v AS (DELETE FROM {s}.events x USING k WHERE x.tenant = k.tenant AND x.op_id = k.id),
              o AS (DELETE FROM {s}.operations x WHERE x.seq = ANY ($3::bigint[]))
         INSERT INTO {s}.tombstones (tenant, id, kind, digest, state, finished_at, purged_at)
         SELECT * , $8::bigint FROM unnest($1::text[], $2::text[], $4::text[], $5::text[], $6::text[], $7::bigint[])
         ON CONFLICT (tenant, id) DO UPDATE SET kind = excluded.kind, digest = excluded.digest, state = excluded.state,
            finished_at = excluded.finished_at, purged_at = excluded.purged_at`,
        [
          old.map((o) => o.tenant),
          old.map((o) => o.id),
          old.map((o) => o.seq),
          old.map((o) => o.kind),
          old.map((o) => o.digest),
          old.map((o) => o.state),
          old.map((o) => o.finished_at),
          now,
        ],
      );
    }
    // The purged tenants, and those whose rows an earlier pass found held by another transaction.
    const left = skippedQueues.get(ctx) ?? new Set<string>();
    const tenants = new Set([...left, ...old.map((o) => o.tenant)]);
    let queuesDeleted = 0;
    if (tenants.size > 0) {
      const forgot = await forgetQueues(q, [...tenants]);
      queuesDeleted = forgot.deleted;
      // Kept to the next pass (bounded): a transaction that held the row may write nothing in the
      // end (a submit refused, a rollback), and nothing else would ever look at the row again.
      skippedQueues.set(ctx, new Set(forgot.skipped.slice(0, MAX_SKIPPED_TENANTS)));
    }
    const deleted = await q<{ n: number }>(
      `WITH d AS (DELETE FROM {s}.tombstones WHERE finished_at < $1 RETURNING 1) SELECT count(*)::integer AS n FROM d`,
      [ms(now - p.tombstoneMs)],
    );
    // Old budget windows and retry-budget buckets: nothing reads a window once it has ended. A
    // spend window is kept a day after it ended (what was spent, for whoever looks in the table; a
    // reservation settled late lands in it), a call-rate window goes at the next pass, since a
    // per-tenant rate of one-second windows makes a row a second for each busy tenant. A window
    // another transaction holds (settling what an effect reserved in it) is left for the next
    // pass: the purge never waits for a budget row, so it cannot close a cycle with one that takes
    // them in (key, window_start) order (migrations/0024_budget_lock_order.sql). Both are found by
    // their end (migrations/0026_budget_windows_by_end.sql), the rate windows by their key too.
    for (const [ended, rateOnly] of [
      [now - DAY_MS, false],
      [now, true],
    ] as const)
      await q(
        `DELETE FROM {s}.budgets
          WHERE (key, window_start) IN (SELECT key, window_start FROM {s}.budgets
                                         WHERE window_start + window_ms < $1 AND (NOT $2 OR starts_with(key, 'rate:'))
                                           FOR UPDATE SKIP LOCKED)`,
        [ms(ended), rateOnly],
      );
    await q('DELETE FROM {s}.retry_budget WHERE bucket < $1', [ms(now - DAY_MS)]);
    return { purged: old.length, tombstonesDeleted: deleted[0]?.n ?? 0, queuesDeleted };
  });
}

/**
 * Per store, the tenants whose empty queue rows a purge pass found held by another transaction:
 * the next pass looks at them again. Kept in the process only; a row left by a process that stops
 * meanwhile stays, empty and read by nothing but `tenants usage`.
 */
const skippedQueues = new WeakMap<PgContext, Set<string>>();
const MAX_SKIPPED_TENANTS = 10_000;

/**
 * Deletes the queue rows of those of `tenants` left with no operation at all (store.ts
 * `retentionPurge`). The rows are found through `classes`, by the queues' key, rather than by a
 * scan of every tenant's rows. A row another transaction holds (a submit counting the tenant back
 * in) is skipped, and one it changed is read again as it committed, so a tenant that has just
 * submitted keeps its row.
 */
async function forgetQueues(q: Query, tenants: string[]): Promise<{ deleted: number; skipped: string[] }> {
  const rows = await q<{ n: number; skipped: string[] }>(
    `WITH d AS (DELETE FROM {s}.queues q
                 WHERE (q.class, q.tenant) IN (
                   SELECT x.class, x.tenant FROM {s}.classes c
                     JOIN {s}.queues x ON x.class = c.class AND x.tenant = ANY ($1::text[])
                    WHERE x.waiting = 0 AND x.running = 0 AND x.ready_at IS NULL
                      AND NOT EXISTS (SELECT 1 FROM {s}.operations o WHERE o.tenant = x.tenant)
                      FOR UPDATE OF x SKIP LOCKED)
                RETURNING q.tenant),
          -- The rows it would have deleted but for another transaction holding them (this
          -- statement's snapshot still shows the deleted ones: they are left out by name).
          rest AS (SELECT DISTINCT x.tenant FROM {s}.classes c
                     JOIN {s}.queues x ON x.class = c.class AND x.tenant = ANY ($1::text[])
                    WHERE x.waiting = 0 AND x.running = 0 AND x.ready_at IS NULL
                      AND NOT EXISTS (SELECT 1 FROM {s}.operations o WHERE o.tenant = x.tenant)
                      AND x.tenant NOT IN (SELECT d.tenant FROM d))
     SELECT (SELECT count(*)::integer FROM d) AS n, coalesce((SELECT array_agg(tenant) FROM rest), '{}') AS skipped`,
    [tenants],
  );
  return { deleted: rows[0]?.n ?? 0, skipped: rows[0]?.skipped ?? [] };
}
