/**
 * The drill's limit invariants on made-up samples (drill/invariants/limits.ts): each must fail on
 * the violation it is there to catch, and not on what the engine allows.
 */
import { describe, expect, it } from 'vitest';
import { Admission } from '../../src/admission/limits.js';
import type { Evidence } from '../../src/drill/invariants/evidence.js';
import { retriesWithinBudget, tenantCapsHeld } from '../../src/drill/invariants/limits.js';
import type { Observation } from '../../src/drill/sampler.js';
import { DRILL_MAX_RUNNING, DRILL_RETRY_BUDGET, drillServeConfig } from '../../src/drill/serve-config.js';

/** Evidence of one sample; what the invariants under test read, the rest left out. */
function evidence(o: Partial<Observation> & { counters?: Observation['sample']['running'] }): Evidence {
  const observation = {
    sample: { t: 1000, running: o.counters ?? {} },
    runningRows: {},
    retry: { firstAttempts: 0, retries: 0, denials: 0 },
    firstAttempts2w: 0,
    ...o,
  } as unknown as Observation;
  return { observations: [observation], workers: 3 } as unknown as Evidence;
}

describe('the drill invariant of per-tenant running caps', () => {
  it('counts the running rows, not the queue counters admission enforces the caps with', () => {
    // North's interactive cap is 2: three rows leased while the counter says 2 is a breach.
    const drifted = tenantCapsHeld(
      evidence({ counters: { interactive: { north: 2 } }, runningRows: { interactive: { north: 3 } } }),
    );
    expect(drifted.pass).toBe(false);
    expect(drifted.detail).toContain('interactive/north 3 running, cap 2');
    const held = tenantCapsHeld(
      evidence({ counters: { interactive: { north: 2 } }, runningRows: { interactive: { north: 2 } } }),
    );
    expect(held.pass).toBe(true);
  });
});

describe('the drill invariant of the retry budget', () => {
  const { floor, ratio } = DRILL_RETRY_BUDGET;
  // floor 3 + 10% of 3 first attempts = 3.3: the store allows 3 retries, counting each.
  const firsts = 3;
  const allowance = floor + ratio * firsts;

  it('passes at the bound the store allows and fails one retry over it', () => {
    expect(Math.floor(allowance)).toBe(3);
    const at = retriesWithinBudget(
      evidence({ retry: { firstAttempts: firsts, retries: 3, denials: 0 }, firstAttempts2w: firsts }),
    );
    expect([at.pass, at.figure]).toEqual([true, expect.stringContaining('closest: 3 retries ≤ 3.3')]);
    const over = retriesWithinBudget(
      evidence({ retry: { firstAttempts: firsts, retries: 4, denials: 0 }, firstAttempts2w: firsts }),
    );
    expect(over.pass).toBe(false);
    expect(over.detail).toContain('4 retries in the window > 3.3');
  });
});

describe('the drill caps the invariants hold the deployment to', () => {
  it('are the caps admission resolves from the configuration every process runs', () => {
    const config = drillServeConfig({
      DRILL_STUB_URL: 'http://127.0.0.1:1',
      DRILL_TEMP_ROOT: '/nonexistent',
    });
    const admission = new Admission(config);
    for (const [cls, tenants] of Object.entries(DRILL_MAX_RUNNING))
      for (const [tenant, cap] of Object.entries(tenants))
        expect(admission.tenantLimits(cls, tenant).maxRunning, `${cls}/${tenant}`).toBe(cap);
    expect(Object.keys(DRILL_MAX_RUNNING).sort()).toEqual(Object.keys(config.classes ?? {}).sort());
  });
});
