/**
 * @module admission/budgets
 * Spend and call budgets for paid providers, from configuration to the charges the store
 * enforces at step 2 of the effect protocol (store/<driver>/budgets). Enforced, not alerted:
 * over budget, no request is sent.
 *
 * @example
 * ```ts
 * new Sluice({ store, providers: {
 *   payments: {
 *     perTenant: { limit: 1_000_000, windowMs: 3_600_000 }, // 1,000,000 cents per tenant per hour
 *     global: { limit: 20_000_000, windowMs: 3_600_000 },
 *     rate: { limit: 50, windowMs: 1000 },                  // 50 calls per second, all processes
 *     ratePerTenant: { limit: 10, windowMs: 1000 },         // and 10 of them per tenant
 *     onExhausted: 'wait',
 *   },
 * } });
 * // in a handler: ctx.effect('charge', { provider: 'payments', cost: input.amount_cents, call })
 * ```
 */
import { bounded, knownKeys, MAX_DURATION_MS } from '../core/bounds.js';
import { InvalidArgument, Permanent } from '../core/errors/index.js';
import type { BudgetCharge } from '../store/types.js';

export interface BudgetWindow {
  limit: number;
  windowMs: number;
}

export interface ProviderBudget {
  /** Spend (units of `cost`) per tenant per window; `tenants` overrides the limit for some. */
  perTenant?: BudgetWindow & { tenants?: Record<string, number> };
  /** Spend of all tenants together per window. */
  global?: BudgetWindow;
  /** Requests per window across the whole service (every send counts as one). */
  rate?: BudgetWindow;
  /**
   * Requests per tenant per window (every send counts as one), so that one tenant cannot use the
   * provider's whole `rate`; `tenants` overrides the limit for some.
   */
  ratePerTenant?: BudgetWindow & { tenants?: Record<string, number> };
  /** Over budget: `wait` for the window to reset (default; the deadline still applies) or `fail`. */
  onExhausted?: 'wait' | 'fail';
}

export type ProviderBudgets = Record<string, ProviderBudget>;

export interface EffectCharges {
  spend: BudgetCharge[];
  rates: BudgetCharge[];
  onExhausted: 'wait' | 'fail';
}

const NONE: EffectCharges = { spend: [], rates: [], onExhausted: 'wait' };

/** A budget's limit: kept in a 64-bit column and summed in JavaScript numbers, a safe integer. */
const checkLimit = (where: string, limit: number) =>
  bounded(where, limit, 0, { min: 0, max: Number.MAX_SAFE_INTEGER, integer: true });

const WINDOW_KEYS = ['limit', 'windowMs'] as const satisfies ReadonlyArray<keyof BudgetWindow>;
const BUDGET_KEYS = [
  'perTenant',
  'global',
  'rate',
  'ratePerTenant',
  'onExhausted',
] as const satisfies ReadonlyArray<keyof ProviderBudget>;

function checkWindow(where: string, w: BudgetWindow | undefined, overrides = false): void {
  if (w === undefined) return;
  knownKeys(where, w, overrides ? [...WINDOW_KEYS, 'tenants'] : WINDOW_KEYS);
  // Both are required: a missing one is refused as NaN would be.
  checkLimit(`${where}.limit`, w.limit ?? Number.NaN);
  bounded(`${where}.windowMs`, w.windowMs ?? Number.NaN, 0, { min: 1, max: MAX_DURATION_MS, integer: true });
}

/**
 * Marks the tenant in a per-tenant budget key (`spend:<provider>:tenant:<tenant>`). A tenant may
 * contain it (a tenant is any visible ASCII), so a provider name may not: the first mark in a key
 * is then always the provider's end, and a key names one tenant, read one way.
 */
const TENANT_MARK = ':tenant:';

/**
 * The provider and tenant of a spend budget key: `spend:<provider>:tenant:<tenant>`, or
 * `spend:<provider>:*` (tenant `*`, all tenants); undefined for any other key.
 */
export function spendKeyParts(key: string): { provider: string; tenant: string } | undefined {
  if (!key.startsWith('spend:')) return undefined;
  const rest = key.slice('spend:'.length);
  const mark = rest.indexOf(TENANT_MARK);
  if (mark > 0) return { provider: rest.slice(0, mark), tenant: rest.slice(mark + TENANT_MARK.length) };
  if (rest.endsWith(':*')) return { provider: rest.slice(0, -2), tenant: '*' };
  return undefined;
}

/**
 * A provider's name, as it appears in its budget keys: no `:`, so that the first `:` after a
 * key's prefix always ends the name. (With `:` allowed, provider `p:tenant`'s all-tenants key
 * `spend:p:tenant:*` was provider `p`'s key for a tenant named `*`.)
 */
const PROVIDER_NAME = /^[A-Za-z0-9_.-]{1,100}$/;

/** Every provider's budgets well-formed, or `InvalidArgument` naming the first thing that is not. */
/**
 * A tenant's own limit, if the overrides name it: its own property only. Read as `tenants[t]`,
 * a tenant called `constructor` or `toString` got a function from the prototype as its limit,
 * and so no budget on SQLite and every effect refused on PostgreSQL.
 */
function overrideOf(tenants: Record<string, number> | undefined, tenant: string): number | undefined {
  return tenants !== undefined && Object.hasOwn(tenants, tenant) ? tenants[tenant] : undefined;
}

export function validateBudgets(budgets: ProviderBudgets): void {
  knownKeys('providers', budgets, Object.keys(budgets));
  for (const [name, b] of Object.entries(budgets)) {
    if (!PROVIDER_NAME.test(name)) {
      throw new InvalidArgument(`providers.${name}: a provider name must match ${PROVIDER_NAME}`);
    }
    knownKeys(`providers.${name}`, b, BUDGET_KEYS);
    checkWindow(`providers.${name}.perTenant`, b.perTenant, true);
    checkWindow(`providers.${name}.global`, b.global);
    checkWindow(`providers.${name}.rate`, b.rate);
    checkWindow(`providers.${name}.ratePerTenant`, b.ratePerTenant, true);
    for (const [where, overrides] of [
      [`providers.${name}.ratePerTenant.tenants`, b.ratePerTenant?.tenants],
      [`providers.${name}.perTenant.tenants`, b.perTenant?.tenants],
    ] as const) {
      if (overrides === undefined) continue;
      if (typeof overrides !== 'object' || overrides === null || Array.isArray(overrides))
        throw new InvalidArgument(`${where} must be an object of tenant → limit`);
      for (const [tenant, limit] of Object.entries(overrides)) checkLimit(`${where}.${tenant}`, limit);
    }
    if (b.onExhausted !== undefined && b.onExhausted !== 'wait' && b.onExhausted !== 'fail') {
      throw new InvalidArgument(
        `providers.${name}.onExhausted must be 'wait' or 'fail', not ${JSON.stringify(b.onExhausted)}`,
      );
    }
  }
}

/** The budgets one effect draws on. Cost must be a non-negative integer (e.g. cents). */
export function chargesFor(
  budgets: ProviderBudgets,
  provider: string | undefined,
  tenant: string,
  cost: number | undefined,
): EffectCharges {
  // Checked whether or not the provider has budgets: the journal keeps it in a 64-bit column.
  const units = cost ?? 0;
  if (!Number.isSafeInteger(units) || units < 0)
    throw new InvalidArgument(`effect cost must be a whole number from 0 to 2^53 − 1, not ${String(cost)}`);
  if (provider === undefined || !Object.hasOwn(budgets, provider)) return NONE;
  const b = budgets[provider]!;
  const spend: BudgetCharge[] = [];
  if (b.perTenant && units > 0) {
    spend.push({
      key: `spend:${provider}:tenant:${tenant}`,
      limit: overrideOf(b.perTenant.tenants, tenant) ?? b.perTenant.limit,
      windowMs: b.perTenant.windowMs,
      cost: units,
    });
  }
  if (b.global && units > 0) {
    spend.push({
      key: `spend:${provider}:*`,
      limit: b.global.limit,
      windowMs: b.global.windowMs,
      cost: units,
    });
  }
  const rates: BudgetCharge[] = b.rate
    ? [{ key: `rate:${provider}`, limit: b.rate.limit, windowMs: b.rate.windowMs, cost: 1 }]
    : [];
  if (b.ratePerTenant) {
    rates.push({
      key: `rate:${provider}:tenant:${tenant}`,
      limit: overrideOf(b.ratePerTenant.tenants, tenant) ?? b.ratePerTenant.limit,
      windowMs: b.ratePerTenant.windowMs,
      cost: 1,
    });
  }
  // A charge over a budget's whole limit fits in no window: waiting for the next would wait for
  // ever (or until the deadline), holding a waiting place. It fails now, before anything is sent.
  for (const charge of [...spend, ...rates]) {
    if (charge.cost > charge.limit) {
      throw new Permanent(
        `effect costs ${charge.cost} against ${charge.key}, whose whole limit is ${charge.limit} per ${charge.windowMs} ms: it can never be spent`,
        { code: 'budget-exhausted' },
      );
    }
  }
  return { spend, rates, onExhausted: b.onExhausted ?? 'wait' };
}
