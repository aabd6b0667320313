/**
 * @module drill/invariants/limits
 * Limits held in every sample: per-tenant running caps, per-class worker slots (a killed worker's
 * leases counting until rescued), and the service-wide retry budget.
 */
import type { Observation } from '../sampler.js';
import { DRILL_MAX_RUNNING, DRILL_RETRY_BUDGET, DRILL_SLOTS } from '../serve-config.js';
import type { InvariantResult } from '../types.js';
import { type Evidence, int, listed, secs } from './evidence.js';

export function tenantCapsHeld(e: Evidence): InvariantResult {
  const max: Record<string, number> = {};
  const violations: string[] = [];
  for (const o of e.observations) {
    for (const [cls, tenants] of Object.entries(o.runningRows)) {
      for (const [tenant, n] of Object.entries(tenants)) {
        const k = `${cls}/${tenant}`;
        max[k] = Math.max(max[k] ?? 0, n);
        const cap = DRILL_MAX_RUNNING[cls]?.[tenant];
        if (cap !== undefined && n > cap)
          violations.push(`t=${secs(o.sample.t)}: ${k} ${n} running, cap ${cap}`);
      }
    }
  }
  const observed = Object.entries(DRILL_MAX_RUNNING)
    .flatMap(([cls, tenants]) =>
      Object.entries(tenants).map(
        ([tenant, cap]) => `${cls} ${tenant} ${max[`${cls}/${tenant}`] ?? 0}/${cap}`,
      ),
    )
    .join(', ');
  const pass = violations.length === 0 && e.observations.length > 0;
  return {
    name: 'Per-tenant running caps never exceeded',
    pass,
    figure: `max running (observed/cap): ${observed}; ${int(violations.length)} violations in ${int(e.observations.length)} samples`,
    detail:
      'From the running operations themselves, read in every sample (not the queue counters admission enforces ' +
      "the caps with, which a check must not take on trust); a killed worker's leases count until rescued." +
      (violations.length ? ` Violations: ${listed(violations)}` : ''),
  };
}

export function classSlotsHeld(e: Evidence): InvariantResult {
  const violations: string[] = [];
  const maxLive: Record<string, number> = {};
  const maxAny: Record<string, number> = {};
  let withDead = 0;
  for (const o of e.observations) {
    const t = `t=${secs(o.sample.t)}`;
    if (o.deadOwners.length) withDead++;
    for (const owner of o.unknownOwners)
      violations.push(`${t}: lease held by ${owner}, not a worker of the deployment`);
    for (const [cls, owners] of Object.entries(o.byOwner)) {
      const slots = DRILL_SLOTS[cls as keyof typeof DRILL_SLOTS];
      const n = Object.values(owners).reduce((a, b) => a + b, 0);
      maxAny[cls] = Math.max(maxAny[cls] ?? 0, n);
      if (!o.deadOwners.length) maxLive[cls] = Math.max(maxLive[cls] ?? 0, n);
      if (slots === undefined) {
        violations.push(`${t}: class ${cls} has no slots configured`);
        continue;
      }
      // Each holder within its slots is the whole check: the class within slots × holders follows.
      for (const [owner, held] of Object.entries(owners))
        if (held > slots)
          violations.push(`${t}: ${owner} holds ${held} ${cls} leases, its slots are ${slots}`);
    }
  }
  const pass = violations.length === 0 && e.observations.length > 0;
  const observed = Object.entries(DRILL_SLOTS)
    .map(
      ([cls, slots]) =>
        `${cls} ${maxLive[cls] ?? 0}/${slots * e.workers}` +
        (withDead ? ` (${maxAny[cls] ?? 0} counting a killed worker's leases)` : ''),
    )
    .join(', ');
  return {
    name: 'Per-class worker slots never exceeded',
    pass,
    figure: `max running per class (observed/slots × ${e.workers} workers): ${observed}; ${int(withDead)} samples held a killed worker's leases`,
    detail:
      'Every sample reads all running operations with their lease holders: each holder within its slots in each ' +
      "class (a killed worker's leases count until rescued), every holder a worker of the deployment." +
      (violations.length ? ` Violations: ${listed(violations)}` : ''),
  };
}

export function retriesWithinBudget(e: Evidence): InvariantResult {
  const { ratio, floor, windowMs } = DRILL_RETRY_BUDGET;
  const over: string[] = [];
  let worst: { o: Observation; bound: number } | undefined;
  for (const o of e.observations) {
    // A retry counted in the window was allowed when the retries of ITS window, itself counted,
    // stayed within floor + ratio × first attempts in ITS window, which lies within the last two
    // windows. (The store allows a hair over a whole number a rounding error puts under it.)
    const bound = floor + ratio * o.firstAttempts2w;
    if (o.retry.retries > bound + 1e-9)
      over.push(`t=${secs(o.sample.t)}: ${o.retry.retries} retries in the window > ${bound.toFixed(1)}`);
    if (!worst || o.retry.retries / bound > worst.o.retry.retries / worst.bound) worst = { o, bound };
  }
  const denials = e.observations.at(-1)?.sample.retryDenials ?? 0;
  const maxRetries = Math.max(0, ...e.observations.map((o) => o.retry.retries));
  const pass = over.length === 0 && e.observations.length > 0;
  const closest = worst
    ? `closest: ${int(worst.o.retry.retries)} retries ≤ ${worst.bound.toFixed(1)} at t=${secs(worst.o.sample.t)}`
    : 'no samples';
  return {
    name: 'Retries within the retry budget',
    pass,
    figure:
      `at most ${int(maxRetries)} retries in a ${secs(windowMs)} window (budget ${floor} + ${ratio * 100}% of first ` +
      `attempts); ${closest}; ${int(denials)} retries denied and deferred; ${int(over.length)} samples over`,
    detail:
      "From the store's retry-budget counters (all processes), every sample. A retry is allowed when the retries " +
      'of its window, itself counted, stay within floor + ratio × first attempts in that window; so in every sample ' +
      'the retries of the last window must stay within floor + ratio × first attempts of the last two windows ' +
      '(the window slides: first attempts that left it no longer count, the retries they allowed still do).' +
      (over.length ? ` Over: ${listed(over)}` : ''),
  };
}
