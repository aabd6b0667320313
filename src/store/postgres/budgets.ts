/**
 * @module store/postgres/budgets
 * Spend budgets and call-rate caps (the rules of store/sqlite/budgets.ts). The draws themselves
 * happen inside the migration's `effect_begin` / `effect_record_send` (through `budget_draw`,
 * under the budget rows' locks, all or nothing) and are settled by `effect_mark` and reconcile
 * (`budget_settle`); this module turns charges into that function's arguments and reads usage.
 */
import { InvalidArgument } from '../../core/errors/index.js';
import type { BudgetCharge, BudgetUsage, BudgetUsageParams } from '../types.js';
import type { PgContext } from './connection.js';
import { num } from './rows.js';

/** The `p_b_*` arguments of effect_begin / effect_record_send: rates first, then spend (SQLite's order). */
export type ChargeArrays = [string[], number[], number[], number[], boolean[]];

/**
 * Budget amounts are whole units (cents, calls): the columns are bigint. The engine validates
 * them (admission/budgets.ts); a fraction here is a caller's bug, refused before any draw.
 */
function whole(what: string, v: number, min: number): number {
  if (!Number.isSafeInteger(v) || v < min)
    throw new InvalidArgument(`budget ${what} must be an integer ≥ ${min}`);
  return v;
}

export function chargeArrays(charges: { spend?: BudgetCharge[]; rates?: BudgetCharge[] }): ChargeArrays {
  const all = [
    ...(charges.rates ?? []).map((c) => ({ c, spend: false })),
    ...(charges.spend ?? []).map((c) => ({ c, spend: true })),
  ];
  return [
    all.map(({ c }) => c.key),
    all.map(({ c }) => whole('limit', c.limit, 0)),
    all.map(({ c }) => whole('windowMs', c.windowMs, 1)),
    all.map(({ c }) => whole('cost', c.cost, 0)),
    all.map(({ spend }) => spend),
  ];
}

/**
 * Budget windows still open at `since` (or ended after it), optionally under a key prefix, and
 * optionally of one tenant: by the tenant its keys name (migration 29, whose expression and
 * condition the statement repeats so that the planner matches them).
 */
export async function budgetUsage(
  ctx: PgContext,
  { prefix, since, tenant }: BudgetUsageParams,
): Promise<BudgetUsage[]> {
  const ofTenant =
    tenant === undefined
      ? ''
      : `AND strpos(key, ':tenant:') > 0 AND substr(key, strpos(key, ':tenant:') + 8) = $3`;
  // By the windows' end (migration 26), planned on each run: the table starts empty, and a plan
  // cached then would scan it for ever after.
  const rows = await ctx.queryEach<{
    key: string;
    window_start: string;
    window_ms: string;
    reserved: string;
    committed: string;
  }>(
    `SELECT key, window_start, window_ms, reserved, committed FROM {s}.budgets
      WHERE window_start + window_ms > $1 AND starts_with(key, $2) ${ofTenant}
      ORDER BY key, window_start`,
    tenant === undefined ? [Math.round(since), prefix ?? ''] : [Math.round(since), prefix ?? '', tenant],
  );
  return rows.map((r) => ({
    key: r.key,
    windowStart: num(r.window_start)!,
    windowMs: num(r.window_ms),
    reserved: num(r.reserved)!,
    committed: num(r.committed)!,
  }));
}
