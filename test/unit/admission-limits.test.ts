/**
 * Resolving a tenant's limits (admission/limits.ts): the layers, most specific first, and a cache
 * bounded by the configuration, not by the tenants a long-running process has seen.
 */
import { describe, expect, it } from 'vitest';
import { chargesFor, type ProviderBudgets, validateBudgets } from '../../src/admission/budgets.js';
import { Admission, DEFAULT_TENANT_LIMITS, MAX_WEIGHT, MIN_WEIGHT } from '../../src/admission/limits.js';

describe('tenant limits', () => {
  const admission = () =>
    new Admission({
      classes: { bulk: { tenant: { maxRunning: 4 } } },
      tenants: { north: { '*': { maxWaiting: 5 }, bulk: { weight: 3 } } },
    });

  it('resolves tenant and class over class defaults over the built-in ones', () => {
    const a = admission();
    expect(a.tenantLimits('bulk', 'north')).toEqual({ maxRunning: 4, maxWaiting: 5, weight: 3 });
    expect(a.tenantLimits('interactive', 'north')).toEqual({ ...DEFAULT_TENANT_LIMITS, maxWaiting: 5 });
    expect(a.tenantLimits('bulk', 'south')).toEqual({ ...DEFAULT_TENANT_LIMITS, maxRunning: 4 });
    expect(a.tenantLimits('interactive', 'south')).toEqual(DEFAULT_TENANT_LIMITS);
    // A tenant named as an Object.prototype member has no configuration of its own.
    expect(a.tenantLimits('bulk', 'constructor')).toEqual({ ...DEFAULT_TENANT_LIMITS, maxRunning: 4 });
  });

  it('caches one entry per class, and per class of a configured tenant, however many tenants submit', () => {
    const a = admission();
    for (let i = 0; i < 10_000; i++) {
      a.tenantLimits('bulk', `t${i}`);
      a.tenantLimits('interactive', `t${i}`);
    }
    a.tenantLimits('bulk', 'north');
    a.tenantLimits('interactive', 'north');
    expect(a.cached).toBe(4);
    // The shared entry is the unconfigured tenants' answer, not the configured one's.
    expect(a.tenantLimits('bulk', 'south')).toEqual({ ...DEFAULT_TENANT_LIMITS, maxRunning: 4 });
  });
});

describe('tenant weights', () => {
  it(`are taken from ${MIN_WEIGHT} to ${MAX_WEIGHT} and refused beyond, where the virtual time would stop moving`, () => {
    for (const weight of [MIN_WEIGHT, 1, MAX_WEIGHT])
      expect(() => new Admission({ tenants: { north: { '*': { weight } } } })).not.toThrow();
    for (const weight of [MIN_WEIGHT / 2, 1e-20, 1e-320, MAX_WEIGHT * 1.5, 0, -1, Number.NaN])
      expect(() => new Admission({ tenants: { north: { '*': { weight } } } }), String(weight)).toThrow(
        /weight must be a number from 0.001 to 1000/,
      );
  });

  it('are read from a class a tenant names itself, not from the prototype of its overrides', () => {
    const a = new Admission({ tenants: { north: { bulk: { weight: 3 } } } });
    expect(a.tenantLimits('constructor', 'north')).toEqual(DEFAULT_TENANT_LIMITS);
  });
});

describe('provider budgets per tenant', () => {
  const budgets: ProviderBudgets = {
    pay: {
      perTenant: { limit: 100, windowMs: 60_000, tenants: { big: 1000 } },
      ratePerTenant: { limit: 2, windowMs: 1000, tenants: { big: 10 } },
    },
  };

  it("give a tenant named after an object's own members the default limit, not a function", () => {
    for (const tenant of ['constructor', 'toString', '__proto__', 'hasOwnProperty']) {
      const charges = chargesFor(budgets, 'pay', tenant, 50);
      expect(
        [...charges.spend, ...charges.rates].map((c) => c.limit),
        tenant,
      ).toEqual([100, 2]);
    }
    const big = chargesFor(budgets, 'pay', 'big', 50);
    expect([...big.spend, ...big.rates].map((c) => c.limit)).toEqual([1000, 10]);
  });

  it('refuse overrides that are not an object of tenant → limit', () => {
    for (const tenants of [5, null, ['a']])
      expect(() =>
        validateBudgets({ pay: { perTenant: { limit: 1, windowMs: 1000, tenants: tenants as never } } }),
      ).toThrow(/perTenant.tenants must be an object/);
  });
});
