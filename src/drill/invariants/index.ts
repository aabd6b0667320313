/**
 * @module drill/invariants
 * The guarantees the drill checks, each a pure function of the evidence the run gathered (the
 * samples, the store's final operations, the stub's ledger, the clients' records), answering
 * PASS or FAIL with the figure that decided it. docs/drill.md explains each one.
 *
 * Several checks refuse to pass vacuously: a stall that no attempt ran into, a latency objective
 * with almost no measurements, a sampler that never sampled — each fails, because a drill that
 * cannot fail proves nothing.
 */
import type { InvariantResult } from '../types.js';
import type { Evidence } from './evidence.js';
import { classSlotsHeld, retriesWithinBudget, tenantCapsHeld } from './limits.js';
import {
  connectionsBack,
  deploymentHealthy,
  northObjectiveMet,
  runningBack,
  stallBounded,
  tempBack,
} from './service.js';
import { duplicatesAnswered, noOperationLost, oneChargePerOperation, spendWithinBudget } from './work.js';

export { type Evidence, percentile, WARMUP_MS } from './evidence.js';
export { northLatencies, northMeasurement } from './service.js';

/** Every invariant that applies to the run's phases, in report order. */
export function checkInvariants(e: Evidence): InvariantResult[] {
  const all: Array<InvariantResult | undefined> = [
    oneChargePerOperation(e),
    noOperationLost(e),
    e.duplicates.sent + e.bursts.sent > 0 ? duplicatesAnswered(e) : undefined,
    tenantCapsHeld(e),
    classSlotsHeld(e),
    northObjectiveMet(e),
    stallBounded(e),
    tempBack(e),
    runningBack(e),
    connectionsBack(e),
    retriesWithinBudget(e),
    spendWithinBudget(e),
    deploymentHealthy(e),
  ];
  return all.filter((r): r is InvariantResult => r !== undefined);
}
