/**
 * @module runtime/failpoints
 * Named failpoints at the protocol's crash windows, inert unless a test enables them. A hit
 * costs one map lookup when none is enabled.
 *
 * | point                         | crash window                                            |
 * |-------------------------------|---------------------------------------------------------|
 * | `effect.before-pending`  (C0) | before the effect's `pending` row is written             |
 * | `effect.before-call`     (C1) | after `pending`, before the provider is called           |
 * | `effect.after-call`      (C2) | after the provider committed, before `committed` is kept |
 * | `operation.before-complete` (C3) | after the effects committed, before the operation completes |
 * | `operation.after-complete`  (C4) | after completion is durable, before anyone hears of it   |
 *
 * Actions: `crash` simulates the death of this worker inside the process (the attempt stops and
 * writes nothing more; its lease is left to expire), `kill` sends SIGKILL to this process,
 * `stop` sends SIGSTOP (another process resumes it with SIGCONT), or a function for custom
 * behaviour. Child processes enable them from the `SLUICE_FAILPOINTS` environment variable:
 * `point=action[@nth][#operation-id]`, comma-separated.
 */
import { InvalidArgument } from '../core/errors/index.js';

export const CRASH_POINTS = {
  C0: 'effect.before-pending',
  C1: 'effect.before-call',
  C2: 'effect.after-call',
  C3: 'operation.before-complete',
  C4: 'operation.after-complete',
} as const;

export type FailpointName = (typeof CRASH_POINTS)[keyof typeof CRASH_POINTS];

export interface FailpointInfo {
  tenant: string;
  id: string;
  attempt: number;
  effect?: string;
}

export type FailpointAction = 'crash' | 'kill' | 'stop' | ((info: FailpointInfo) => void | Promise<void>);

export interface FailpointSpec {
  action: FailpointAction;
  /** Trigger on the nth matching hit (1-based). Default 1. */
  nth?: number;
  /** How many times to trigger from the nth hit on. Default 1; Infinity for every hit. */
  times?: number;
  /** Only hits for which this returns true count. */
  when?: (info: FailpointInfo) => boolean;
}

const CRASH = Symbol.for('sluice.simulated-crash');

/** Thrown by a `crash` failpoint: the attempt must behave as if its process had died. */
export class SimulatedCrash extends Error {
  readonly [CRASH] = true;
  constructor(point: string) {
    super(`simulated crash at ${point}`);
  }
}
export const isSimulatedCrash = (e: unknown): e is SimulatedCrash => {
  try {
    return typeof e === 'object' && e !== null && (e as Record<symbol, unknown>)[CRASH] === true;
  } catch {
    // Asked of anything a handler threw: a Proxy's trap that throws is no crash of ours.
    return false;
  }
};

interface Armed extends FailpointSpec {
  hits: number;
  fired: number;
}

const armed = new Map<string, Armed>();

const knownPoints = () =>
  Object.entries(CRASH_POINTS)
    .map(([k, v]) => `${k}/${v}`)
    .join(', ');

export const failpoints = {
  enable(name: FailpointName, spec: FailpointSpec | FailpointAction): void {
    // A misspelt point would never fire, and the test would prove nothing: refused.
    if (!(Object.values(CRASH_POINTS) as string[]).includes(name))
      throw new InvalidArgument(`unknown failpoint ${JSON.stringify(name)}; known: ${knownPoints()}`);
    const s: FailpointSpec = typeof spec === 'object' ? spec : { action: spec };
    armed.set(name, { ...s, hits: 0, fired: 0 });
  },
  disable(name: FailpointName): void {
    armed.delete(name);
  },
  reset(): void {
    armed.clear();
  },
  /** How many times the point has fired since it was enabled. */
  fired(name: FailpointName): number {
    return armed.get(name)?.fired ?? 0;
  },
  /** Parses `point=action[@nth][#operation-id]`, comma-separated (the SLUICE_FAILPOINTS format). */
  enableFromSpec(text: string): void {
    for (const part of text
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)) {
      const m = /^([A-Za-z0-9.-]+)=(crash|kill|stop)(?:@(\d+))?(?:#(.+))?$/.exec(part);
      if (!m)
        throw new InvalidArgument(
          `bad failpoint spec ${JSON.stringify(part)}: point=crash|kill|stop[@nth][#operation-id]`,
        );
      const [, name, action, nth, id] = m;
      const point = (CRASH_POINTS as Record<string, string>)[name!] ?? name!;
      if (!(Object.values(CRASH_POINTS) as string[]).includes(point))
        throw new InvalidArgument(`unknown failpoint ${JSON.stringify(name)}; known: ${knownPoints()}`);
      failpoints.enable(point as FailpointName, {
        action: action as 'crash' | 'kill' | 'stop',
        nth: nth ? Number(nth) : 1,
        when: id ? (info) => info.id === id : undefined,
      });
    }
  },
};

/** Whether a test has enabled the point (the engine writes what that window needs written first). */
export function failpointArmed(name: FailpointName): boolean {
  return armed.size > 0 && armed.has(name);
}

/** The hook the engine calls at each point. Resolves at once when the point is not armed. */
export async function failpoint(name: FailpointName, info: FailpointInfo): Promise<void> {
  if (armed.size === 0) return;
  const a = armed.get(name);
  if (!a || (a.when && !a.when(info))) return;
  a.hits++;
  const nth = a.nth ?? 1;
  if (a.hits < nth || a.fired >= (a.times ?? 1)) return;
  a.fired++;
  if (a.action === 'crash') throw new SimulatedCrash(name);
  if (a.action === 'kill') {
    process.kill(process.pid, 'SIGKILL');
    // SIGKILL is delivered asynchronously; never continue past the point.
    await new Promise(() => {});
  }
  if (a.action === 'stop') {
    process.kill(process.pid, 'SIGSTOP');
    return;
  }
  if (typeof a.action === 'function') await a.action(info);
}

if (process.env.SLUICE_FAILPOINTS) failpoints.enableFromSpec(process.env.SLUICE_FAILPOINTS);
