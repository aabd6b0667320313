/**
 * @module core/json-size
 * The size of a value as the JSON a store writes, measured only when it may be over a bound.
 * `assertPlainJson` (core/digest.ts) already walks the value and returns an upper bound of its
 * JSON's bytes; most results are far under their limit, so the exact count, which means writing
 * the value out, is made only when that bound is over it.
 */

/** The value's JSON bytes when they are over `max`; `null` when they are not. */
export function jsonBytesOver(value: unknown, bound: number, max: number): number | null {
  if (bound <= max) return null;
  const bytes = Buffer.byteLength(JSON.stringify(value));
  return bytes > max ? bytes : null;
}
