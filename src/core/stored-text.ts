/**
 * @module core/stored-text
 * Text every store keeps as it was given: no NUL (PostgreSQL's text and jsonb refuse U+0000) and
 * no lone surrogate (not Unicode; it would not survive UTF-8). Free text from outside (an
 * operator's `by` and `reason`, a provider's reference) is checked with this before it is written.
 */
import { InvalidArgument } from './errors/index.js';

/** A surrogate standing alone: in Unicode mode a pair is one code point, of another category. */
export const LONE_SURROGATE = /\p{Cs}/u;

export const isStoredText = (value: string): boolean =>
  !value.includes('\u0000') && !LONE_SURROGATE.test(value);

/**
 * Who did an operator action and why, as the HTTP API bounds them: both are kept in the history.
 * NUL is refused: PostgreSQL's text cannot hold it, and SQLite's would, so the stores would differ.
 * So is a lone surrogate, which is not Unicode text: each store would keep another replacement.
 */
export function assertRecorded(who: { by: unknown; reason: unknown }): void {
  assertRecordedText('by', who.by, MAX_BY_CHARS);
  assertRecordedText('reason', who.reason, MAX_REASON_CHARS);
}

/** The most characters of an operator action's `by` and of its `reason`. */
export const MAX_BY_CHARS = 200;
export const MAX_REASON_CHARS = 2000;

/** One recorded text of an operator action: 1–`max` characters, not all blank, stored as given. */
export function assertRecordedText(name: string, value: unknown, max: number): void {
  if (typeof value !== 'string' || value.trim() === '' || value.length > max || !isStoredText(value))
    throw new InvalidArgument(
      `${name} must be 1–${max} characters, not all blank, without NUL or a lone surrogate`,
    );
}
