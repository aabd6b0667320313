/**
 * @module test/conformance/state-machine/model
 * The model of the state-machine property: the small world the histories play in (two tenants,
 * three ids, two classes, tight limits so caps bind), what the test remembers of each operation
 * and lease, and the rules it predicts the store by (the transition table, core/decisions.ts,
 * the Store contract).
 */

import { isSluiceError } from '../../../src/core/errors/index.js';
import type { OperationState } from '../../../src/core/states.js';
import type { Store } from '../../../src/store/store.js';
import type {
  CancelState,
  EffectState,
  LeaseRef,
  OperationRow,
  QueueLimits,
} from '../../../src/store/types.js';
import type { FakeClock } from '../../../src/testing/fake-clock.js';
import { submitParams } from '../fixtures.js';

export const LEASE_MS = 30_000;
export const MAX_ATTEMPTS = 2;
export const MAX_LEASE_EXPIRIES = 2;
export const DEADLINE_MS = 3 * LEASE_MS;
export const TENANTS = ['North', 'South'] as const;
/** `i*` ids are interactive, `b*` bulk; ids ending in 2 have a deadline. */
export const IDS = ['i1', 'i2', 'b2'] as const;
export const CLASSES = ['interactive', 'bulk'] as const;
export const EFFECTS = ['charge', 'email'] as const;
/** North may run 1 per class at once; South may keep 1 waiting per class. */
export const LIMITS: Record<string, QueueLimits> = { North: { maxRunning: 1 }, South: { maxWaiting: 1 } };
export const MAX_RUNNING: Record<string, number> = { North: 1 };
export const MAX_WAITING: Record<string, number> = { South: 1 };
export const ERROR = { code: 'boom', message: 'random failure' };

export const classOf = (id: string) => (id.startsWith('i') ? 'interactive' : 'bulk');
export const keyOf = (r: { tenant: string; id: string }) => `${r.tenant}/${r.id}`;
export const effectKey = (op: { tenant: string; id: string }, name: string) =>
  `${op.tenant}:${op.id}:${name}`;
export const params = (tenant: string, id: string, variant: number) =>
  submitParams({
    tenant,
    id,
    kind: 'job',
    class: classOf(id),
    input: { variant },
    maxAttempts: MAX_ATTEMPTS,
    deadlineMs: id.endsWith('2') ? DEADLINE_MS : null,
    limits: LIMITS[tenant],
  });

export interface ModelOp {
  tenant: string;
  id: string;
  cls: string;
  digest: string;
  variant: number;
  deadlineAt: number | null;
  state: OperationState;
  epoch: number;
  attempt: number;
  leaseExpiries: number;
  runAfter: number;
  leaseOwner: string | null;
  leaseExpiresAt: number | null;
  cancel: CancelState | null;
  effects: Map<string, EffectState>;
}

export interface ModelLease {
  ref: LeaseRef;
  /** The claimer crashed: it will never heartbeat, and writes only once its lease is stale. */
  crashed: boolean;
}

export interface Model {
  ops: Map<string, ModelOp>;
  leases: ModelLease[];
  /** The store as it was after the previous command. */
  snapshot: Map<string, OperationRow>;
}

export interface Real {
  store: Store;
  clock: FakeClock;
  /** What the histories reached (states, answers): a property that never reaches `dead` proves little. */
  coverage: Set<string>;
}

export const live = (m: Readonly<Model>, l: ModelLease) => {
  const op = m.ops.get(keyOf(l.ref));
  return op !== undefined && op.state === 'running' && op.epoch === l.ref.epoch;
};
export const pastNoReturn = (op: ModelOp) =>
  [...op.effects.values()].some((s) => s === 'pending' || s === 'committed');
export const hasPending = (op: ModelOp) => [...op.effects.values()].includes('pending');
export const opAt = (m: Readonly<Model>, index: number) => [...m.ops.values()][index % m.ops.size]!;
/**
 * Which lease a worker command uses: a live one held by a claimer that did not crash, or a stale
 * one (lost to a rescue, ended, or superseded) whose holder wakes up and tries to write.
 */
export interface LeasePick {
  index: number;
  stale: boolean;
}
export const pickLease = (m: Readonly<Model>, pick: LeasePick): ModelLease | undefined => {
  const stale = m.leases.filter((l) => !live(m, l));
  const held = m.leases.filter((l) => live(m, l) && !l.crashed);
  // When the wanted kind is not there, the other kind keeps the step useful.
  const pool =
    (pick.stale ? stale : held).length > 0 ? (pick.stale ? stale : held) : pick.stale ? held : stale;
  return pool.length === 0 ? undefined : pool[pick.index % pool.length];
};
export const showPick = (pick: LeasePick) => `${pick.stale ? 'stale' : 'live'} lease #${pick.index}`;

/** An operation in one of `states` when `target` and one exists, else any (whose answer is then checked). */
export const pickIn = (m: Readonly<Model>, index: number, states: OperationState[], target: boolean) => {
  const inState = [...m.ops.values()].filter((o) => states.includes(o.state));
  return target && inState.length > 0 ? inState[index % inState.length]! : opAt(m, index);
};

export async function codeOf(promise: Promise<unknown>): Promise<string | undefined> {
  try {
    await promise;
    return undefined;
  } catch (error) {
    if (isSluiceError(error)) return error.code;
    throw error;
  }
}

/**
 * The end of a running operation in the model: lease gone, and a pending cancel answered by the
 * state: `cancelled`, or too late (an effect may have happened; requeued included).
 */
export function endAttempt(r: Real, op: ModelOp, to: OperationState, runAfter = r.clock.now()): void {
  if (op.cancel === 'requested')
    r.coverage.add(to === 'cancelled' ? 'cancel-answered:cancelled' : `cancel-answered:too_late:${to}`);
  op.state = to;
  op.leaseOwner = null;
  op.leaseExpiresAt = null;
  if (to === 'queued') op.runAfter = runAfter;
  if (op.cancel === 'requested' && to !== 'cancelled') op.cancel = 'too_late';
}
