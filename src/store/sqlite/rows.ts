/**
 * @module store/sqlite/rows
 * Maps SQLite rows (snake_case, JSON as text) to the store's row types.
 */

import type { ErrorRecord } from '../../core/errors/index.js';
import { JsonText } from '../../core/json-text.js';
import type { OperationState } from '../../core/states.js';
import type {
  AttemptOutcome,
  AttemptRow,
  CancelState,
  EffectRow,
  EffectState,
  EventRow,
  OperationRow,
} from '../types.js';

export interface RawOperation {
  seq: number;
  tenant: string;
  id: string;
  kind: string;
  class: string;
  digest: string;
  input: string;
  state: OperationState;
  attempt: number;
  max_attempts: number;
  epoch: number;
  run_after: number;
  deadline_at: number | null;
  created_at: number;
  updated_at: number;
  started_at: number | null;
  finished_at: number | null;
  lease_owner: string | null;
  lease_expires_at: number | null;
  lease_expiries: number;
  effect_started_at: number | null;
  cancel: CancelState | null;
  cancel_requested_at: number | null;
  result: string | null;
  error: string | null;
}

const json = (text: string | null): unknown => (text === null ? null : JSON.parse(text));

/**
 * Every column of `operations`, in the order `operationRowOf` reads them. The hot statements
 * (a claim's update, a submit's lookup) select these and read each row as an array
 * (`SqliteContext.rawStmt`): better-sqlite3 builds an object with a named property per column
 * for every row otherwise, which for these 25 cost ~3 µs a row, about a fifth of a claimed row's
 * update (docs/benchmarks.md).
 */
const OPERATION_COLUMNS = [
  'seq',
  'tenant',
  'id',
  'kind',
  'class',
  'digest',
  'input',
  'state',
  'attempt',
  'max_attempts',
  'epoch',
  'run_after',
  'deadline_at',
  'created_at',
  'updated_at',
  'started_at',
  'finished_at',
  'lease_owner',
  'lease_expires_at',
  'lease_expiries',
  'effect_started_at',
  'cancel',
  'cancel_requested_at',
  'result',
  'error',
] as const satisfies ReadonlyArray<keyof RawOperation>;

/** `OPERATION_COLUMNS` as a select list, each qualified by `alias` when given. */
export function operationColumns(alias?: string): string {
  return OPERATION_COLUMNS.map((c) => (alias ? `${alias}.${c}` : c)).join(', ');
}

/** The row of a statement that selected `operationColumns()` first, read as an array. */
export function operationRowOf(v: unknown[]): OperationRow {
  return {
    seq: v[0] as number,
    tenant: v[1] as string,
    id: v[2] as string,
    kind: v[3] as string,
    class: v[4] as string,
    digest: v[5] as string,
    input: JSON.parse(v[6] as string),
    state: v[7] as OperationState,
    attempt: v[8] as number,
    maxAttempts: v[9] as number,
    epoch: v[10] as number,
    runAfter: v[11] as number,
    deadlineAt: v[12] as number | null,
    createdAt: v[13] as number,
    updatedAt: v[14] as number,
    startedAt: v[15] as number | null,
    finishedAt: v[16] as number | null,
    leaseOwner: v[17] as string | null,
    leaseExpiresAt: v[18] as number | null,
    leaseExpiries: v[19] as number,
    effectStartedAt: v[20] as number | null,
    cancel: v[21] as CancelState | null,
    cancelRequestedAt: v[22] as number | null,
    result: json(v[23] as string | null),
    error: json(v[24] as string | null) as ErrorRecord | null,
  };
}

/**
 * The same from a row read as an object (`SELECT *`, the cold reads: get, list, operator
 * commands): one mapping of columns to fields, `operationRowOf`'s.
 */
export function toOperationRow(r: RawOperation): OperationRow {
  return operationRowOf(OPERATION_COLUMNS.map((c) => r[c]));
}

/**
 * An operation's effects are keyed by its `seq` (migration 19); the lease names the operation by
 * (tenant, id), two parameters in that order.
 */
export const OF_OP = 'op_seq = (SELECT seq FROM operations WHERE tenant = ? AND id = ?)';

/** An effect's columns with its operation's tenant and id, as `toEffectRow` reads them (`o`, `e`). */
export const EFFECT_ROW = 'o.tenant, o.id AS op_id, e.*';

export interface RawEffect {
  tenant: string;
  op_id: string;
  name: string;
  key: string;
  state: EffectState;
  provider: string | null;
  cost: number | null;
  first_sent_at: number;
  last_sent_at: number;
  sends: number;
  committed_at: number | null;
  result: string | null;
  reference: string | null;
  error: string | null;
  epoch: number;
}

export function toEffectRow(r: RawEffect): EffectRow {
  return {
    tenant: r.tenant,
    id: r.op_id,
    name: r.name,
    key: r.key,
    state: r.state,
    provider: r.provider,
    cost: r.cost,
    firstSentAt: r.first_sent_at,
    lastSentAt: r.last_sent_at,
    sends: r.sends,
    committedAt: r.committed_at,
    result: json(r.result),
    reference: r.reference,
    error: json(r.error) as ErrorRecord | null,
    epoch: r.epoch,
  };
}

export interface RawAttempt {
  tenant: string;
  op_id: string;
  epoch: number;
  attempt: number;
  owner: string | null;
  started_at: number;
  ended_at: number;
  outcome: AttemptOutcome;
  error: string | null;
  retry_delay_ms: number | null;
}

export function toAttemptRow(r: RawAttempt): AttemptRow {
  return {
    tenant: r.tenant,
    id: r.op_id,
    attempt: r.attempt,
    epoch: r.epoch,
    owner: r.owner,
    startedAt: r.started_at,
    endedAt: r.ended_at,
    outcome: r.outcome,
    error: json(r.error) as ErrorRecord | null,
    retryDelayMs: r.retry_delay_ms,
  };
}

export interface RawEvent {
  tenant: string;
  op_id: string;
  at: number;
  action: string;
  by: string;
  reason: string;
  detail: string | null;
}

export function toEventRow(r: RawEvent): EventRow {
  return {
    tenant: r.tenant,
    id: r.op_id,
    at: r.at,
    action: r.action,
    by: r.by,
    reason: r.reason,
    detail: json(r.detail),
  };
}

/** JSON text for a nullable column; `undefined` is stored as NULL. */
export function jsonText(value: unknown): string | null {
  if (value instanceof JsonText) return value.text === 'null' ? null : value.text;
  return value === undefined || value === null ? null : JSON.stringify(value);
}
