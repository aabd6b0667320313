/**
 * @module core/json-size
 * The size of JSON text as a store writes it (UTF-8), counted only when it may be over a bound:
 * a UTF-16 unit is at most 3 bytes of UTF-8, so most texts, far under their limit, are not
 * counted at all.
 */

/** The text's UTF-8 bytes when they are over `max`; `null` when they are not. */
export function utf8BytesOver(text: string, max: number): number | null {
  if (text.length * 3 <= max) return null;
  const bytes = Buffer.byteLength(text);
  return bytes > max ? bytes : null;
}
