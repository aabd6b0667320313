/**
 * Budget rows on PostgreSQL are locked in one order, (key, window_start), across a whole batch of
 * the journal's calls: two batches whose items draw on (or settle) the same budgets in opposite
 * orders queue on the first row instead of deadlocking (migration 24).
 *
 * Each case makes the opposite orders meet for certain, whatever the timing: two other
 * transactions hold the two budget rows while the batches start and let go one after the other,
 * each once the batches wait where they must (see `meet`). Locking item by item, each batch then
 * held the row of its first item and waited for the other's: the server broke the cycle after
 * `deadlock_timeout` and the store ran the loser again, so every call still succeeded. The cases
 * count the deadlocks the server reports for this file's database (each store has one
 * connection, whose statistics are flushed before they are read).
 *
 * The purge deletes old budget windows without ever waiting for one, so it cannot close a cycle
 * with a transaction settling in them either.
 */
import type pg from 'pg';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PostgresStore } from '../../src/store/postgres/index.js';
import type { EffectBeginParams, EffectMarkParams, LeaseRef, OperationRow } from '../../src/store/types.js';
import { FakeClock } from '../../src/testing/fake-clock.js';
import { claim, leaseOf, submitParams } from '../conformance/fixtures.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();

const spendKey = (tenant: string) => `spend:p:tenant:${tenant}`;

/** An effect of `lease` drawing 1 on its tenant's spend budget. */
function begin(lease: LeaseRef, name = 'charge'): EffectBeginParams {
  return {
    lease,
    name,
    key: `k-${lease.id}-${name}`,
    spend: [{ key: spendKey(lease.tenant), limit: 1_000_000, windowMs: 3_600_000, cost: 1 }],
  };
}

function committed(lease: LeaseRef, name = 'charge'): EffectMarkParams {
  return { lease, name, state: 'committed', result: { id: `ch-${lease.id}` }, reference: null };
}

let watch: pg.Client;
/** The other transactions: one holds the N budget row, the other the S row. */
let holdsN: pg.Client;
let holdsS: pg.Client;
beforeEach(async () => {
  [watch, holdsN, holdsS] = await Promise.all([db.client(), db.client(), db.client()]);
});
afterEach(async () => {
  await Promise.all([watch, holdsN, holdsS].map((c) => c.end()));
});

/** Two stores (two processes) on one schema, one connection each, with operations claimed. */
async function processes(ids: Record<string, 'N' | 'S'>) {
  const schema = db.freshSchema();
  const clock = new FakeClock();
  const a = db.store({ schema, clock, poolSize: 1 });
  const b = db.store({ schema, clock, poolSize: 1 });
  await a.migrate();
  await a.operationSubmitMany(Object.entries(ids).map(([id, tenant]) => submitParams({ tenant, id })));
  const rows = await claim(a, { limit: Object.keys(ids).length, leaseMs: 600_000 });
  const lease = new Map(rows.map((r: OperationRow) => [r.id, leaseOf(r)]));
  return { schema, clock, a, b, lease: (id: string) => lease.get(id)! };
}

const pidOf = async (c: pg.Pool | pg.Client) =>
  Number((await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);

/** Deadlocks the server has reported for this database, the stores' counts flushed first. */
async function deadlocks(stores: PostgresStore[]): Promise<number> {
  for (const s of stores) await s.context.pool.query('SELECT pg_stat_force_next_flush()');
  const { rows } = await watch.query(
    'SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()',
  );
  return Number(rows[0].deadlocks);
}

/**
 * Runs batch `a` (its first item on the S budget, then N) and batch `b` (N, then S) while the
 * other transactions hold both rows. Once both batches wait, the S row is let go; once neither
 * waits for it any more, the N row too. Locking item by item, `a` then holds S and has queued
 * behind `b` for N, so `b` takes N and waits for `a`'s S: a cycle. Locking in (key, window_start)
 * order, both wait for N from the start and take N, then S, one after the other. Resolves to what
 * the calls returned.
 */
async function meet<A, B>(
  schema: string,
  stores: [PostgresStore, PostgresStore],
  calls: () => [Promise<A>, Promise<B>],
): Promise<[A, B]> {
  const pids = await Promise.all(stores.map((s) => pidOf(s.context.pool)));
  const sPid = await pidOf(holdsS);
  const held: pg.Client[] = [];
  for (const [gate, key] of [
    [holdsN, spendKey('N')],
    [holdsS, spendKey('S')],
  ] as const) {
    await gate.query('BEGIN');
    held.push(gate);
    const rows = await gate.query(`SELECT 1 FROM "${schema}".budgets WHERE key = $1 FOR UPDATE`, [key]);
    expect(rows.rowCount).toBe(1);
  }
  let settled = false;
  const both = Promise.all(calls()).finally(() => {
    settled = true;
  });
  /** Until both calls wait for a lock, neither for the S row's holder once it let go (or one ended). */
  const waiting = async (but?: number) => {
    for (;;) {
      const { rows } = await watch.query<{ by: number[] }>(
        'SELECT pg_blocking_pids(p) AS by FROM unnest($1::integer[]) AS p',
        [pids],
      );
      if (settled || rows.every((r) => r.by.length > 0 && !r.by.includes(but ?? -1))) return;
    }
  };
  const letGo = (gate: pg.Client) => {
    held.splice(held.indexOf(gate), 1);
    return gate.query('COMMIT');
  };
  try {
    await waiting();
    await letGo(holdsS);
    await waiting(sPid);
    await letGo(holdsN);
  } finally {
    for (const gate of [...held]) await letGo(gate);
  }
  return both;
}

async function spend(store: PostgresStore): Promise<Array<[string, number, number]>> {
  const usage = await store.budgetUsage({ prefix: 'spend:', since: 0 });
  return usage.map((u) => [u.key, u.reserved, u.committed]);
}

describe('pg: budget rows locked in (key, window_start) order across a batch', () => {
  it('begins of two batches drawing on the same budgets in opposite orders', async () => {
    const { schema, a, b, lease } = await processes({ w1: 'N', w2: 'S', a1: 'S', a2: 'N', b1: 'N', b2: 'S' });
    // The budget rows of the window exist (the gate locks them).
    await a.effectBeginMany([begin(lease('w1')), begin(lease('w2'))]);
    const before = await deadlocks([a, b]);
    const [x, y] = await meet(schema, [a, b], () => [
      a.effectBeginMany([begin(lease('a1')), begin(lease('a2'))]),
      b.effectBeginMany([begin(lease('b1')), begin(lease('b2'))]),
    ]);
    expect([...x, ...y].map((r) => r.ok)).toEqual([true, true, true, true]);
    expect(await deadlocks([a, b]), 'deadlocks the server reported').toBe(before);
    expect(await spend(a)).toEqual([
      [spendKey('N'), 3, 0],
      [spendKey('S'), 3, 0],
    ]);
  });

  describe('marks of two batches settling the same budgets in opposite orders', () => {
    async function begun() {
      const p = await processes({ a1: 'S', a2: 'N', b1: 'N', b2: 'S' });
      const begins = await p.a.effectBeginMany(['a1', 'a2', 'b1', 'b2'].map((id) => begin(p.lease(id))));
      expect(begins.map((r) => r.ok)).toEqual([true, true, true, true]);
      return p;
    }

    it('as marks', async () => {
      const { schema, a, b, lease } = await begun();
      const before = await deadlocks([a, b]);
      const [x, y] = await meet(schema, [a, b], () => [
        a.effectMarkMany([committed(lease('a1')), committed(lease('a2'))]),
        b.effectMarkMany([committed(lease('b1')), committed(lease('b2'))]),
      ]);
      expect([...x, ...y]).toEqual([true, true, true, true]);
      expect(await deadlocks([a, b]), 'deadlocks the server reported').toBe(before);
      expect(await spend(a)).toEqual([
        [spendKey('N'), 0, 2],
        [spendKey('S'), 0, 2],
      ]);
    });

    it('as marks carried by attempts’ ends', async () => {
      const { schema, a, b, lease } = await begun();
      const end = (id: string) => ({
        lease: lease(id),
        outcome: 'succeeded' as const,
        result: { ok: true },
        marks: [committed(lease(id))],
      });
      const before = await deadlocks([a, b]);
      const [x, y] = await meet(schema, [a, b], () => [
        a.attemptFinishMany([end('a1'), end('a2')]),
        b.attemptFinishMany([end('b1'), end('b2')]),
      ]);
      expect([...x, ...y]).toEqual([true, true, true, true]);
      expect(await deadlocks([a, b]), 'deadlocks the server reported').toBe(before);
      expect(await spend(a)).toEqual([
        [spendKey('N'), 0, 2],
        [spendKey('S'), 0, 2],
      ]);
    });

    it('as marks one of which names its effect twice (item by item)', async () => {
      const { schema, a, b, lease } = await begun();
      const before = await deadlocks([a, b]);
      const [x, y] = await meet(schema, [a, b], () => [
        a.effectMarkMany([committed(lease('a1')), committed(lease('a2')), committed(lease('a2'))]),
        b.effectMarkMany([committed(lease('b1')), committed(lease('b2')), committed(lease('b2'))]),
      ]);
      // The second mark of an effect finds it committed already.
      expect([...x, ...y]).toEqual([true, true, false, true, true, false]);
      expect(await deadlocks([a, b]), 'deadlocks the server reported').toBe(before);
      expect(await spend(a)).toEqual([
        [spendKey('N'), 0, 2],
        [spendKey('S'), 0, 2],
      ]);
    });
  });
});

describe('pg: the purge and budget rows', () => {
  it('leaves an old window another transaction holds for its next pass, never waiting for it', async () => {
    const { schema, a, lease, clock } = await processes({ a1: 'N', a2: 'S' });
    await a.effectBeginMany([begin(lease('a1')), begin(lease('a2'))]);
    // Both windows ended more than a day ago.
    clock.advance(3_600_000 + 86_400_000 + 1);
    const pid = await pidOf(a.context.pool);
    await holdsN.query('BEGIN');
    await holdsN.query(`SELECT 1 FROM "${schema}".budgets WHERE key = $1 FOR UPDATE`, [spendKey('N')]);
    const purge = () => a.retentionPurge({ retentionMs: 86_400_000, tombstoneMs: 86_400_000, limit: 10 });
    let settled = false;
    const first = purge().finally(() => {
      settled = true;
    });
    let waited = false;
    try {
      while (!settled && !waited) {
        const { rows } = await watch.query<{ by: number[] }>('SELECT pg_blocking_pids($1) AS by', [pid]);
        waited = rows[0]!.by.length > 0;
      }
    } finally {
      await holdsN.query('COMMIT');
    }
    await first;
    expect(waited, 'the purge waited for a budget row').toBe(false);
    expect(await spend(a)).toEqual([[spendKey('N'), 1, 0]]);
    await purge();
    expect(await spend(a)).toEqual([]);
  });
});
