/**
 * @module core/operation
 * The public view of an operation, as the library returns it and the HTTP API serves it:
 * plain JSON, times as ISO 8601 strings.
 */
import type { AttemptRow, EffectRow, EventRow, OperationRow } from '../store/types.js';
import type { ErrorRecord } from './errors/index.js';
import type { OperationState } from './states.js';

export interface AttemptView {
  attempt: number;
  startedAt: string;
  endedAt: string;
  outcome: AttemptRow['outcome'];
  error: ErrorRecord | null;
  retryDelayMs: number | null;
  worker: string | null;
}

export interface EffectView {
  name: string;
  key: string;
  state: EffectRow['state'];
  provider: string | null;
  firstSentAt: string;
  sends: number;
  committedAt: string | null;
  reference: string | null;
  result: unknown;
  error: ErrorRecord | null;
}

export interface EventView {
  at: string;
  action: string;
  by: string;
  reason: string;
  detail: unknown;
}

/**
 * An operation as the engine reports it. `Input` and `Result` are `unknown` unless it came from a
 * typed kind (`submit({ kind: charge, … })`, then `wait` on what that returned).
 */
export interface Operation<Input = unknown, Result = unknown> {
  tenant: string;
  id: string;
  kind: string;
  class: string;
  state: OperationState;
  digest: string;
  input: Input;
  /** Attempts started in the current attempt count. */
  attempt: number;
  maxAttempts: number;
  createdAt: string;
  updatedAt: string;
  /** When the next attempt may start (queued operations). */
  runAfter: string;
  deadlineAt: string | null;
  finishedAt: string | null;
  /**
   * The handler's return value once succeeded (or what an operator recorded resolving it
   * `succeeded`); null until then and in every other state.
   */
  result: Result | null;
  error: ErrorRecord | null;
  /** `requested`: a cancel is pending; `too_late`: an effect had begun, the operation ran on. */
  cancel: 'requested' | 'too_late' | null;
  lease: { worker: string; expiresAt: string } | null;
  attempts?: AttemptView[];
  effects?: EffectView[];
  events?: EventView[];
}

const iso = (ms: number): string => new Date(ms).toISOString();
const isoOrNull = (ms: number | null): string | null => (ms === null ? null : iso(ms));

export function toOperation(
  row: OperationRow,
  extra: { attempts?: AttemptRow[]; effects?: EffectRow[]; events?: EventRow[] } = {},
): Operation {
  const op: Operation = {
    tenant: row.tenant,
    id: row.id,
    kind: row.kind,
    class: row.class,
    state: row.state,
    digest: row.digest,
    input: row.input,
    attempt: row.attempt,
    maxAttempts: row.maxAttempts,
    createdAt: iso(row.createdAt),
    updatedAt: iso(row.updatedAt),
    runAfter: iso(row.runAfter),
    deadlineAt: isoOrNull(row.deadlineAt),
    finishedAt: isoOrNull(row.finishedAt),
    result: row.result ?? null,
    error: row.error,
    cancel: row.cancel,
    lease:
      row.state === 'running' && row.leaseOwner && row.leaseExpiresAt !== null
        ? { worker: row.leaseOwner, expiresAt: iso(row.leaseExpiresAt) }
        : null,
  };
  if (extra.attempts) {
    op.attempts = extra.attempts.map((a) => ({
      attempt: a.attempt,
      startedAt: iso(a.startedAt),
      endedAt: iso(a.endedAt),
      outcome: a.outcome,
      error: a.error,
      retryDelayMs: a.retryDelayMs,
      worker: a.owner,
    }));
  }
  if (extra.effects) {
    op.effects = extra.effects.map((e) => ({
      name: e.name,
      key: e.key,
      state: e.state,
      provider: e.provider,
      firstSentAt: iso(e.firstSentAt),
      sends: e.sends,
      committedAt: isoOrNull(e.committedAt),
      reference: e.reference,
      result: e.result ?? null,
      error: e.error,
    }));
  }
  if (extra.events) {
    op.events = extra.events.map((e) => ({
      at: iso(e.at),
      action: e.action,
      by: e.by,
      reason: e.reason,
      detail: e.detail,
    }));
  }
  return op;
}
