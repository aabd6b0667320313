/**
 * @module store/sqlite/claim
 * The claim: take up to `limit` ready operations of one class, fairly across tenants.
 *
 * Fairness is start-time fair queuing over the `queues` rows: each tenant has a virtual time;
 * the claim repeatedly serves the eligible tenant with the lowest one (ready work, under its
 * `max_running`) and advances it by 1 / weight. A tenant with 10,000 waiting operations and a
 * tenant with one therefore alternate; with weights they share in proportion.
 *
 * The class keeps a virtual clock (`classes.vclock`): the latest start tag served. Every tenant
 * backlogged throughout is at or above it, so a candidate below it was not (idle, its work
 * delayed, or at its running cap) and starts from the clock: time spent waiting is not banked as
 * credit, however the tenant's work became ready (a submit, a delay that ran out, a retry).
 *
 * Cost: the candidates come from the `queues_schedule` index in virtual-time order and each
 * tenant's next operations from `operations_ready`, so a claim reads O(limit) index entries
 * whatever the backlog. Each candidate's operations are read up to its share (`shares`: the
 * serving loop run on counts, as if every candidate had all it has room for), not up to the whole
 * claim: with 32 tenants each holding a backlog that is 32 entries, not 1,024. Only when a
 * candidate has fewer ready than its share, which hands its turns to the others, are theirs read
 * up to their room; the picks are then exactly those of reading everything. `ready_at` may be
 * early (a cancelled operation leaves it); the claim then finds nothing for that tenant and
 * recomputes it, so it is never late.
 *
 * With `passOver` the claim passes over operations on their last chance (that many lease expiries or
 * more): a tenant whose ready work is all such is served nothing, and its `ready_at` stays (other
 * workers may take it).
 *
 * A claim of its own transaction commits without syncing the WAL (`writeUnsynced`; inside a
 * worker's ends-and-claim transaction it joins that one, synced for the ends). Its loss to a power
 * cut is safe, as on PostgreSQL (ADR 5): the operation is back in the queue, the next claim gives
 * it another epoch, and every later synced commit — the worker's own journal entry or end among
 * them — syncs the WAL file, and with it the claim's frames, first.
 */
import type { ClaimParams, ClaimResult, OperationRow } from '../types.js';
import type { SqliteContext } from './connection.js';
import { classWaiting } from './queue-counters.js';
import { countRetryBudget } from './retry-budget.js';
import { operationColumns, operationRowOf } from './rows.js';

interface Candidate {
  tenant: string;
  running: number;
  max_running: number | null;
  vtime: number;
  weight: number;
  /** Operations it may start in this round: the claim's want, or fewer under its running cap. */
  room: number;
  ops: number[];
  taken: number;
}

/** A ready operation of a candidate; `never`: never started before (the retry budget's firsts). */
type ReadyRow = { seq: number; never: number };

const MAX_ROUNDS = 4;

/**
 * The order in which a claim round serves its candidates, as their indexes: the lowest virtual
 * time first (ties: the earlier candidate), each advanced by 1 / weight per operation and served
 * at most `supply[k]`, `want` operations in all. The PostgreSQL claim (`fair_order`, migration 5,
 * with migration 8's short way for one candidate) is the same loop; a property test compares them.
 */
export function serviceOrder(
  candidates: ReadonlyArray<Pick<Candidate, 'vtime' | 'weight'>>,
  supply: readonly number[],
  want: number,
): number[] {
  const served = candidates.map(() => 0);
  const vtime = candidates.map((c) => c.vtime);
  const order: number[] = [];
  while (order.length < want) {
    let best = -1;
    for (let k = 0; k < candidates.length; k++) {
      if (served[k]! < supply[k]! && (best < 0 || vtime[k]! < vtime[best]!)) best = k;
    }
    if (best < 0) break;
    served[best]!++;
    vtime[best]! += 1 / candidates[best]!.weight;
    order.push(best);
  }
  return order;
}

/** Each candidate's share of `want`: what the round serves it when every candidate has its room ready. */
export function shares(
  candidates: ReadonlyArray<Pick<Candidate, 'vtime' | 'weight' | 'room'>>,
  want: number,
): number[] {
  const counts = candidates.map(() => 0);
  for (const k of serviceOrder(
    candidates,
    candidates.map((c) => c.room),
    want,
  ))
    counts[k]!++;
  return counts;
}

/**
 * Reads each candidate's ready operations (`ready(c, limit)`, oldest first) up to its share of
 * `want`, and, when one comes short of its share (its turns then go to the others), every
 * candidate's up to its room: what `serve` then picks is what it would pick had every candidate
 * been read up to its room.
 */
export function readShares<C extends Pick<Candidate, 'vtime' | 'weight' | 'room' | 'ops'>>(
  candidates: C[],
  want: number,
  ready: (c: C, limit: number) => number[],
): void {
  const share = shares(candidates, want);
  candidates.forEach((c, k) => {
    c.ops = share[k]! > 0 ? ready(c, share[k]!) : [];
  });
  if (candidates.some((c, k) => c.ops.length < share[k]!)) {
    candidates.forEach((c, k) => {
      if (c.ops.length === share[k]! && share[k]! < c.room) c.ops = ready(c, c.room);
    });
  }
}

/**
 * Serves the candidates' read operations in service order, advancing their virtual times; each
 * pick carries its start tag (its tenant's virtual time when it was served).
 */
export function serve<C extends Pick<Candidate, 'vtime' | 'weight' | 'ops' | 'taken'>>(
  candidates: C[],
  want: number,
): Array<{ seq: number; c: C; start: number }> {
  const order = serviceOrder(
    candidates,
    candidates.map((c) => c.ops.length - c.taken),
    want,
  );
  return order.map((k) => {
    const c = candidates[k]!;
    const seq = c.ops[c.taken]!;
    const start = c.vtime;
    c.taken++;
    c.vtime += 1 / c.weight;
    return { seq, c, start };
  });
}

/**
 * Starts one picked operation and returns it, read as an array (rows.ts `operationRowOf`). The
 * epoch grows by 1 plus a random step below 2^31 (`random()` is SQLite's 64-bit PRNG): a claim
 * whose commit is lost (a power cut under `synchronous = NORMAL`, a restored copy of the file) is
 * not reissued under the same number, so the worker still holding it is refused at its next
 * fenced write. PostgreSQL's claim does the same (its migration 15).
 */
const START = `UPDATE operations SET state = 'running', attempt = attempt + 1,
    epoch = epoch + 1 + (random() & 2147483647), started_at = ?,
    lease_owner = ?, lease_expires_at = ?, updated_at = ?
  WHERE seq = ? RETURNING ${operationColumns()}`;

export function claimMany(ctx: SqliteContext, p: ClaimParams): ClaimResult {
  return ctx.writeUnsynced((now) => {
    const rows: OperationRow[] = [];
    const seen = new Set<string>();
    // The class's virtual clock: the latest start tag served (see the module header).
    const clock = ctx.stmt('SELECT vclock FROM classes WHERE class = ?').get(p.class) as
      | { vclock: number }
      | undefined;
    let vclock = clock?.vclock ?? 0;
    // Operations never started before: a first attempt is the claim that starts one of these, not
    // any claim at attempt 1, which a deferral or a release gives back (retry budget's firsts).
    const neverStarted = new Set<number>();
    let firsts = 0;
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
        c.vtime = Math.max(c.vtime, vclock);
        c.room = Math.min(want, c.max_running === null ? want : c.max_running - c.running);
        c.taken = 0;
      }
      const ready = ctx.stmt(
        `SELECT seq, started_at IS NULL AS never FROM operations
         WHERE class = ? AND tenant = ? AND state = 'queued' AND run_after <= ? AND (? IS NULL OR lease_expiries < ?)
         ORDER BY run_after, seq LIMIT ?`,
      );
      const passOver = p.passOver ?? null;
      readShares(fresh, want, (c, limit) => {
        const rows = ready.all(p.class, c.tenant, now, passOver, passOver, limit) as ReadyRow[];
        for (const r of rows) if (r.never) neverStarted.add(r.seq);
        return rows.map((r) => r.seq);
      });
      const picks = serve(fresh, want);
      const update = ctx.rawStmt(START);
      for (const pick of picks) {
        rows.push(operationRowOf(update.get(now, p.owner, now + p.leaseMs, now, pick.seq) as unknown[]));
        if (neverStarted.has(pick.seq)) firsts++;
      }
      const settle = ctx.stmt(
        `UPDATE queues SET running = running + @n, waiting = waiting - @n, vtime = @vtime,
           ready_at = (SELECT min(run_after) FROM operations
                       WHERE class = @class AND tenant = @tenant AND state = 'queued')
         WHERE class = @class AND tenant = @tenant`,
      );
      for (const c of fresh) settle.run({ n: c.taken, vtime: c.vtime, class: p.class, tenant: c.tenant });
      classWaiting(ctx, p.class, -picks.length);
      for (const pick of picks) vclock = Math.max(vclock, pick.start);
      if (picks.length > 0)
        ctx.stmt('UPDATE classes SET vclock = max(vclock, ?) WHERE class = ?').run(vclock, p.class);
    }
    if (p.retryBudget && firsts > 0) countRetryBudget(ctx, now, p.retryBudget, 'firsts', firsts);
    return { now, rows };
  });
}
