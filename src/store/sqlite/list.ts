/**
 * @module store/sqlite/list
 * The operator's listing: operations in submission order, filtered by tenant, state and kind,
 * one page after a cursor (`seq`).
 *
 * Each state is read through the index that holds it, so that a tenant's few live operations
 * are found without reading its whole history:
 * - a settled state, through the index of a tenant's settled operations (migration 13). It holds
 *   only the settled states: queued and running operations move every claim and end, and an
 *   entry of theirs in the tenant's range was a page written per move. SQLite uses a partial
 *   index only when the query's WHERE names its condition in the same words, so the listing
 *   repeats it;
 * - `running`, through the leases' index: every running operation has an entry there, and there
 *   are only as many as the workers' slots (and leases not yet rescued);
 * - a tenant's `queued`, through the ready index, whose entries lead with the class: the classes
 *   with work waiting are found one seek each (a skip scan: a handful, never a tenant's rows), then
 *   the tenant's entries in each, as many as its `maxWaiting` lets wait.
 * Without a tenant, `queued` is read in `seq` order from the cursor: the ready index would be read
 * whole, every tenant's waiting operations, before the first row could be returned.
 * Without a state, a tenant's operations are read through its `(tenant, id)` key and sorted: a
 * listing by tenant alone, or by kind, reads all of a tenant's rows (docs/admission.md).
 */
import { isTerminal } from '../../core/states.js';
import type { ListParams } from '../types.js';

/** The WHERE of the settled-state index, word for word (migrations/0013_tenant_settled.sql). */
const SETTLED = "state NOT IN ('queued', 'running')";

/**
 * The classes with an operation waiting, one seek of the ready index each: a recursive CTE stands
 * in for the skip scan SQLite's planner makes only with statistics it does not have here.
 */
const QUEUED_CLASSES = `WITH RECURSIVE queued_classes(class) AS (
    SELECT (SELECT min(class) FROM operations WHERE state = 'queued')
    UNION ALL
    SELECT (SELECT min(o.class) FROM operations o WHERE o.state = 'queued' AND o.class > q.class)
      FROM queued_classes q WHERE q.class IS NOT NULL)
  `;

export function listSql(p: ListParams): string {
  const where: string[] = ['seq > @after'];
  let from = 'operations';
  let withClause = '';
  if (p.tenant !== undefined) where.push('tenant = @tenant');
  if (p.state !== undefined) {
    // The live states' indexes are partial on the state: written out, not bound, or SQLite
    // cannot tell that the query stays inside them.
    where.push(`state = ${p.state === 'running' || p.state === 'queued' ? `'${p.state}'` : '@state'}`);
    if (isTerminal(p.state)) where.push(SETTLED);
    if (p.state === 'running') from = 'operations INDEXED BY operations_leases';
    if (p.state === 'queued' && p.tenant !== undefined) {
      withClause = QUEUED_CLASSES;
      from = 'operations INDEXED BY operations_ready';
      where.push('class IN (SELECT class FROM queued_classes)');
    }
  }
  if (p.kind !== undefined) where.push('kind = @kind');
  const page = `SELECT *, ${LISTED_BYTES} AS listed_bytes FROM ${from}
    WHERE ${where.join(' AND ')} ORDER BY seq LIMIT @limit`;
  if (p.maxBytes === undefined) return withClause + page;
  // The page first (its LIMIT bounds what the window reads), then its prefix: a row is kept
  // while the rows before the one before it stay under the bound, so the page ends one row
  // after the first row that reaches it.
  return `${withClause}SELECT * FROM (
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
