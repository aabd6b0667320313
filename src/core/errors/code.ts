/**
 * @module core/errors/code
 * The code an error is stored, shown and logged with: its own when it is one, every code Sluice
 * raises being one, and a handler's own (`card_declined`, `Card.Declined-2`, `402`) kept as
 * given. One that is not (a number, an object, a NUL, 5 MB of text) was stored, listed, logged and
 * shown over HTTP as it came (`[object Object]`): it is replaced by its class's own code, and the
 * message says what it was, bounded.
 *
 * Not part of the public API (core/errors/index.ts does not export it).
 */

/** What a code is: 1 to 100 letters, digits, `.`, `_` or `-`, the first a letter or digit. */
export const ERROR_CODE = /^[a-z0-9][a-z0-9._-]{0,99}$/i;

/**
 * The code an error of a handler's outcome class has by default (core/errors/outcomes.ts), by its
 * global mark: what is kept in place of a code of its that is not one.
 */
const OUTCOME_CODES: Readonly<Record<string, string>> = {
  permanent: 'permanent-failure',
  retryable: 'retryable-failure',
  ambiguous: 'ambiguous-outcome',
};

/**
 * The code kept of `error` (`unclassified-error` for anything but a Sluice error), and, when its
 * own code was not one, a note for its message saying what it was. Never throws.
 */
export function storableCode(error: unknown): { code: string; note?: string } {
  let given: unknown;
  let outcome: unknown;
  try {
    if (typeof error !== 'object' || error === null) return { code: 'unclassified-error' };
    const marks = error as Record<string | symbol, unknown>;
    if (marks[Symbol.for('sluice.error')] !== true) return { code: 'unclassified-error' };
    given = marks.code;
    if (typeof given === 'string' && ERROR_CODE.test(given)) return { code: given };
    outcome = marks[Symbol.for('sluice.outcome')];
  } catch {
    // A getter, or a Proxy's trap, that throws: a code that cannot be read is none.
    return { code: 'unclassified-error' };
  }
  return {
    code: (typeof outcome === 'string' && OUTCOME_CODES[outcome]) || 'unclassified-error',
    note: ` (its code ${shownCode(given)} is not a code: one is 1 to 100 letters, digits, '.', '_' or '-', the first a letter or digit)`,
  };
}

/** A code that is not one, as a message may say it: short, and as text a store keeps. */
function shownCode(code: unknown): string {
  if (typeof code === 'string')
    // JSON escapes a NUL and a lone surrogate (the half of a pair the cut left) as plain text.
    return code.length > 40
      ? `${JSON.stringify(code.slice(0, 40))}… (${code.length} characters)`
      : JSON.stringify(code);
  if (typeof code === 'number' || typeof code === 'boolean' || typeof code === 'bigint') return String(code);
  if (code === null || code === undefined) return String(code);
  return typeof code === 'object' ? 'an object' : `a ${typeof code}`;
}
