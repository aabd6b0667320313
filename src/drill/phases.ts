/**
 * @module drill/phases
 * Drives the planned phases in order. Entering a phase sets the load generators' rates for it
 * (drill/load.ts); the stall holds the provider stub and releases it at its end; the crash phase
 * starts the kills and, at its end, disarms the failpoints (drill/crashes.ts). A phase lasts its
 * planned time, paced by a timer — except recovery, which also waits, on the samples, for the
 * deployment to be back at its baseline (drill/baseline.ts), within the bound.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { atBaseline, baselineLevels } from './baseline.js';
import type { PlannedPhase } from './config.js';
import type { Crashes } from './crashes.js';
import type { Deployment } from './deployment.js';
import type { Workload } from './load.js';
import type { Observation, Sampler } from './sampler.js';
import type { Phase, PhaseName } from './types.js';

/** Back at the baseline for this long before the recovery phase may end. */
const HOLD_BACK_MS = 1000;

export interface PhaseDriver {
  deployment: Deployment;
  workload: Workload;
  sampler: Sampler;
  crashes: Crashes;
  workers: number;
  recoveryBoundMs: number;
  /** Ms since the drill started. */
  now: () => number;
  /** Told the phase as each one starts (before the sampler's next sample). */
  onPhase: (name: PhaseName) => void;
}

/** Runs the plan; resolves with the phases as they ran. The sampler starts with the first. */
export async function drivePhases(plan: PlannedPhase[], d: PhaseDriver): Promise<Phase[]> {
  const phases: Phase[] = [];
  for (const step of plan) {
    d.onPhase(step.name);
    const phase: Phase = { name: step.name, startMs: d.now(), endMs: Number.NaN };
    phases.push(phase);
    if (phases.length === 1) d.sampler.start();
    d.workload.setPhase(step.name);
    if (step.name === 'stall') d.deployment.stub.stub.hold();
    if (step.name === 'crash') d.crashes.start(step.ms);
    if (step.name === 'recovery') await recover(phase.startMs + step.ms, d);
    else await sleep(Math.max(0, phase.startMs + step.ms - d.now()));
    if (step.name === 'stall') d.deployment.stub.stub.release();
    if (step.name === 'crash') await d.crashes.stop();
    phase.endMs = d.now();
  }
  return phases;
}

/**
 * The recovery phase: North's load only. It lasts its planned time and, if the deployment is not
 * back at its baseline by then, until it has been for `HOLD_BACK_MS`, or the bound runs out. The
 * invariants judge the outcome; this only decides how long to watch.
 */
async function recover(plannedEnd: number, d: PhaseDriver): Promise<void> {
  const start = d.now();
  const levels = baselineLevels(d.sampler.observations, 0);
  const back = (o: Observation) =>
    levels !== undefined &&
    o.sample.workersAlive === d.workers &&
    (['temp', 'running', 'connections'] as const).every((m) => atBaseline(m, o, levels));
  for (;;) {
    const t = d.now();
    if (t >= plannedEnd) {
      const recent = d.sampler.observations.filter((o) => o.phase === 'recovery');
      let since: number | undefined;
      for (let i = recent.length - 1; i >= 0 && back(recent[i]!); i--) since = recent[i]!.sample.t;
      if (since !== undefined && t - since >= HOLD_BACK_MS) return;
      if (t - start >= d.recoveryBoundMs + HOLD_BACK_MS) return;
    }
    await sleep(100);
  }
}
