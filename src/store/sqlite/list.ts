/**
 * @module store/sqlite/list
 * The operator's listing: operations in submission order, filtered by tenant, state and kind,
 * one page after a cursor (`seq`).
 *
 * The index for a tenant's operations by state holds only the settled states (migration 13):
 * queued and running operations move every claim and end, and an entry of theirs in the tenant's
 * range was a page written per move. SQLite uses a partial index only when the query's WHERE
 * names its condition in the same words, so a listing of a settled state repeats it; a listing
 * of a tenant's live operations reads that tenant's rows, as PostgreSQL's does.
 */
import { isTerminal } from '../../core/states.js';
import type { ListParams } from '../types.js';

/** The WHERE of the settled-state index, word for word (migrations/0013_tenant_settled.sql). */
const SETTLED = "state NOT IN ('queued', 'running')";

export function listSql(p: ListParams): string {
  const where: string[] = ['seq > @after'];
  if (p.tenant !== undefined) where.push('tenant = @tenant');
  if (p.state !== undefined) {
    where.push('state = @state');
    if (isTerminal(p.state)) where.push(SETTLED);
  }
  if (p.kind !== undefined) where.push('kind = @kind');
  const page = `SELECT *, ${LISTED_BYTES} AS listed_bytes FROM operations
    WHERE ${where.join(' AND ')} ORDER BY seq LIMIT @limit`;
  if (p.maxBytes === undefined) return page;
  // The page first (its LIMIT bounds what the window reads), then its prefix: a row is kept
  // while the rows before the one before it stay under the bound, so the page ends one row
  // after the first row that reaches it.
  return `SELECT * FROM (
      SELECT p.*, sum(p.listed_bytes) OVER (ORDER BY p.seq ROWS BETWEEN UNBOUNDED PRECEDING AND 2 PRECEDING) AS before
        FROM (${page}) AS p)
    WHERE coalesce(before, 0) < @maxBytes ORDER BY seq`;
}

/** Bytes, not characters: a TEXT value's `length` counts characters. */
const LISTED_BYTES = `length(CAST(input AS BLOB)) + coalesce(length(CAST(result AS BLOB)), 0)
  + coalesce(length(CAST(error AS BLOB)), 0)`;

export function listParams(p: ListParams): Record<string, unknown> {
  return {
    after: p.after ?? 0,
    tenant: p.tenant,
    state: p.state,
    kind: p.kind,
    limit: p.limit,
    ...(p.maxBytes === undefined ? {} : { maxBytes: p.maxBytes }),
  };
}
