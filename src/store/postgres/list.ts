/**
 * @module store/postgres/list
 * The operator's listing: operations in submission order, filtered by tenant, state and kind,
 * one page after a cursor (`seq`). Sent unprepared, so that each is planned with its values.
 *
 * The planner chooses by the table's statistics, which autovacuum keeps: a tenant's queued
 * operations through the ready index, a settled state through `operations_state`, a page of a
 * tenant's every state through its key or in `seq` order, whichever reads less; `running` through
 * the leases' index once the query says the lease is set (below). A kind the tenant seldom uses
 * reads through its rows (docs/admission.md).
 */
import type { ListParams } from '../types.js';

/** The bytes of a listed operation's input, result and error, as the store holds them. */
const LISTED_BYTES = `octet_length(input) + coalesce(octet_length(result), 0) + coalesce(octet_length(error), 0)`;

/** The statement and its values; `{s}` stands for the schema. */
export function listQuery(p: ListParams): { text: string; values: unknown[] } {
  const where: string[] = ['seq > $1'];
  const values: unknown[] = [p.after ?? 0];
  for (const [column, value] of [
    ['tenant', p.tenant],
    ['state', p.state],
    ['kind', p.kind],
  ] as const) {
    if (value === undefined) continue;
    values.push(value);
    where.push(`${column} = $${values.length}`);
  }
  // Every running operation holds a lease and no other does: said outright, it lets the planner
  // read the leases' partial index (as many entries as slots) instead of a tenant's history.
  if (p.state === 'running') where.push('lease_expires_at IS NOT NULL');
  values.push(p.limit);
  const page = `SELECT *, ${LISTED_BYTES} AS listed_bytes FROM {s}.operations
      WHERE ${where.join(' AND ')} ORDER BY seq LIMIT $${values.length}`;
  if (p.maxBytes === undefined) return { text: page, values };
  values.push(p.maxBytes);
  // As SQLite's (store/sqlite/list.ts): the page, then the prefix that ends one row after the
  // first row reaching the bound.
  return {
    text: `SELECT * FROM (
         SELECT p.*, sum(p.listed_bytes) OVER (ORDER BY p.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 2 PRECEDING) AS before
           FROM (${page}) AS p) AS w
        WHERE coalesce(w.before, 0) < $${values.length} ORDER BY w.seq`,
    values,
  };
}
