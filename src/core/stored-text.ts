/**
 * @module core/stored-text
 * Text every store keeps as it was given: no NUL (PostgreSQL's text and jsonb refuse U+0000) and
 * no lone surrogate (not Unicode; it would not survive UTF-8). Free text from outside (an
 * operator's `by` and `reason`, a provider's reference) is checked with this before it is written.
 */

/** A surrogate standing alone: in Unicode mode a pair is one code point, of another category. */
export const LONE_SURROGATE = /\p{Cs}/u;

export const isStoredText = (value: string): boolean =>
  !value.includes('\u0000') && !LONE_SURROGATE.test(value);
