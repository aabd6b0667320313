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
import { createdRow } from '../created-row.js';
import type { SubmitOutcome, SubmitParams } from '../types.js';
import type { PgContext } from './connection.js';
import { ms, num, type PgRow, toOperationRow } from './rows.js';

// A created operation comes back as its key and times only (store/created-row.ts builds the rest
// from what was sent); an existing one, which the caller did not send, as one JSON column.
const COLUMNS = `r.status, r.digest_matches, r.reason, r.counted_waiting, r.counted_running,
  (r.op).seq, (r.op).created_at, (r.op).run_after, (r.op).deadline_at,
  CASE WHEN r.status IN ('existing', 'conflict') THEN row_to_json(r.op) END AS existing`;
const SQL_BATCH = `SELECT ${COLUMNS}
  FROM {s}.submit_many($1, $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                       $8::integer[], $9::bigint[], $10::bigint[], $11::boolean[], $12::float8[],
                       $13::integer[], $14::integer[], $15::integer[], $16)
       WITH ORDINALITY AS r(status, digest_matches, reason, counted_waiting, counted_running, op, ord)
 ORDER BY r.ord`;
// One item: the single-submit function, with scalar arguments and the fewest statements (a
// set-based statement pays for its planning only over a batch).
const SQL_ONE = `SELECT ${COLUMNS}
  FROM {s}.submit_one($1, $2, $3, $4, $5, $6, $7, $8::integer, $9::bigint, $10::bigint, $11::boolean, $12::float8,
                      $13::integer, $14::integer, $15::integer, $16) r`;

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
  const one = items.length === 1;
  // Arrays of the items' fields for the batch function, the fields themselves for a single item.
  const field = <T>(get: (i: SubmitParams) => T): T | T[] => (one ? get(items[0]!) : items.map(get));
  const values = [
    ctx.now(),
    field((i) => i.tenant),
    field((i) => i.id),
    field((i) => i.kind),
    field((i) => i.class),
    field((i) => i.digest),
    field((i) => i.inputJson),
    field((i) => i.maxAttempts),
    field((i) => ms(i.deadlineMs)),
    field((i) => ms(i.delayMs ?? 0)),
    field((i) => i.limits !== undefined),
    field((i) => i.limits?.weight ?? 1),
    field((i) => i.limits?.maxRunning ?? null),
    field((i) => i.limits?.maxWaiting ?? null),
    field((i) => i.limits?.maxQueued ?? null),
    ctx.notify,
  ];
  const client = options.client ?? (options.tx as pg.ClientBase | undefined);
  if (client !== undefined && typeof (client as { query?: unknown }).query !== 'function') {
    throw new InvalidArgument('tx must be a pg client (PoolClient or Client) inside an open transaction');
  }
  const query = client ? ctx.on(client) : ctx.query;
  const rows = await query<{
    status: string;
    digest_matches: boolean | null;
    reason: 'tenant-queue-full' | 'class-queue-full' | null;
    counted_waiting: number | null;
    counted_running: number | null;
    seq: string | null;
    created_at: string | null;
    run_after: string | null;
    deadline_at: string | null;
    existing: PgRow | null;
  }>(one ? SQL_ONE : SQL_BATCH, values);
  return rows.map((r, i): SubmitOutcome => {
    switch (r.status) {
      case 'created':
        return {
          status: 'created',
          row: createdRow(items[i]!, {
            seq: Number(r.seq),
            createdAt: Number(r.created_at),
            runAfter: Number(r.run_after),
            deadlineAt: num(r.deadline_at),
          }),
        };
      case 'existing':
      case 'conflict':
        return { status: r.status, row: toOperationRow(r.existing ?? {}) };
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
