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
  return `SELECT * FROM operations WHERE ${where.join(' AND ')} ORDER BY seq LIMIT @limit`;
}

export function listParams(p: ListParams): Record<string, unknown> {
  return { after: p.after ?? 0, tenant: p.tenant, state: p.state, kind: p.kind, limit: p.limit };
}
