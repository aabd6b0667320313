/**
 * Resolving a tenant's limits (admission/limits.ts): the layers, most specific first, and a cache
 * bounded by the configuration, not by the tenants a long-running process has seen.
 */
import { describe, expect, it } from 'vitest';
import { Admission, DEFAULT_TENANT_LIMITS } from '../../src/admission/limits.js';

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
