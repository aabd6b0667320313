/**
 * @module test/conformance/fixtures
 * What the store conformance suite and the state-machine property share: the factory contract
 * a driver's test file fulfils, builders for submit parameters and leases, and the checks that
 * read a store's whole truth (true queue counts, error codes).
 */
import { expect } from 'vitest';
import { canonicalJson, digestOfCanonical } from '../../src/core/digest.js';
import { isSluiceError } from '../../src/core/errors/index.js';
import type { Store } from '../../src/store/store.js';
import type { LeaseRef, OperationRow, SubmitOutcome, SubmitParams } from '../../src/store/types.js';
import type { FakeClock } from '../../src/testing/fake-clock.js';

/** A fresh, migrated, empty store whose clock is `clock`; `cleanup` closes and removes it. */
export interface StoreFixture {
  store: Store;
  clock: FakeClock;
  cleanup(): Promise<void>;
}

/** Creates one fixture per test (SQLite: a temp file; PostgreSQL: a schema or database). */
export type StoreFactory = () => Promise<StoreFixture>;

/** A case a driver cannot pass, and why (Hono's shared router cases: every skip has a reason). */
export interface ConformanceSkip {
  reason: string;
  /** Full case names: `group > case`, as printed by the reporter under the suite's root. */
  tests: string[];
}

export const DEFAULT_INPUT = { invoice: 7, amount_cents: 5000 } as const;

/** Submit parameters with sensible defaults; the digest is derived from `kind` and `input`. */
export function submitParams(
  over: Partial<Omit<SubmitParams, 'digest' | 'inputJson'>> & { input?: unknown } = {},
): SubmitParams {
  const { input = DEFAULT_INPUT, ...rest } = over;
  const kind = rest.kind ?? 'charge';
  const inputJson = canonicalJson(input);
  return {
    tenant: 'North',
    id: 'op-1',
    class: 'default',
    maxAttempts: 5,
    deadlineMs: null,
    ...rest,
    kind,
    digest: digestOfCanonical(kind, inputJson),
    inputJson,
  };
}

/** Submits one operation and returns its row, failing unless it was created. */
export async function submitCreated(store: Store, over: Parameters<typeof submitParams>[0] = {}) {
  const [outcome] = await store.operationSubmitMany([submitParams(over)]);
  expect(outcome?.status).toBe('created');
  return (outcome as Extract<SubmitOutcome, { status: 'created' }>).row;
}

export function leaseOf(row: Pick<OperationRow, 'tenant' | 'id' | 'epoch'>): LeaseRef {
  return { tenant: row.tenant, id: row.id, epoch: row.epoch };
}

/**
 * A claim's epoch against the one before it: larger by 1 plus a random step below 2^31, so that
 * a claim whose commit is lost is not reissued under the same number.
 */
export function expectNextEpoch(next: number, previous: number): void {
  expect(next - previous, `epoch ${previous} → ${next}`).toBeGreaterThanOrEqual(1);
  expect(next - previous, `epoch ${previous} → ${next}`).toBeLessThanOrEqual(2 ** 31);
}

/** The code of the error `promise` rejects with; fails the test if it resolves. */
export async function rejectionCode(promise: Promise<unknown>): Promise<string> {
  const outcome = await promise.then(
    (value) => ({ resolved: true as const, value }),
    (error: unknown) => ({ resolved: false as const, error }),
  );
  if (outcome.resolved) throw new Error(`expected a rejection, got ${JSON.stringify(outcome.value)}`);
  if (!isSluiceError(outcome.error)) throw outcome.error;
  return outcome.error.code;
}

/** Every operation the store holds (all tenants), in insertion order. */
export async function allOperations(store: Store): Promise<OperationRow[]> {
  const rows: OperationRow[] = [];
  let after = 0;
  for (;;) {
    const page = await store.operationList({ after, limit: 500 });
    rows.push(...page);
    if (page.length < 500) return rows;
    after = page[page.length - 1]!.seq;
  }
}

/** `class|tenant` → the true numbers of queued and running operations. */
export function trueCounts(rows: OperationRow[]): Map<string, { waiting: number; running: number }> {
  const counts = new Map<string, { waiting: number; running: number }>();
  for (const row of rows) {
    if (row.state !== 'queued' && row.state !== 'running') continue;
    const key = `${row.class}|${row.tenant}`;
    const c = counts.get(key) ?? { waiting: 0, running: 0 };
    if (row.state === 'queued') c.waiting++;
    else c.running++;
    counts.set(key, c);
  }
  return counts;
}

/**
 * The admission counters (`queueStats`) equal the true counts of queued and running operations,
 * for every (class, tenant): a counter row may exist with zeros, never with a wrong number.
 */
export async function expectCountersTrue(store: Store, rows?: OperationRow[]): Promise<void> {
  const truth = trueCounts(rows ?? (await allOperations(store)));
  const stats = await store.queueStats();
  const seen = new Set<string>();
  for (const s of stats) {
    const key = `${s.class}|${s.tenant}`;
    expect(seen.has(key), `queueStats lists ${key} twice`).toBe(false);
    seen.add(key);
    expect({ key, waiting: s.waiting, running: s.running }).toEqual({
      key,
      ...(truth.get(key) ?? { waiting: 0, running: 0 }),
    });
  }
  for (const key of truth.keys()) expect(seen.has(key), `queueStats has no row for ${key}`).toBe(true);
  // The class totals (the global queue bound) equal the sum of their tenants' waiting.
  const byClass = new Map<string, number>();
  for (const [key, c] of truth)
    byClass.set(key.split('|')[0]!, (byClass.get(key.split('|')[0]!) ?? 0) + c.waiting);
  for (const c of await store.classStats()) {
    expect({ class: c.class, waiting: c.waiting }).toEqual({
      class: c.class,
      waiting: byClass.get(c.class) ?? 0,
    });
    byClass.delete(c.class);
  }
  for (const [cls, waiting] of byClass)
    expect({ class: cls, waiting }, 'classStats has no row').toEqual({ class: cls, waiting: 0 });
}

export const LEASE_MS = 30_000;
export const RESCUE = { maxLeaseExpiries: 3, limit: 100 } as const;

/** Claims from `class` (default `default`) and returns the rows. */
export async function claim(
  store: Store,
  p: { class?: string; owner?: string; limit?: number; leaseMs?: number } = {},
): Promise<OperationRow[]> {
  const result = await store.operationClaimMany({
    class: p.class ?? 'default',
    owner: p.owner ?? 'w1',
    limit: p.limit ?? 1,
    leaseMs: p.leaseMs ?? LEASE_MS,
  });
  return result.rows;
}

/** Claims exactly one operation, failing otherwise. */
export async function claimOne(store: Store, p: Parameters<typeof claim>[1] = {}): Promise<OperationRow> {
  const rows = await claim(store, { ...p, limit: 1 });
  expect(rows).toHaveLength(1);
  return rows[0]!;
}

/** Passes the lease of every running operation and runs the rescuer. */
export async function expireAndRescue(
  fx: StoreFixture,
  params: { maxLeaseExpiries?: number; leaseMs?: number } = {},
) {
  fx.clock.advance((params.leaseMs ?? LEASE_MS) + 1);
  return fx.store.leaseRescue({
    ...RESCUE,
    maxLeaseExpiries: params.maxLeaseExpiries ?? RESCUE.maxLeaseExpiries,
  });
}

export async function getRow(store: Store, ref: { tenant: string; id: string }): Promise<OperationRow> {
  const row = await store.operationGet({ tenant: ref.tenant, id: ref.id });
  if (!row) throw new Error(`operation ${ref.tenant}/${ref.id} is missing`);
  return row;
}

export const BOOM = { code: 'boom', message: 'the handler failed' } as const;
