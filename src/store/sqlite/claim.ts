/**
 * @module store/sqlite/claim
 * The claim: take up to `limit` ready operations of one class, fairly across tenants.
 *
 * Fairness is start-time fair queuing over the `queues` rows: each tenant has a virtual time;
 * the claim repeatedly serves the eligible tenant with the lowest one (ready work, under its
 * `max_running`) and advances it by 1 / weight. A tenant with 10,000 waiting operations and a
 * tenant with one therefore alternate; with weights they share in proportion.
 *
 * Cost: the candidates come from the `queues_schedule` index in virtual-time order and each
 * tenant's next operations from `operations_ready`, so a claim reads O(limit) index entries
 * whatever the backlog. `ready_at` may be early (a cancelled operation leaves it); the claim then
 * finds nothing for that tenant and recomputes it, so it is never late.
 */
import type { ClaimParams, ClaimResult, OperationRow } from '../types.js';
import type { SqliteContext } from './connection.js';
import { classWaiting } from './queue-counters.js';
import { countRetryBudget } from './retry-budget.js';
import { type RawOperation, toOperationRow } from './rows.js';

interface Candidate {
  tenant: string;
  running: number;
  max_running: number | null;
  vtime: number;
  weight: number;
  ops: number[];
  taken: number;
}

const MAX_ROUNDS = 4;

export function claimMany(ctx: SqliteContext, p: ClaimParams): ClaimResult {
  return ctx.write((now) => {
    const rows: OperationRow[] = [];
    const seen = new Set<string>();
    for (let round = 0; round < MAX_ROUNDS && rows.length < p.limit; round++) {
      const want = p.limit - rows.length;
      const fresh = (
        ctx
          .stmt(
            `SELECT tenant, running, max_running, vtime, weight FROM queues
             WHERE class = ? AND ready_at IS NOT NULL AND ready_at <= ?
               AND (max_running IS NULL OR running < max_running)
             ORDER BY vtime, tenant LIMIT ?`,
          )
          .all(p.class, now, want + seen.size) as Candidate[]
      ).filter((c) => !seen.has(c.tenant));
      if (fresh.length === 0) break;
      for (const c of fresh) {
        seen.add(c.tenant);
        const room = Math.min(want, c.max_running === null ? want : c.max_running - c.running);
        c.ops = (
          ctx
            .stmt(
              `SELECT seq FROM operations
               WHERE class = ? AND tenant = ? AND state = 'queued' AND run_after <= ?
               ORDER BY run_after, seq LIMIT ?`,
            )
            .all(p.class, c.tenant, now, room) as Array<{ seq: number }>
        ).map((r) => r.seq);
        c.taken = 0;
      }
      // Serve the lowest virtual time first, one operation at a time.
      const picks: Array<{ seq: number; c: Candidate }> = [];
      while (picks.length < want) {
        let best: Candidate | undefined;
        for (const c of fresh) if (c.taken < c.ops.length && (!best || c.vtime < best.vtime)) best = c;
        if (!best) break;
        picks.push({ seq: best.ops[best.taken]!, c: best });
        best.taken++;
        best.vtime += 1 / best.weight;
      }
      const update = ctx.stmt(
        `UPDATE operations SET state = 'running', attempt = attempt + 1, epoch = epoch + 1, started_at = ?,
           lease_owner = ?, lease_expires_at = ?, updated_at = ?
         WHERE seq = ? RETURNING *`,
      );
      for (const pick of picks) {
        rows.push(toOperationRow(update.get(now, p.owner, now + p.leaseMs, now, pick.seq) as RawOperation));
      }
      const settle = ctx.stmt(
        `UPDATE queues SET running = running + @n, waiting = waiting - @n, vtime = @vtime,
           ready_at = (SELECT min(run_after) FROM operations
                       WHERE class = @class AND tenant = @tenant AND state = 'queued')
         WHERE class = @class AND tenant = @tenant`,
      );
      for (const c of fresh) settle.run({ n: c.taken, vtime: c.vtime, class: p.class, tenant: c.tenant });
      classWaiting(ctx, p.class, -picks.length);
    }
    const firsts = rows.filter((r) => r.attempt === 1).length;
    if (p.retryBudget && firsts > 0) countRetryBudget(ctx, now, p.retryBudget, 'firsts', firsts);
    return { now, rows };
  });
}
