/**
 * @module store/postgres/rows
 * Maps PostgreSQL rows to the store's row types. The columns are those of the SQLite schema
 * (same names, JSON as text), so the SQLite mappers do the rest once the numbers are numbers:
 * node-postgres returns `bigint` (times, seq, cost) as strings, since they may exceed 2^53;
 * Sluice's values (epoch milliseconds, counters) never do.
 */
import {
  toAttemptRow as attemptFromRaw,
  toEffectRow as effectFromRaw,
  toEventRow as eventFromRaw,
  toOperationRow as operationFromRaw,
  type RawAttempt,
  type RawEffect,
  type RawEvent,
  type RawOperation,
} from '../sqlite/rows.js';
import type { AttemptRow, EffectRow, EventRow, OperationRow } from '../types.js';

export { jsonText } from '../sqlite/rows.js';

/** A row as node-postgres returns it: the same columns, bigints as strings. */
export type PgRow = Record<string, unknown>;

/** A bigint column: a number, or null. */
export const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/** A duration or time parameter for a bigint column: whole milliseconds. */
export const ms = (v: number | null | undefined): number | null =>
  v === null || v === undefined ? null : Math.round(v);

function numbers<T>(row: PgRow, columns: readonly string[]): T {
  const out: PgRow = { ...row };
  for (const c of columns) out[c] = num(row[c]);
  return out as T;
}

const OPERATION_BIGINTS = [
  'seq',
  'epoch',
  'run_after',
  'deadline_at',
  'created_at',
  'updated_at',
  'started_at',
  'finished_at',
  'lease_expires_at',
  'effect_started_at',
  'cancel_requested_at',
] as const;

export function toOperationRow(row: PgRow): OperationRow {
  return operationFromRaw(numbers<RawOperation>(row, OPERATION_BIGINTS));
}

export function toEffectRow(row: PgRow): EffectRow {
  return effectFromRaw(
    numbers<RawEffect>(row, ['cost', 'first_sent_at', 'last_sent_at', 'committed_at', 'epoch']),
  );
}

export function toAttemptRow(row: PgRow): AttemptRow {
  return attemptFromRaw(numbers<RawAttempt>(row, ['epoch', 'started_at', 'ended_at', 'retry_delay_ms']));
}

export function toEventRow(row: PgRow): EventRow {
  return eventFromRaw(numbers<RawEvent>(row, ['at']));
}
