/**
 * @module store/sqlite/budgets
 * Spend budgets and call-rate caps for paid providers, enforced at step 2 of the effect
 * protocol, inside the transaction that writes the `pending` row: a refusal writes nothing and
 * no request is sent. Windows are fixed (`window_start = floor(now / windowMs) · windowMs`).
 *
 * Accounting: a spend is *reserved* when the effect may be about to happen, *committed* when the
 * journal says `committed`, *released* when it certainly did not happen (`absent`, `failed`). A
 * crash leaves the reservation on the pending effect until it is settled; it only ever counts
 * against the window it was made in, so it cannot hold budget forever. Call-rate draws are
 * committed at once: a request sent is a request made.
 */
import { BudgetExhausted, OperationLimitExceeded } from '../../core/errors/index.js';
import type { BudgetCharge, BudgetUsage, BudgetUsageParams } from '../types.js';
import type { SqliteContext } from './connection.js';
import { OF_OP } from './rows.js';

export interface Reservation {
  key: string;
  windowStart: number;
  cost: number;
}

const windowStart = (now: number, windowMs: number) => Math.floor(now / windowMs) * windowMs;

/**
 * Checks every charge, then applies them all (all or nothing). Spend charges are reserved and
 * returned; rate charges are committed.
 */
export function drawBudgets(
  ctx: SqliteContext,
  now: number,
  charges: { spend?: BudgetCharge[]; rates?: BudgetCharge[] },
): Reservation[] {
  const all = [
    ...(charges.rates ?? []).map((c) => ({ c, column: 'committed' as const })),
    ...(charges.spend ?? []).map((c) => ({ c, column: 'reserved' as const })),
  ];
  for (const { c } of all) {
    const start = windowStart(now, c.windowMs);
    const row = ctx
      .stmt('SELECT reserved + committed AS used FROM budgets WHERE key = ? AND window_start = ?')
      .get(c.key, start) as { used: number } | undefined;
    if ((row?.used ?? 0) + c.cost > c.limit) throw new BudgetExhausted(c.key, start + c.windowMs - now);
  }
  const reservations: Reservation[] = [];
  for (const { c, column } of all) {
    const start = windowStart(now, c.windowMs);
    ctx
      .stmt(
        `INSERT INTO budgets (key, window_start, window_ms, ${column}) VALUES (?, ?, ?, ?)
         ON CONFLICT (key, window_start) DO UPDATE SET ${column} = ${column} + excluded.${column}`,
      )
      .run(c.key, start, c.windowMs, c.cost);
    if (column === 'reserved') reservations.push({ key: c.key, windowStart: start, cost: c.cost });
  }
  return reservations;
}

/** Moves reservations to committed (the effect happened) or gives them back (it did not). */
export function settleReservations(ctx: SqliteContext, json: string | null, how: 'commit' | 'release'): void {
  if (!json) return;
  const moved = how === 'commit' ? 1 : 0;
  const stmt = ctx.stmt(
    'UPDATE budgets SET reserved = reserved - ?, committed = committed + ? WHERE key = ? AND window_start = ?',
  );
  for (const r of JSON.parse(json) as Reservation[]) stmt.run(r.cost, r.cost * moved, r.key, r.windowStart);
}

/** Refuses one more request when the operation has made `maxCalls` already. */
export function checkMaxCalls(
  ctx: SqliteContext,
  tenant: string,
  id: string,
  maxCalls: number | undefined,
): void {
  if (maxCalls === undefined) return;
  const row = ctx.stmt(`SELECT coalesce(sum(sends), 0) AS n FROM effects WHERE ${OF_OP}`).get(tenant, id) as {
    n: number;
  };
  checkCallLimit(id, row.n, maxCalls);
}

/** The same, for a caller that has read the operation's requests so far (`made`) itself. */
export function checkCallLimit(id: string, made: number, maxCalls: number | undefined): void {
  if (maxCalls !== undefined && made + 1 > maxCalls) {
    throw new OperationLimitExceeded(
      'provider-calls',
      `operation ${id} has made ${made} provider requests; its limit is ${maxCalls}`,
    );
  }
}

/**
 * The windows in effect, by their end (migration 26): most windows kept have ended. Named, since
 * SQLite would otherwise read the key's range, or every window in key order to skip the sort.
 */
export const USAGE_SQL = `SELECT key, window_start, window_ms, reserved, committed FROM budgets INDEXED BY budgets_end
  WHERE window_start + window_ms > ? AND key >= ? AND key < ? ORDER BY key, window_start`;

/**
 * One tenant's windows in effect, by the tenant its keys name (migration 29). The index's
 * expression and its condition are repeated as written there: SQLite matches them by their text.
 */
export const TENANT_USAGE_SQL = `SELECT key, window_start, window_ms, reserved, committed FROM budgets INDEXED BY budgets_tenant
  WHERE instr(key, ':tenant:') > 0 AND substr(key, instr(key, ':tenant:') + 8) = ?
    AND window_start + window_ms > ? AND key >= ? AND key < ? ORDER BY key, window_start`;

export function budgetUsage(ctx: SqliteContext, { prefix, since, tenant }: BudgetUsageParams): BudgetUsage[] {
  const range = [prefix ?? '', prefix ? `${prefix}\uffff` : '\uffff'];
  const rows =
    tenant === undefined
      ? ctx.stmt(USAGE_SQL).all(since, ...range)
      : ctx.stmt(TENANT_USAGE_SQL).all(tenant, since, ...range);
  return (
    rows as Array<{
      key: string;
      window_start: number;
      window_ms: number;
      reserved: number;
      committed: number;
    }>
  ).map((r) => ({
    key: r.key,
    windowStart: r.window_start,
    windowMs: r.window_ms,
    reserved: r.reserved,
    committed: r.committed,
  }));
}
