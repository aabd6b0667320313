/**
 * @module core/errors/sluice-error
 * The base of every error Sluice raises. Each carries a stable kebab-case `code` (documented in
 * docs/errors.md and mapped to HTTP in exactly one place) and whether retrying the same call may
 * succeed. Guards test a global symbol and the code, not `instanceof`, so they hold when an
 * application ends up with two copies of the package.
 */

import { storableCode } from './code.js';
import type { SluiceErrorCode } from './codes.js';

const MARK = Symbol.for('sluice.error');

export interface SluiceErrorOptions {
  cause?: unknown;
  retryable?: boolean;
}

export class SluiceError extends Error {
  /** One of Sluice's own codes (`SluiceErrorCode`), or the code a handler gave its error. */
  readonly code: SluiceErrorCode | (string & {});
  readonly retryable: boolean;

  constructor(code: SluiceErrorCode | (string & {}), message: string, options: SluiceErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.retryable = options.retryable ?? false;
    Object.defineProperty(this, MARK, { value: true });
  }

  override get name(): string {
    return this.constructor.name;
  }
}

export function isSluiceError(value: unknown): value is SluiceError {
  try {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[MARK] === true;
  } catch {
    // A Proxy's trap, or a getter, that throws: no error of Sluice's is read that way.
    return false;
  }
}

/** A guard for one code, safe across package copies; never throws, whatever it is given. */
export function hasCode<T extends SluiceError>(value: unknown, code: string): value is T {
  try {
    return isSluiceError(value) && value.code === code;
  } catch {
    return false;
  }
}

/** The JSON form of an error as stored in attempt history and shown to clients. */
export interface ErrorRecord {
  code: string;
  message: string;
  /** How the failure was classified: decides whether it was retried. */
  outcome?: 'permanent' | 'retryable' | 'ambiguous' | 'interrupted';
  details?: unknown;
}

/** The most JSON an error record's `details` may hold; larger details are replaced by a note. */
export const MAX_ERROR_DETAILS_BYTES = 16_384;

/** The longest message a record keeps. */
export const MAX_MESSAGE_CHARS = 2000;

/**
 * Turns anything thrown into a record that is safe to store (no stack, bounded message, a code
 * that is one, details that are JSON of bounded size). It never throws: the record is written in
 * the same transaction as other attempts' ends, which one unstorable error must not take down with
 * it, and it is made on a failure path, where a throw would leave the attempt without an end.
 */
export function toErrorRecord(error: unknown, outcome?: ErrorRecord['outcome']): ErrorRecord {
  let record: ErrorRecord;
  try {
    const { code, note } = storableCode(error);
    const message = messageOf(error);
    record = {
      code,
      message: note
        ? message.slice(0, MAX_MESSAGE_CHARS - note.length) + note
        : message.slice(0, MAX_MESSAGE_CHARS),
    };
  } catch {
    record = { code: 'unclassified-error', message: 'an error that cannot be read' };
  }
  if (outcome) record.outcome = outcome;
  let details: unknown;
  try {
    details = (error as { details?: unknown } | null)?.details;
  } catch {
    details = { omitted: "reading the error's details threw" };
  }
  if (details !== undefined) record.details = storableDetails(details);
  return record;
}

export function messageOf(error: unknown): string {
  try {
    const message = error instanceof Error ? error.message : String(error);
    return typeof message === 'string' ? message : String(message);
  } catch {
    // `String(Object.create(null))` throws, and so may a getter.
    return `a thrown ${typeof error} with no printable form`;
  }
}

/** `details` as the JSON the store will keep, or a note saying why they were left out. */
function storableDetails(details: unknown): unknown {
  let text: string | undefined;
  try {
    text = JSON.stringify(details);
  } catch (error) {
    return { omitted: `the details are not JSON: ${messageOf(error)}` };
  }
  if (text === undefined) return { omitted: `the details are a ${typeof details}, which JSON cannot hold` };
  const bytes = Buffer.byteLength(text);
  if (bytes > MAX_ERROR_DETAILS_BYTES)
    return { omitted: `the details are ${bytes} bytes of JSON, over the ${MAX_ERROR_DETAILS_BYTES} kept` };
  return JSON.parse(text);
}
