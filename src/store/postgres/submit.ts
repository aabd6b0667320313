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
 * only if that transaction commits, and the wake-up NOTIFY is delivered with its commit. It holds
 * the tenant's queue row until then, but not the class row every submit and claim of the class
 * moves: the class is counted as a delta of its own, its bound read without a lock (migration 31).
 */
import type pg from 'pg';
import { InvalidArgument } from '../../core/errors/index.js';
import { createdRow } from '../created-row.js';
import type { SubmitOutcome, SubmitParams } from '../types.js';
import type { PgContext, Query } from './connection.js';
import { pgDriver } from './driver.js';
import { ms, num, type PgRow, toOperationRow } from './rows.js';

// A created operation comes back as its key and times only (store/created-row.ts builds the rest
// from what was sent); an existing one, which the caller did not send, as one JSON column.
const COLUMNS = `r.status, r.digest_matches, r.reason, r.counted_waiting, r.counted_running,
  (r.op).seq, (r.op).created_at, (r.op).run_after, (r.op).deadline_at,
  CASE WHEN r.status IN ('existing', 'conflict') THEN row_to_json(r.op) END AS existing`;
const SQL_BATCH = `SELECT ${COLUMNS}
  FROM {s}.submit_many($1, $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                       $8::integer[], $9::bigint[], $10::bigint[], $11::boolean[], $12::float8[],
                       $13::integer[], $14::integer[], $15::integer[], $16, $17)
       WITH ORDINALITY AS r(status, digest_matches, reason, counted_waiting, counted_running, op, ord)
 ORDER BY r.ord`;
// One item: the single-submit function, with scalar arguments and the fewest statements (a
// set-based statement pays for its planning only over a batch).
const SQL_ONE = `SELECT ${COLUMNS}
  FROM {s}.submit_one($1, $2, $3, $4, $5, $6, $7, $8::integer, $9::bigint, $10::bigint, $11::boolean, $12::float8,
                      $13::integer, $14::integer, $15::integer, $16, $17) r`;

export interface SubmitOptions {
  /** A connection inside an open transaction: the submit commits or rolls back with it. */
  client?: pg.ClientBase;
  /** The same, under the Store interface's name. */
  tx?: unknown;
}

const NOT_A_TRANSACTION = 'tx must be a pg client (PoolClient or Client) inside an open transaction';

/**
 * Refuses a `tx` that cannot be the caller's transaction. A pool has `query()` too, but each call
 * runs on whichever connection is free, in a transaction of its own; a client that has not begun
 * one commits the submit at once. Either way the operation would be accepted whatever the
 * caller's transaction then did, the one thing a transactional submit promises it is not. A
 * client's transaction status (`getTransactionStatus()`: `I` idle, `T` in a transaction, `E` in
 * a failed one) is what the server said after its last answered query: a `BEGIN` sent and not
 * yet awaited reads as idle (await it first). A client without the method (another driver's, a
 * wrapper) is taken on trust; the server refuses a failed transaction itself.
 */
function checkTransaction(client: pg.ClientBase): void {
  // A pool of another copy of pg (the application's own install) is caught by its counters.
  const pool =
    client instanceof pgDriver().Pool || typeof (client as { totalCount?: unknown }).totalCount === 'number';
  if (typeof (client as { query?: unknown }).query !== 'function' || pool)
    throw new InvalidArgument(`${NOT_A_TRANSACTION}, not ${pool ? 'a pool' : 'that'}`);
  const status =
    typeof client.getTransactionStatus === 'function' ? client.getTransactionStatus() : undefined;
  if (status === 'I')
    throw new InvalidArgument(
      `${NOT_A_TRANSACTION}: this client has not begun one (BEGIN, awaited), so the submit would commit on its own`,
    );
}

/** Accepts a batch: one outcome per item, in order (see the module header). */
export async function submitMany(
  ctx: PgContext,
  items: SubmitParams[],
  options: SubmitOptions = {},
): Promise<SubmitOutcome[]> {
  if (items.length === 0) return [];
  const one = items.length === 1;
  const client = options.client ?? (options.tx as pg.ClientBase | undefined);
  if (client !== undefined) checkTransaction(client);
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
    // In the caller's transaction the class is counted as a delta, not under its row's lock.
    client !== undefined,
  ];
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
  const due = await dueOfRefused(query, values[0], items, rows);
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
        // A batch reads the rows it answers with after its writes: the purge may have removed one
        // it had found, meanwhile, for a tombstone, which is what a submit now would be answered.
        if (!r.existing) return { status: 'expired', digestMatches: r.status === 'existing' };
        return { status: r.status, row: toOperationRow(r.existing) };
      case 'expired':
        return { status: 'expired', digestMatches: r.digest_matches === true };
      default:
        return {
          status: 'rejected',
          reason: r.reason ?? 'tenant-queue-full',
          waiting: r.counted_waiting ?? 0,
          running: r.counted_running ?? 0,
          dueInMs: r.reason === 'class-queue-full' ? null : (due.get(pairKey(items[i]!)) ?? null),
        };
    }
  });
}

const pairKey = (i: SubmitParams) => `${i.class}\u0000${i.tenant}`;

/**
 * For the tenants refused as full: how long until each one's earliest waiting operation is due
 * (its queue row's `ready_at`, which is never later than that). A second statement, made only when
 * something was refused, so the accepting path keeps its one round trip.
 */
async function dueOfRefused(
  query: Query,
  now: unknown,
  items: SubmitParams[],
  rows: Array<{ status: string; reason: string | null }>,
): Promise<Map<string, number>> {
  const refused = new Map<string, SubmitParams>();
  rows.forEach((r, i) => {
    if (r.status === 'rejected' && r.reason !== 'class-queue-full')
      refused.set(pairKey(items[i]!), items[i]!);
  });
  if (refused.size === 0) return new Map();
  const pairs = [...refused.values()];
  const due = await query<{ class: string; tenant: string; due: string }>(
    `SELECT q.class, q.tenant, greatest(0, q.ready_at - {s}.now_ms($3::bigint)) AS due
       FROM unnest($1::text[], $2::text[]) AS k(class, tenant)
       JOIN {s}.queues q ON q.class = k.class AND q.tenant = k.tenant
      WHERE q.waiting > 0 AND q.ready_at IS NOT NULL`,
    [pairs.map((p) => p.class), pairs.map((p) => p.tenant), now],
  );
  return new Map(due.map((d) => [`${d.class}\u0000${d.tenant}`, Number(d.due)]));
}
