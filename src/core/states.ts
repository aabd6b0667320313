/**
 * @module core/states
 * The operation state machine: the states, which are terminal, and the pure transition table
 * every store must obey. Stores implement these moves in SQL with `WHERE state = …` guards;
 * the property test replays random histories and checks each observed move against this table.
 *
 * ```
 * queued ──claim──▶ running ──succeed──▶ succeeded
 *   │                 │ ├──fail───────▶ failed
 *   │                 │ ├──dead-letter─▶ dead ──redrive──▶ queued
 *   │                 │ ├──unknown────▶ needs_reconciliation ──reconcile──▶ queued | succeeded | failed
 *   │                 │ ├──cancel─────▶ cancelled   (only while no effect has begun)
 *   │                 └─┴──retry / lease expiry / release──▶ queued
 *   └──cancel──▶ cancelled   (never started, or no effect begun in an earlier attempt)
 * ```
 */

export const OPERATION_STATES = [
  'queued',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'dead',
  'needs_reconciliation',
] as const;

export type OperationState = (typeof OPERATION_STATES)[number];

/** States an operation only leaves by an explicit, recorded operator action (or never). */
/**
 * The states in which an operation waits for an operator: `dead` (to redrive) and
 * `needs_reconciliation` (to reconcile). Indexed across tenants on both stores, listed across
 * tenants for admin keys, and counted by the metrics (ADR 9).
 */
export const AWAITING_OPERATOR_STATES = [
  'dead',
  'needs_reconciliation',
] as const satisfies readonly OperationState[];

export const TERMINAL_STATES: ReadonlySet<OperationState> = new Set([
  'succeeded',
  'failed',
  'cancelled',
  'dead',
  'needs_reconciliation',
]);

export function isTerminal(state: OperationState): boolean {
  return TERMINAL_STATES.has(state);
}

/** Every event that moves an operation. */
export type TransitionEvent =
  | 'claim'
  | 'succeed'
  | 'fail'
  | 'dead-letter'
  | 'unknown-outcome'
  | 'retry'
  | 'lease-expired'
  | 'release'
  | 'cancel'
  | 'redrive'
  | 'reconcile';

const TABLE: Readonly<Record<TransitionEvent, Partial<Record<OperationState, readonly OperationState[]>>>> = {
  claim: { queued: ['running'] },
  succeed: { running: ['succeeded'] },
  fail: { running: ['failed', 'needs_reconciliation'] },
  'dead-letter': { running: ['dead'] },
  'unknown-outcome': { running: ['needs_reconciliation'] },
  retry: { running: ['queued'] },
  // A lease that expires is redelivered, or parked when the operation keeps killing workers or
  // has no attempts or time left.
  'lease-expired': { running: ['queued', 'dead', 'failed', 'needs_reconciliation', 'cancelled'] },
  release: { running: ['queued'] },
  cancel: { queued: ['cancelled'], running: ['cancelled'] },
  redrive: { dead: ['queued'] },
  reconcile: { needs_reconciliation: ['queued', 'succeeded', 'failed'] },
};

/** The states `event` may move an operation in `from` to; empty when the move is illegal. */
export function allowedTargets(from: OperationState, event: TransitionEvent): readonly OperationState[] {
  return TABLE[event][from] ?? [];
}

/** True when some event moves `from` to `to` (or `from === to`: no move). */
export function isAllowedMove(from: OperationState, to: OperationState): boolean {
  if (from === to) return true;
  for (const event of Object.keys(TABLE) as TransitionEvent[]) {
    if (allowedTargets(from, event).includes(to)) return true;
  }
  return false;
}

/** The transition table as data, for documentation and tests. */
export function transitionTable(): ReadonlyArray<{
  event: TransitionEvent;
  from: OperationState;
  to: readonly OperationState[];
}> {
  const rows: Array<{ event: TransitionEvent; from: OperationState; to: readonly OperationState[] }> = [];
  for (const event of Object.keys(TABLE) as TransitionEvent[]) {
    for (const [from, to] of Object.entries(TABLE[event]))
      rows.push({ event, from: from as OperationState, to: to ?? [] });
  }
  return rows;
}
