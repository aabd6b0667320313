/**
 * @module store/postgres/submit
 * Acceptance of a batch: one call of the migration's `submit_many` function, so N items cost one
 * round trip and one commit. The function keeps SQLite's order of checks (existing record,
 * tombstone, the tenant's waiting cap, the class's queue bound, insert) and makes each race-free
 * across processes: the tenant cap is counted under the queue row's lock and the class bound
 * under the class row's lock (taken after the queue rows, see the migration's lock order), and a
 * concurrent duplicate insert resolves to `existing` or `conflict` (`ON CONFLICT DO NOTHING`,
 * then the committed row), never to an error. A refusal carries the counts that refused it.
 *
 * Transactional submit: with `client`, the call runs on the caller's connection inside the
 * caller's open transaction (no BEGIN/COMMIT of its own, no retry): the operations exist if and
 * only if that transaction commits, and the wake-up NOTIFY is delivered with its commit.
 */
import type pg from 'pg';
import { InvalidArgument } from '../../core/errors/index.js';
import type { SubmitOutcome, SubmitParams } from '../types.js';
import type { PgContext } from './connection.js';
import { ms, type PgRow, toOperationRow } from './rows.js';

// One item goes to the item-by-item version of the function directly: set-based statements pay
// for their planning only over a batch (migration 4).
const sql = (
  fn: 'submit_many' | 'submit_many_each',
) => `SELECT r.status, r.digest_matches, r.reason, r.counted_waiting, r.counted_running, (r.op).*
  FROM {s}.${fn}($1, $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                       $8::integer[], $9::bigint[], $10::bigint[], $11::boolean[], $12::float8[],
                       $13::integer[], $14::integer[], $15::integer[], $16)
       WITH ORDINALITY AS r(status, digest_matches, reason, counted_waiting, counted_running, op, ord)
 ORDER BY r.ord`;
const SQL_BATCH = sql('submit_many');
const SQL_ONE = sql('submit_many_each');

export interface SubmitOptions {
  /** A connection inside an open transaction: the submit commits or rolls back with it. */
  client?: pg.ClientBase;
  /** The same, under the Store interface's name. */
  tx?: unknown;
}

/** Accepts a batch: one outcome per item, in order (see the module header). */
export async function submitMany(
  ctx: PgContext,
  items: SubmitParams[],
  options: SubmitOptions = {},
): Promise<SubmitOutcome[]> {
  if (items.length === 0) return [];
  const values = [
    ctx.now(),
    items.map((i) => i.tenant),
    items.map((i) => i.id),
    items.map((i) => i.kind),
    items.map((i) => i.class),
    items.map((i) => i.digest),
    items.map((i) => i.inputJson),
    items.map((i) => i.maxAttempts),
    items.map((i) => ms(i.deadlineMs)),
    items.map((i) => ms(i.delayMs ?? 0)),
    items.map((i) => i.limits !== undefined),
    items.map((i) => i.limits?.weight ?? 1),
    items.map((i) => i.limits?.maxRunning ?? null),
    items.map((i) => i.limits?.maxWaiting ?? null),
    items.map((i) => i.limits?.maxQueued ?? null),
    ctx.notify,
  ];
  const client = options.client ?? (options.tx as pg.ClientBase | undefined);
  if (client !== undefined && typeof (client as { query?: unknown }).query !== 'function') {
    throw new InvalidArgument('tx must be a pg client (PoolClient or Client) inside an open transaction');
  }
  const query = client ? ctx.on(client) : ctx.query;
  const rows = await query<
    PgRow & {
      status: string;
      digest_matches: boolean | null;
      reason: 'tenant-queue-full' | 'class-queue-full' | null;
      counted_waiting: number | null;
      counted_running: number | null;
    }
  >(items.length === 1 ? SQL_ONE : SQL_BATCH, values);
  return rows.map((r): SubmitOutcome => {
    switch (r.status) {
      case 'created':
      case 'existing':
      case 'conflict':
        return { status: r.status, row: toOperationRow(r) };
      case 'expired':
        return { status: 'expired', digestMatches: r.digest_matches === true };
      default:
        return {
          status: 'rejected',
          reason: r.reason ?? 'tenant-queue-full',
          waiting: r.counted_waiting ?? 0,
          running: r.counted_running ?? 0,
        };
    }
  });
}
