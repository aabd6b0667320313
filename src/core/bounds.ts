/**
 * @module core/bounds
 * Checks of the numbers a caller configures (a kind's limits, a worker's periods and slots):
 * each is a finite number inside its range, or the call that was given it throws
 * `InvalidArgument` naming it. A duration that becomes a timer is bounded by what a timer holds.
 */
import { InvalidArgument } from './errors/index.js';

/**
 * The longest wait a Node.js timer holds (2^31 − 1 ms, about 24.8 days). A longer one fires after
 * 1 ms instead, with a warning: an attempt timeout of a month would end every attempt at once.
 */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * The longest duration a kind's limits may name (100 years): added to a time, it stays a safe
 * integer in JavaScript and fits the stores' 64-bit columns of milliseconds.
 */
export const MAX_DURATION_MS = 100 * 365 * 86_400_000;

/** The longest delay or deadline one submit may ask for (365 days), as the HTTP API bounds them. */
export const MAX_REQUEST_MS = 365 * 86_400_000;

export interface Range {
  min: number;
  max?: number;
  /** Whole numbers only. */
  integer?: boolean;
}

/** `value` checked against `range`, or `fallback` when it is left out. */
export function bounded(name: string, value: number | undefined, fallback: number, range: Range): number {
  if (value === undefined) return fallback;
  const { min, max, integer = false } = range;
  if (
    typeof value !== 'number' ||
    !Number.isFinite(value) ||
    value < min ||
    (max !== undefined && value > max) ||
    (integer && !Number.isInteger(value))
  ) {
    const what = integer ? 'a whole number' : 'a number';
    const span = max === undefined ? `≥ ${n(min)}` : `from ${n(min)} to ${n(max)}`;
    throw new InvalidArgument(`${name} must be ${what} ${span}, not ${String(value)}`);
  }
  return value;
}

const n = (x: number) => x.toLocaleString('en-US');

/**
 * `value` is an object whose keys are all in `known`, or `InvalidArgument` naming the first that
 * is not. A misspelled limit left unread would switch that limit off without a word.
 */
export function knownKeys(name: string, value: unknown, known: readonly string[]): void {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgument(`${name} must be an object, not ${JSON.stringify(value) ?? String(value)}`);
  }
  const unknown = Object.keys(value).filter((k) => !known.includes(k));
  if (unknown.length > 0) {
    throw new InvalidArgument(
      `${name}: unknown ${unknown.length === 1 ? 'key' : 'keys'} ${unknown.join(', ')} (known: ${known.join(', ')})`,
    );
  }
}
