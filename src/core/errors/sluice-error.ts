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

/** Turns anything thrown into a record that is safe to store (no stack, bounded message). */
export function toErrorRecord(error: unknown, outcome?: ErrorRecord['outcome']): ErrorRecord {
  const message = error instanceof Error ? error.message : String(error);
  const code = isSluiceError(error) ? error.code : 'unclassified-error';
  const record: ErrorRecord = { code, message: message.slice(0, 2000) };
  if (outcome) record.outcome = outcome;
  const details = (error as { details?: unknown } | null)?.details;
  if (details !== undefined) record.details = details;
  return record;
}
