/**
 * @module store/byte-order
 * How both stores order keys in code where the database's own order must be matched: the "C"
 * collation on PostgreSQL, SQLite's default.
 */

/** Compares two keys in byte order, as the "C" collation and SQLite compare. */
export const byteOrder = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
