/**
 * @module store/postgres/effects
 * The effect journal (the rules of store/sqlite/effects.ts), one function call per write, each
 * one round trip and one transaction:
 *
 * - `begin` (steps 2 and 3 of the protocol) is the migration's `effect_begin`: under the
 *   operation's row lock (the lock cancel takes too) it checks the lease and that no cancel is
 *   pending, returns an existing row, else checks the request cap, draws on the budgets (all or
 *   nothing, under the budget rows' locks), marks the point of no return and writes `pending`.
 *   A refusal writes nothing and comes back as a status, turned here into `BudgetExhausted` or
 *   `OperationLimitExceeded`.
 * - `recordSend` is `effect_record_send`: the same lock and checks for one more request.
 * - The marks are `effect_mark`, fenced by a share lock on the operation row held by the lease;
 *   they settle the effect's spend reservations (committed: commit; absent, failed: release).
 */
import {
  BudgetExhausted,
  CancelRequested,
  type ErrorRecord,
  InvalidStateTransition,
  LeaseLost,
  OperationLimitExceeded,
} from '../../core/errors/index.js';
import { createdEffectRow } from '../created-row.js';
import type {
  BudgetCharge,
  EffectBeginParams,
  EffectBeginResult,
  EffectMarkParams,
  EffectRow,
  LeaseRef,
  Settled,
} from '../types.js';
import { chargeArrays } from './budgets.js';
import type { PgContext } from './connection.js';
import { jsonText, num, type PgRow, toEffectRow } from './rows.js';

/** What effect_begin and effect_record_send return besides the effect row. */
interface Refusable extends PgRow {
  status: string;
  clock: string;
  refused_by: string | null;
  retry_after: string | null;
  calls: string | null;
}

/** The error a refusal status stands for, or undefined for the statuses that carry a row. */
function refusal(r: Refusable | undefined, lease: LeaseRef, maxCalls: number | undefined): Error | undefined {
  switch (r?.status) {
    case undefined:
    case 'lease-lost':
      return new LeaseLost(lease.id);
    case 'cancel-requested':
      return new CancelRequested(lease.id);
    case 'call-limit':
      return new OperationLimitExceeded(
        'provider-calls',
        `operation ${lease.id} has made ${num(r.calls)} provider requests; its limit is ${maxCalls}`,
      );
    case 'budget-exhausted':
      return new BudgetExhausted(r.refused_by!, num(r.retry_after)!);
  }
  return undefined;
}

function throwIfRefused(r: Refusable | undefined, lease: LeaseRef, maxCalls: number | undefined): asserts r {
  const error = refusal(r, lease, maxCalls);
  if (error) throw error;
}

const BEGIN = `SELECT r.status, r.clock, r.refused_by, r.retry_after, r.calls, (r.eff).*
  FROM {s}.effect_begin($1::bigint, $2, $3, $4, $5, $6, $7, $8::bigint, $9::text[], $10::bigint[], $11::bigint[],
                        $12::bigint[], $13::boolean[], $14::integer) r`;

function beginValues(ctx: PgContext, p: EffectBeginParams): unknown[] {
  return [
    ctx.now(),
    p.lease.tenant,
    p.lease.id,
    p.lease.epoch,
    p.name,
    p.key,
    p.provider ?? null,
    p.cost === undefined || p.cost === null ? null : Math.round(p.cost),
    ...chargeArrays(p),
    p.maxCalls ?? null,
  ];
}

/** Steps 2 and 3 of the effect protocol; throws when refused (see the module header). */
export async function effectBegin(ctx: PgContext, p: EffectBeginParams): Promise<EffectBeginResult> {
  const { lease } = p;
  const [r] = await ctx.query<Refusable>(BEGIN, beginValues(ctx, p));
  throwIfRefused(r, lease, p.maxCalls);
  return { row: toEffectRow(r), created: r.status === 'created', now: num(r.clock)! };
}

const RECORD_SEND = `SELECT r.status, r.clock, r.refused_by, r.retry_after, r.calls, r.was, (r.eff).*
  FROM {s}.effect_record_send($1::bigint, $2, $3, $4, $5, $6::text[], $7::bigint[], $8::bigint[], $9::bigint[],
                              $10::boolean[], $11::integer) r`;

/** One more request under an existing key (`pending` or `absent`); throws when refused. */
export async function effectRecordSend(
  ctx: PgContext,
  p: { lease: LeaseRef; name: string; spend?: BudgetCharge[]; rates?: BudgetCharge[]; maxCalls?: number },
): Promise<{ row: EffectRow; now: number }> {
  const { lease, name } = p;
  const [r] = await ctx.query<Refusable & { was: string | null }>(RECORD_SEND, [
    ctx.now(),
    lease.tenant,
    lease.id,
    lease.epoch,
    name,
    ...chargeArrays(p),
    p.maxCalls ?? null,
  ]);
  throwIfRefused(r, lease, p.maxCalls);
  if (r.status === 'invalid')
    throw new InvalidStateTransition('send under', r.was ?? 'missing', `${lease.id}/${name}`);
  return { row: toEffectRow(r), now: num(r.clock)! };
}

const MARK = `SELECT {s}.effect_mark($1::bigint, $2, $3, $4, $5, $6, $7, $8, $9) AS ok`;

/**
 * Ends an effect's uncertainty: `absent` (from `pending`), `committed` with its result or
 * `failed` for good (from `pending` or `absent`). False when fenced out or in another state.
 */
export async function effectMark(
  ctx: PgContext,
  lease: LeaseRef,
  name: string,
  outcome:
    | { state: 'absent' }
    | { state: 'committed'; result: unknown; reference: string | null }
    | { state: 'failed'; error: ErrorRecord },
): Promise<boolean> {
  const [row] = await ctx.query<{ ok: boolean }>(MARK, [
    ctx.now(),
    lease.tenant,
    lease.id,
    lease.epoch,
    name,
    outcome.state,
    outcome.state === 'committed' ? jsonText(outcome.result) : null,
    outcome.state === 'committed' ? outcome.reference : null,
    outcome.state === 'failed' ? jsonText(outcome.error) : null,
  ]);
  return row?.ok === true;
}

// A created row comes back as the clock only (store/created-row.ts builds it from what was sent);
// an existing one as one JSON column.
const BEGIN_MANY = `SELECT r.ord, r.status, r.clock, r.refused_by, r.retry_after, r.calls, row_to_json(r.eff) AS eff
  FROM {s}.effect_begin_many($1::bigint, $2::jsonb) r ORDER BY r.ord`;

/** Several attempts' begins in one round trip and one commit; each answered alone. */
export async function effectBeginMany(
  ctx: PgContext,
  items: EffectBeginParams[],
): Promise<Array<Settled<EffectBeginResult>>> {
  if (items.length === 0) return [];
  if (items.length === 1) {
    // One item: the single-item function, which costs less than the set-based one (migration 4).
    const p = items[0]!;
    const [r] = await ctx.query<Refusable>(BEGIN, beginValues(ctx, p));
    const error = refusal(r, p.lease, p.maxCalls);
    if (error) return [{ ok: false, error }];
    return [
      { ok: true, value: { row: toEffectRow(r!), created: r!.status === 'created', now: num(r!.clock)! } },
    ];
  }
  const payload = items.map((p) => {
    const [bKey, bLimit, bWindow, bCost, bSpend] = chargeArrays(p);
    return {
      tenant: p.lease.tenant,
      id: p.lease.id,
      epoch: p.lease.epoch,
      name: p.name,
      key: p.key,
      provider: p.provider ?? null,
      cost: p.cost === undefined || p.cost === null ? null : Math.round(p.cost),
      bKey,
      bLimit,
      bWindow,
      bCost,
      bSpend,
      maxCalls: p.maxCalls ?? null,
    };
  });
  const rows = await ctx.query<Refusable & { ord: number; eff: PgRow | null }>(BEGIN_MANY, [
    ctx.now(),
    JSON.stringify(payload),
  ]);
  return items.map((p, i): Settled<EffectBeginResult> => {
    const r = rows.find((row) => Number(row.ord) === i + 1);
    const error = refusal(r, p.lease, p.maxCalls);
    if (error) return { ok: false, error };
    const now = num(r!.clock)!;
    // The item-by-item version (budgets, an operation named twice) returns created rows too.
    const row = r!.eff ? toEffectRow(r!.eff) : createdEffectRow(p, now);
    return { ok: true, value: { row, created: r!.status === 'created', now } };
  });
}

/** Marks as `effect_mark_many` reads them (also written with attempts' ends: finish.ts). */
export function markPayload(items: EffectMarkParams[]): string {
  return JSON.stringify(
    items.map((p) => ({
      tenant: p.lease.tenant,
      id: p.lease.id,
      epoch: p.lease.epoch,
      name: p.name,
      state: p.state,
      result: p.state === 'committed' ? jsonText(p.result) : null,
      reference: p.state === 'committed' ? p.reference : null,
      error: p.state === 'failed' ? jsonText(p.error) : null,
    })),
  );
}

const MARK_MANY = `SELECT r.ord, r.ok FROM {s}.effect_mark_many($1::bigint, $2::jsonb) r ORDER BY r.ord`;

/** Several attempts' marks in one round trip and one commit. */
export async function effectMarkMany(ctx: PgContext, items: EffectMarkParams[]): Promise<boolean[]> {
  if (items.length === 0) return [];
  if (items.length === 1) {
    const p = items[0]!;
    return [await effectMark(ctx, p.lease, p.name, p)];
  }
  const rows = await ctx.query<{ ord: number; ok: boolean }>(MARK_MANY, [ctx.now(), markPayload(items)]);
  return items.map((_p, i) => rows.find((row) => Number(row.ord) === i + 1)?.ok === true);
}
