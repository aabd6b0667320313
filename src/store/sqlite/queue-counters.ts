/**
 * @module store/sqlite/queue-counters
 * Keeps the `queues` row of a (class, tenant), and the `classes` row of its class, in step with
 * its operations, inside the caller's transaction. Called on every move into or out of
 * `queued` / `running`.
 */
import type { QueueLimits } from '../types.js';
import type { SqliteContext } from './connection.js';

/**
 * Operations entered `queued` with the given earliest `run_after`. When the tenant had no ready
 * work, its virtual time is raised to that of the least-served eligible tenant, so time spent
 * idle is not banked as credit to crowd others out later.
 */
export function queueEnter(
  ctx: SqliteContext,
  cls: string,
  tenant: string,
  count: number,
  runAfter: number,
  leftRunning: number,
  limits?: QueueLimits,
): void {
  const params = {
    class: cls,
    tenant,
    count,
    runAfter,
    leftRunning,
    setLimits: limits ? 1 : 0,
    weight: limits?.weight ?? 1,
    maxRunning: limits?.maxRunning ?? null,
    maxWaiting: limits?.maxWaiting ?? null,
  };
  // Most entries find the tenant with ready work due no later than theirs and its limits as they
  // are: only the counters move. SQLite rewrites a row's entry in an index whenever a statement
  // assigns one of its columns, even to the value it holds, so the general UPDATE below, which
  // assigns `vtime` and `ready_at`, would dirty a page of `queues_schedule` on every submit.
  const counted = ctx
    .stmt(
      `UPDATE queues SET waiting = waiting + @count, running = running - @leftRunning
       WHERE class = @class AND tenant = @tenant AND ready_at IS NOT NULL AND ready_at <= @runAfter
         AND (NOT @setLimits
              OR (weight = @weight AND max_running IS @maxRunning AND max_waiting IS @maxWaiting))`,
    )
    .run(params);
  if (counted.changes > 0) {
    classWaiting(ctx, cls, count);
    return;
  }
  // The row exists after a tenant's first operation in the class: an UPDATE, and the INSERT (whose
  // least-served look runs on every execution) only for a first one. SQLite serialises writers,
  // so nothing can create the row between the two.
  const updated = ctx
    .stmt(
      `UPDATE queues SET
         waiting = waiting + @count,
         running = running - @leftRunning,
         vtime = CASE WHEN ready_at IS NULL THEN max(vtime, coalesce(
                   (SELECT q.vtime FROM queues q WHERE q.class = @class AND q.ready_at IS NOT NULL
                    AND (q.max_running IS NULL OR q.running < q.max_running) ORDER BY q.vtime LIMIT 1), vtime))
                 ELSE vtime END,
         ready_at = min(coalesce(ready_at, @runAfter), @runAfter),
         weight = CASE WHEN @setLimits THEN @weight ELSE weight END,
         max_running = CASE WHEN @setLimits THEN @maxRunning ELSE max_running END,
         max_waiting = CASE WHEN @setLimits THEN @maxWaiting ELSE max_waiting END
       WHERE class = @class AND tenant = @tenant`,
    )
    .run(params);
  if (updated.changes === 0) {
    ctx
      .stmt(
        `INSERT INTO queues (class, tenant, waiting, running, ready_at, vtime, weight, max_running, max_waiting)
         VALUES (@class, @tenant, @count, 0, @runAfter,
                 coalesce((SELECT vtime FROM queues WHERE class = @class AND ready_at IS NOT NULL
                           AND (max_running IS NULL OR running < max_running) ORDER BY vtime LIMIT 1), 0),
                 @weight, @maxRunning, @maxWaiting)`,
      )
      .run(params);
  }
  classWaiting(ctx, cls, count);
}

/**
 * The class's count of waiting operations, all tenants together, moves by `delta`; operations
 * that entered also count in `entered`, which only grows (what other processes' idle workers
 * watch: store/sqlite/watch.ts).
 */
export function classWaiting(ctx: SqliteContext, cls: string, delta: number): void {
  if (delta === 0) return;
  ctx
    .stmt(
      `INSERT INTO classes (class, waiting, entered) VALUES (@cls, @delta, max(@delta, 0))
       ON CONFLICT (class) DO UPDATE SET waiting = waiting + excluded.waiting,
         entered = entered + excluded.entered`,
    )
    .run({ cls, delta });
}

/** Operations left `queued` and/or `running` without re-entering the queue. */
export function queueLeave(
  ctx: SqliteContext,
  cls: string,
  tenant: string,
  waiting: number,
  running: number,
): void {
  ctx
    .stmt('UPDATE queues SET waiting = waiting - ?, running = running - ? WHERE class = ? AND tenant = ?')
    .run(waiting, running, cls, tenant);
  classWaiting(ctx, cls, -waiting);
}
