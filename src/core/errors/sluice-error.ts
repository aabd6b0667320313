/**
 * @module core/errors/sluice-error
 * The base of every error Sluice raises. Each carries a stable kebab-case `code` (documented in
 * docs/errors.md and mapped to HTTP in exactly one place) and whether retrying the same call may
 * succeed. Guards test a global symbol and the code, not `instanceof`, so they hold when an
 * application ends up with two copies of the package.
 */

const MARK = Symbol.for('sluice.error');

export interface SluiceErrorOptions {
  cause?: unknown;
  retryable?: boolean;
}

export class SluiceError extends Error {
  readonly code: string;
  readonly retryable: boolean;

  constructor(code: string, message: string, options: SluiceErrorOptions = {}) {
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
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[MARK] === true;
}

/** A guard for one code, safe across package copies. */
export function hasCode<T extends SluiceError>(value: unknown, code: string): value is T {
  return isSluiceError(value) && value.code === code;
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

/**
 * Turns anything thrown into a record that is safe to store (no stack, bounded message, details
 * that are JSON of bounded size). It never throws: the record is written in the same transaction
 * as other attempts' ends, which one unstorable error must not take down with it.
 */
export function toErrorRecord(error: unknown, outcome?: ErrorRecord['outcome']): ErrorRecord {
  const code = isSluiceError(error) ? error.code : 'unclassified-error';
  const record: ErrorRecord = { code, message: messageOf(error).slice(0, 2000) };
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
