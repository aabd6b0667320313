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
 * Without a tenant, `dead` and `needs_reconciliation` are read through their own index across
 * tenants (migration 35), and `queued` in `seq` order from the cursor: the ready index would be
 * read whole, every tenant's waiting operations, before the first row could be returned. The
 * other settled states, without a tenant, are read in `seq` order too (the CLI's listing).
 * Without a state, a tenant's listing reads a page after the cursor from each state's index as
 * above, and keeps the first of those: at most a page per state, not the tenant's rows. A filter
 * by kind is applied inside each, so a kind the tenant seldom uses still reads through its rows
 * (docs/admission.md).
 */
import { InvalidArgument } from '../../core/errors/index.js';
import {
  AWAITING_OPERATOR_STATES,
  isTerminal,
  OPERATION_STATES,
  type OperationState,
} from '../../core/states.js';
import type { ListParams } from '../types.js';

/** The WHERE of the settled-state index, word for word (migrations/0013_tenant_settled.sql). */
const SETTLED = "state NOT IN ('queued', 'running')";

/** The WHERE of the index across tenants of the states an operator acts on (migration 35). */
const ATTENTION = `state IN (${AWAITING_OPERATOR_STATES.map((s) => `'${s}'`).join(', ')})`;

/**
 * Every tenant's operations in each of those states, counted up to `@cap` through their index:
 * each state's condition and the index's, word for word.
 */
export const AWAITING_OPERATOR_SQL = `SELECT
    (SELECT count(*) FROM (SELECT 1 FROM operations WHERE state = 'dead' AND ${ATTENTION} LIMIT @cap)) AS dead,
    (SELECT count(*) FROM (SELECT 1 FROM operations WHERE state = 'needs_reconciliation' AND ${ATTENTION} LIMIT @cap))
      AS needsReconciliation`;

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

/** The FROM and WHERE that read one state's operations (`state` undefined: every state's). */
function filtered(p: ListParams, state: OperationState | undefined): { from: string; where: string[] } {
  const where: string[] = ['seq > @after'];
  let from = 'operations';
  if (p.tenant !== undefined) where.push('tenant = @tenant');
  if (state !== undefined) {
    // Checked here too, since it is written into the statement: the store is called directly.
    if (!OPERATION_STATES.includes(state))
      throw new InvalidArgument(`state must be one of ${OPERATION_STATES.join(', ')}`);
    // Written out, not bound: the indexes are partial on the state, and SQLite reads a partial
    // index only for a query whose WHERE says its condition in so many words.
    where.push(`state = '${state}'`);
    if (isTerminal(state)) where.push(SETTLED);
    if (p.tenant === undefined && (AWAITING_OPERATOR_STATES as readonly OperationState[]).includes(state))
      where.push(ATTENTION);
    if (state === 'running') from = 'operations INDEXED BY operations_leases';
    if (state === 'queued' && p.tenant !== undefined) {
      from = 'operations INDEXED BY operations_ready';
      where.push('class IN (SELECT class FROM queued_classes)');
    }
  }
  if (p.kind !== undefined) where.push('kind = @kind');
  return { from, where };
}

export function listSql(p: ListParams): string {
  let page: string;
  if (p.tenant !== undefined && p.state === undefined) {
    // Each state's first rows after the cursor, through its own index, then the first of those:
    // a page reads at most a page per state, where the tenant's key would read all its rows.
    const firsts = OPERATION_STATES.map((state) => {
      const { from, where } = filtered(p, state);
      return `SELECT seq FROM (SELECT seq FROM ${from} WHERE ${where.join(' AND ')} ORDER BY seq LIMIT @limit)`;
    });
    page = `SELECT *, ${LISTED_BYTES} AS listed_bytes FROM operations
      WHERE seq IN (${firsts.join(' UNION ALL ')}) ORDER BY seq LIMIT @limit`;
  } else {
    const { from, where } = filtered(p, p.state);
    page = `SELECT *, ${LISTED_BYTES} AS listed_bytes FROM ${from}
      WHERE ${where.join(' AND ')} ORDER BY seq LIMIT @limit`;
  }
  const withClause =
    p.tenant !== undefined && (p.state === undefined || p.state === 'queued') ? QUEUED_CLASSES : '';
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
