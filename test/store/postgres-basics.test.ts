/**
 * The PostgreSQL driver end to end, on what the conformance suite cannot show with one store:
 * several stores (separate pools, as separate processes would have) racing on one schema.
 * Migrations applied concurrently, duplicate and capped submits racing, claimers racing under
 * `SKIP LOCKED` and `max_running`, rescuers racing, transactional submit, LISTEN/NOTIFY, and
 * errors classified when the server goes away. Concurrency is awaited, never slept on.
 */

import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { canonicalJson, digestOfCanonical } from '../../src/core/digest.js';
import { isSluiceError } from '../../src/core/errors/index.js';
import { claimMany, claimResultOf } from '../../src/store/postgres/claim.js';
import { finishAndClaim } from '../../src/store/postgres/finish-claim.js';
import { classifyPgError, type PostgresStore, postgresStore } from '../../src/store/postgres/index.js';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import type { Store } from '../../src/store/store.js';
import type {
  BudgetCharge,
  ClaimParams,
  OperationRow,
  SubmitOutcome,
  SubmitParams,
} from '../../src/store/types.js';
import { FakeClock } from '../../src/testing/fake-clock.js';
import { freePort, indexPagesRead, rowsRead, usePostgres, withoutAutovacuum } from '../helpers/postgres.js';
import { tcpRelay } from '../helpers/tcp-relay.js';

const db = usePostgres();

function item(over: Partial<SubmitParams> & { input?: unknown } = {}): SubmitParams {
  const { input = { n: 1 }, ...rest } = over;
  const inputJson = canonicalJson(input);
  const kind = rest.kind ?? 'charge';
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

/** Stores on one migrated schema, each with its own pool: stand-ins for separate processes. */
async function processes(
  n: number,
  options: { clock?: FakeClock; poolSize?: number } = {},
): Promise<PostgresStore[]> {
  const schema = db.freshSchema();
  const stores = Array.from({ length: n }, () => db.store({ schema, poolSize: 3, ...options }));
  await stores[0]!.migrate();
  return stores;
}

/** A table's primary-key columns, in key order. */
async function primaryKeyOf(client: pg.ClientBase, table: string): Promise<string[]> {
  const key = await client.query<{ attname: string }>(
    `SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
      WHERE i.indrelid = $1::regclass AND i.indisprimary ORDER BY array_position(i.indkey::int2[], a.attnum)`,
    [table],
  );
  return key.rows.map((r) => r.attname);
}

async function codeOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    if (isSluiceError(error)) return error.code;
    throw error;
  }
  throw new Error('expected a rejection');
}

describe('migrations', () => {
  it('apply once when several processes migrate at once, and again is a no-op', async () => {
    const schema = db.freshSchema();
    const stores = Array.from({ length: 4 }, () => db.store({ schema, poolSize: 1 }));
    await Promise.all(stores.map((s) => s.migrate()));
    await stores[0]!.migrate();
    const client = await db.client();
    try {
      const { rows } = await client.query(
        `SELECT version, name FROM "${schema}".migrations ORDER BY version`,
      );
      expect(rows).toEqual([
        { version: 1, name: 'init' },
        { version: 2, name: 'admission' },
        { version: 3, name: 'journal_batch' },
        { version: 4, name: 'set_based' },
        { version: 5, name: 'claim_shares' },
        { version: 6, name: 'plans' },
        { version: 7, name: 'claim_contended' },
        { version: 8, name: 'fair_order_single' },
        { version: 9, name: 'submit_one_counted' },
        { version: 10, name: 'finish_locked_read' },
        { version: 11, name: 'journal_locked_read' },
        { version: 12, name: 'claim_lone' },
        { version: 13, name: 'tenant_settled' },
        { version: 14, name: 'class_entered' },
        { version: 15, name: 'claim_epoch_random' },
        { version: 16, name: 'attempts_by_seq' },
        { version: 17, name: 'attempts_by_seq_pg' },
        { version: 18, name: 'submit_batch_linear' },
        { version: 19, name: 'effects_by_seq' },
        { version: 20, name: 'effects_by_seq_pg' },
        { version: 21, name: 'claim_virtual_clock' },
        { version: 22, name: 'submit_one_refusal_rereads' },
        { version: 23, name: 'attempt_rows_own_error' },
        { version: 24, name: 'budget_lock_order' },
        { version: 25, name: 'seq_after_purge' },
        { version: 26, name: 'budget_windows_by_end' },
        { version: 27, name: 'secrets' },
        { version: 28, name: 'forget_departed_tenants' },
        { version: 29, name: 'budget_windows_by_tenant' },
        { version: 30, name: 'retry_budget_exact_bound' },
        { version: 31, name: 'class_deltas' },
        { version: 32, name: 'refusals_write_nothing' },
        { version: 33, name: 'finish_reads_journal_after_lock' },
        { version: 34, name: 'claim_last_chance' },
        { version: 35, name: 'attention_across_tenants' },
      ]);
      const fns = await client.query(
        `SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = $1 ORDER BY 1`,
        [schema],
      );
      expect(fns.rows.map((r) => r.proname)).toContain('claim');
      // Migration 6's plan settings on every function that runs statements; a later
      // CREATE OR REPLACE that forgot to state them again would drop them.
      const unplanned = await client.query(
        `SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
          WHERE n.nspname = $1 AND p.proname NOT IN ('now_ms', 'fair_order', 'vtime_after', 'wakeup_channel')
            AND NOT (coalesce(p.proconfig, '{}') @> ARRAY['plan_cache_mode=force_generic_plan',
                                                            'enable_seqscan=off', 'enable_bitmapscan=off'])
          ORDER BY 1`,
        [schema],
      );
      expect(unplanned.rows).toEqual([]);
      // Nothing leaked into the caller's search_path or the public schema.
      const leaked = await client.query(`SELECT to_regclass('public.operations') AS t`);
      expect(leaked.rows[0].t).toBeNull();
    } finally {
      await client.end();
    }
  });

  it("keeps an operation's attempts by its seq, carrying those of a schema from before version 17", async () => {
    const schema = db.freshSchema();
    const store = db.store({ schema });
    await store.migrate();
    // Two operations whose ids sort against their order; one retried, then ended.
    await store.operationSubmitMany([item({ id: 'zz' }), item({ id: 'aa' })]);
    const claimOf = async () =>
      (await store.operationClaimMany({ class: 'default', owner: 'w', limit: 2, leaseMs: 30_000 })).rows;
    const lease = (r: OperationRow) => ({ tenant: r.tenant, id: r.id, epoch: r.epoch });
    const [zz, aa] = await claimOf();
    const error = { code: 'boom', message: 'boom' };
    await store.attemptFinishMany([
      { lease: lease(zz!), outcome: 'retry', error, delayMs: 0 },
      { lease: lease(aa!), outcome: 'dead', error },
    ]);
    const [again] = await claimOf();
    await store.attemptFinishMany([{ lease: lease(again!), outcome: 'succeeded', result: 7 }]);
    const list = () => Promise.all(['zz', 'aa'].map((id) => store.attemptList({ tenant: 'North', id })));
    const before = await list();
    expect(before.map((as) => as.map((a) => [a.id, a.attempt, a.outcome]))).toEqual([
      [
        ['zz', 1, 'retry'],
        ['zz', 2, 'succeeded'],
      ],
      [['aa', 1, 'dead']],
    ]);
    const client = await db.client();
    try {
      const s = `"${schema}"`;
      // The table as version 16 left it: keyed by (tenant, op_id, epoch).
      await client.query(`BEGIN;
        ALTER TABLE ${s}.attempts ADD COLUMN tenant text COLLATE "C", ADD COLUMN op_id text COLLATE "C";
        UPDATE ${s}.attempts a SET tenant = o.tenant, op_id = o.id FROM ${s}.operations o WHERE o.seq = a.op_seq;
        ALTER TABLE ${s}.attempts DROP CONSTRAINT attempts_pkey, DROP COLUMN op_seq;
        ALTER TABLE ${s}.attempts ADD PRIMARY KEY (tenant, op_id, epoch);
        DELETE FROM ${s}.migrations WHERE version = 17;
        COMMIT;`);
      await store.migrate();
      expect(await primaryKeyOf(client, `${s}.attempts`)).toEqual(['op_seq', 'epoch']);
    } finally {
      await client.end();
    }
    expect(await list()).toEqual(before);
  });

  it("finds an operation's effects by its seq, carrying those of a schema from before version 20", async () => {
    const schema = db.freshSchema();
    const store = db.store({ schema });
    await store.migrate();
    // Two running operations whose ids sort against their order: zz with a committed effect and a
    // pending one, aa with one whose request was refused (absent).
    await store.operationSubmitMany([item({ id: 'zz' }), item({ id: 'aa' })]);
    const [zz, aa] = (
      await store.operationClaimMany({ class: 'default', owner: 'w', limit: 2, leaseMs: 30_000 })
    ).rows;
    const lease = (r: OperationRow) => ({ tenant: r.tenant, id: r.id, epoch: r.epoch });
    const begun = await store.effectBeginMany([
      { lease: lease(zz!), name: 'charge', key: 'k-zz-charge' },
      { lease: lease(aa!), name: 'charge', key: 'k-aa-charge' },
      { lease: lease(zz!), name: 'receipt', key: 'k-zz-receipt' },
    ]);
    expect(begun.map((b) => b.ok && b.value.created)).toEqual([true, true, true]);
    expect(
      await store.effectMarkMany([
        { lease: lease(zz!), name: 'charge', state: 'committed', result: { id: 'ch_1' }, reference: 'ch_1' },
        { lease: lease(aa!), name: 'charge', state: 'absent' },
      ]),
    ).toEqual([true, true]);
    const list = () => Promise.all(['zz', 'aa'].map((id) => store.effectList({ tenant: 'North', id })));
    const before = await list();
    expect(before.map((es) => es.map((e) => [e.id, e.name, e.state]))).toEqual([
      [
        ['zz', 'charge', 'committed'],
        ['zz', 'receipt', 'pending'],
      ],
      [['aa', 'charge', 'absent']],
    ]);
    const client = await db.client();
    try {
      const s = `"${schema}"`;
      // The table as version 19 left it: keyed by (tenant, op_id, name), no op_seq.
      await client.query(`BEGIN;
        ALTER TABLE ${s}.effects DROP CONSTRAINT effects_pkey, DROP COLUMN op_seq;
        ALTER TABLE ${s}.effects ADD PRIMARY KEY (tenant, op_id, name);
        DELETE FROM ${s}.migrations WHERE version = 20;
        COMMIT;`);
      await store.migrate();
      expect(await primaryKeyOf(client, `${s}.effects`)).toEqual(['op_seq', 'name']);
    } finally {
      await client.end();
    }
    expect(await list()).toEqual(before);
    // The journal finds the carried rows by the new key: a begin of an existing effect, a send
    // from absent, a mark of the pending one.
    expect(
      (await store.effectBegin({ lease: lease(zz!), name: 'receipt', key: 'k-zz-receipt' })).created,
    ).toBe(false);
    expect((await store.effectRecordSend({ lease: lease(aa!), name: 'charge' })).row).toMatchObject({
      id: 'aa',
      state: 'pending',
      sends: 2,
    });
    expect(
      await store.effectMarkMany([
        { lease: lease(zz!), name: 'receipt', state: 'committed', result: 1, reference: null },
        { lease: lease(aa!), name: 'charge', state: 'committed', result: 2, reference: null },
      ]),
    ).toEqual([true, true]);
  });

  it('refuses a schema name that is not a plain identifier', () => {
    expect(() => postgresStore({ connectionString: db.url, schema: 'x"; DROP TABLE y; --' })).toThrow(
      /plain identifier/,
    );
  });
});

describe('submit', () => {
  it('answers created, existing and conflict, also inside one batch', async () => {
    const [store] = await processes(1);
    const out = await store!.operationSubmitMany([
      item(),
      item(),
      item({ input: { n: 2 } }),
      item({ id: 'op-2' }),
    ]);
    expect(out.map((o) => o.status)).toEqual(['created', 'existing', 'conflict', 'created']);
    expect(await store!.queueStats()).toEqual([
      { class: 'default', tenant: 'North', waiting: 2, running: 0 },
    ]);
  });

  it('resolves concurrent duplicates from several processes to one operation, never an error', async () => {
    const stores = await processes(3);
    const outcomes = (
      await Promise.all(
        Array.from({ length: 24 }, (_, i) =>
          stores[i % 3]!.operationSubmitMany([item({ input: i % 4 === 3 ? { n: 9 } : { n: 1 } })]),
        ),
      )
    ).flat();
    const counts = outcomes.reduce<Record<string, number>>((m, o) => {
      m[o.status] = (m[o.status] ?? 0) + 1;
      return m;
    }, {});
    expect(counts.created).toBe(1);
    expect((counts.existing ?? 0) + (counts.conflict ?? 0)).toBe(23);
    expect(await stores[0]!.queueStats()).toEqual([
      { class: 'default', tenant: 'North', waiting: 1, running: 0 },
    ]);
  });

  it('resolves batches racing on the same ids to one operation each, the rest answered in place', async () => {
    // Batches that send no limits lock no queue row before their INSERT, so each one's lookups
    // run before the others commit, and the INSERT then finds some of its ids taken: those items
    // must answer from the committed rows, in their places in the batch.
    const stores = await processes(3, { poolSize: 2 });
    await Promise.all(stores.flatMap((st) => [st.queueStats(), st.queueStats()]));
    const outcomes: Array<{ id: string; status: string }> = [];
    for (let round = 0; round < 8; round++) {
      const batches = Array.from({ length: 6 }, (_, b) =>
        Array.from({ length: 20 }, (_, i) => {
          const id = `r${round}-${(i + 5 * b) % 30}`;
          return item({ id, input: { n: b % 3 === 2 ? 9 : 1 } });
        }),
      );
      const answers = await Promise.all(batches.map((items, b) => stores[b % 3]!.operationSubmitMany(items)));
      answers.forEach((answer, b) => {
        expect(answer).toHaveLength(20);
        answer.forEach((o, i) => {
          const sent = batches[b]![i]!;
          const row =
            o.status === 'created' || o.status === 'existing' || o.status === 'conflict' ? o.row : undefined;
          expect(row?.id).toBe(sent.id);
          // Conflict: the committed input is not the one sent; existing and created: it is.
          if (o.status === 'conflict') expect(row!.digest).not.toBe(sent.digest);
          else expect(row?.digest).toBe(sent.digest);
          outcomes.push({ id: sent.id, status: o.status });
        });
      });
    }
    const created = outcomes.filter((o) => o.status === 'created').map((o) => o.id);
    const ids = new Set(outcomes.map((o) => o.id));
    expect(created.sort()).toEqual([...ids].sort());
    expect(await stores[0]!.queueStats()).toEqual([
      { class: 'default', tenant: 'North', waiting: ids.size, running: 0 },
    ]);
  });

  it('never overshoots maxWaiting under concurrent submits from several processes', async () => {
    const stores = await processes(3);
    const limits = { maxWaiting: 4 };
    const outcomes = (
      await Promise.all(
        Array.from({ length: 21 }, (_, i) =>
          stores[i % 3]!.operationSubmitMany([item({ id: `op-${i}`, limits })]),
        ),
      )
    ).flat();
    expect(outcomes.filter((o) => o.status === 'created')).toHaveLength(4);
    expect(outcomes.filter((o) => o.status === 'rejected')).toHaveLength(17);
    expect(await stores[0]!.queueStats()).toEqual([
      { class: 'default', tenant: 'North', waiting: 4, running: 0 },
    ]);
  });

  it('runs inside the caller’s transaction: rolled back, nothing; committed, the operation', async () => {
    const [store] = await processes(1);
    const client = await store!.context.pool.connect();
    try {
      await client.query('BEGIN');
      const [inside] = await store!.operationSubmitMany([item({ id: 'tx-1' })], { client });
      expect(inside?.status).toBe('created');
      await client.query('ROLLBACK');
      expect(await store!.operationGet({ tenant: 'North', id: 'tx-1' })).toBeUndefined();
      expect(await store!.queueStats()).toEqual([]);

      await client.query('BEGIN');
      await store!.operationSubmitMany([item({ id: 'tx-2' })], { client });
      expect(await store!.operationGet({ tenant: 'North', id: 'tx-2' })).toBeUndefined();
      await client.query('COMMIT');
      expect((await store!.operationGet({ tenant: 'North', id: 'tx-2' }))?.state).toBe('queued');
    } finally {
      client.release();
    }
  });
});

describe('claim', () => {
  it('serves tenants fairly, exactly as the SQLite store does', async () => {
    const scenario = async (store: Store) => {
      const items: SubmitParams[] = [];
      for (let i = 0; i < 8; i++) items.push(item({ tenant: 'Big', id: `b${i}` }));
      for (let i = 0; i < 2; i++) items.push(item({ tenant: 'Small', id: `s${i}` }));
      for (let i = 0; i < 4; i++) items.push(item({ tenant: 'Heavy', id: `h${i}`, limits: { weight: 2 } }));
      for (let i = 0; i < 4; i++)
        items.push(item({ tenant: 'Capped', id: `c${i}`, limits: { maxRunning: 1 } }));
      await store.operationSubmitMany(items);
      const order: string[][] = [];
      for (let round = 0; round < 5; round++) {
        const { rows } = await store.operationClaimMany({
          class: 'default',
          owner: 'w',
          limit: 3,
          leaseMs: 1000,
        });
        order.push(rows.map((r) => r.id));
      }
      return { order, stats: await store.queueStats() };
    };
    const clock = new FakeClock();
    const [pg] = await processes(1, { clock });
    const lite = sqliteStore({ path: ':memory:', clock });
    await lite.migrate();
    try {
      const expected = await scenario(lite);
      expect(await scenario(pg!)).toEqual(expected);
      expect(expected.order[0]).toEqual(['b0', 'c0', 'h0']);
    } finally {
      await lite.close();
    }
  });

  it('never strands what a submit commits while a claim runs', async () => {
    // A claim sets the tenant's ready_at to the earliest run_after it sees queued; one that read
    // with a snapshot older than the queue row it locked missed what a submit committed between
    // the two, set ready_at past it (NULL once it had drained the rest), and nothing ever claimed
    // those operations. Four submitters of small batches against a claimer that keeps the queue
    // near empty (the brief pauses shape the load, they synchronise nothing): a claim that did it
    // all in one statement left 43–62 of the 2,400 queued, in each of three runs.
    const [submitting, claiming] = await processes(2);
    const PER_SUBMITTER = 600;
    let next = 0;
    let running = 4;
    const submitter = async () => {
      for (let sent = 0; sent < PER_SUBMITTER; ) {
        const n = Math.min(PER_SUBMITTER - sent, 1 + Math.floor(Math.random() * 4));
        const out = await submitting!.operationSubmitMany(
          Array.from({ length: n }, () => item({ tenant: 'North', id: `r${next++}` })),
        );
        expect(out.every((o) => o.status === 'created')).toBe(true);
        sent += n;
        await new Promise((r) => setTimeout(r, Math.random() * 3));
      }
      running--;
    };
    let claimed = 0;
    const claimRound = async () => {
      const { rows } = await claiming!.operationClaimMany({
        class: 'default',
        owner: 'w',
        limit: 32,
        leaseMs: 60_000,
      });
      if (rows.length > 0)
        await claiming!.attemptFinishMany(
          rows.map((r) => ({
            lease: { tenant: r.tenant, id: r.id, epoch: r.epoch },
            outcome: 'succeeded' as const,
            result: 1,
          })),
        );
      claimed += rows.length;
      return rows.length;
    };
    const claimer = async () => {
      while (running > 0) await claimRound();
      // The submitters are done: whatever is still queued must be claimable now.
      while ((await claimRound()) > 0);
    };
    await Promise.all([submitter(), submitter(), submitter(), submitter(), claimer()]);
    expect(claimed).toBe(4 * PER_SUBMITTER);
    expect((await claiming!.queueStats()).map((q) => [q.waiting, q.running])).toEqual([[0, 0]]);
  });

  it('skips a tenant whose queue row another transaction holds, without waiting for it', async () => {
    const [store] = await processes(1);
    await store!.operationSubmitMany([
      item({ tenant: 'A', id: 'a1' }),
      item({ tenant: 'B', id: 'b1' }),
      item({ tenant: 'B', id: 'b2' }),
    ]);
    const holder = await db.client();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM ${store!.context.quoted}.queues WHERE tenant = 'A' FOR UPDATE`);
      await holder.query(
        `SELECT 1 FROM ${store!.context.quoted}.operations WHERE tenant = 'B' AND id = 'b1' FOR UPDATE`,
      );
      // Would hang (and time out) if the claim waited on either lock.
      const { rows } = await store!.operationClaimMany({
        class: 'default',
        owner: 'w',
        limit: 5,
        leaseMs: 1000,
      });
      expect(rows.map((r) => r.id)).toEqual(['b2']);
      await holder.query('ROLLBACK');
      const again = await store!.operationClaimMany({
        class: 'default',
        owner: 'w',
        limit: 5,
        leaseMs: 1000,
      });
      expect(again.rows.map((r) => r.id).sort()).toEqual(['a1', 'b1']);
    } finally {
      await holder.end();
    }
  });

  it('says it may have left work behind when another transaction held a tenant', async () => {
    const [store] = await processes(1);
    await store!.operationSubmitMany([item({ id: 'a' })]);
    const claim = () =>
      store!.operationClaimMany({ class: 'default', owner: 'w', limit: 4, leaseMs: 60_000 });
    const holder = await db.client();
    try {
      // North's queue row held until commit, as a submit or a finish of North's holds it.
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM "${store!.context.schema}".queues WHERE tenant = 'North' FOR UPDATE`);
      const held = await claim();
      expect(held.rows).toEqual([]);
      expect(held.contended).toBe(true);
      await holder.query('COMMIT');
      const free = await claim();
      expect(free.rows.map((r) => r.id)).toEqual(['a']);
      expect(free.contended).toBe(false);
      expect((await claim()).contended).toBe(false);
    } finally {
      await holder.end();
    }
  });

  it('never gives one operation to two concurrent claimers', async () => {
    const stores = await processes(2);
    const items: SubmitParams[] = [];
    for (let t = 0; t < 5; t++)
      for (let i = 0; i < 40; i++) items.push(item({ tenant: `T${t}`, id: `o${i}` }));
    await stores[0]!.operationSubmitMany(items);
    const claimed: OperationRow[] = [];
    const claimer = async (store: PostgresStore, owner: string) => {
      for (let i = 0; i < 500 && claimed.length < items.length; i++) {
        const { rows } = await store.operationClaimMany({
          class: 'default',
          owner,
          limit: 7,
          leaseMs: 60_000,
        });
        claimed.push(...rows);
      }
    };
    await Promise.all([claimer(stores[0]!, 'w1'), claimer(stores[1]!, 'w2'), claimer(stores[1]!, 'w3')]);
    expect(claimed).toHaveLength(items.length);
    expect(new Set(claimed.map((r) => `${r.tenant}/${r.id}`)).size).toBe(items.length);
    expect(claimed.every((r) => r.epoch >= 1 && r.state === 'running')).toBe(true);
    const stats = await stores[0]!.queueStats();
    expect(stats.every((s) => s.waiting === 0 && s.running === 40)).toBe(true);
  });

  it("keeps the claim an older build calls: migration 21's seven arguments, passing over nothing", async () => {
    const clock = new FakeClock();
    const [store] = await processes(1, { clock });
    await store!.operationSubmitMany([item({ id: 'a' }), item({ id: 'b' })]);
    await store!.operationClaimMany({ class: 'default', owner: 'gone', limit: 1, leaseMs: 1000 });
    clock.advance(1001);
    expect(await store!.leaseRescue({ maxLeaseExpiries: 3, limit: 10 })).toMatchObject([
      { id: 'a', to: 'queued' },
    ]);
    // This build passes over 'a' (one expiry) when told to; the older call takes it.
    const now = clock.now();
    const passing = await store!.operationClaimMany({
      class: 'default',
      owner: 'new',
      limit: 10,
      leaseMs: 1000,
      passOver: 1,
    });
    expect(passing.rows.map((r) => r.id)).toEqual(['b']);
    const older = await store!.context.query<{ id: string; lease_owner: string }>(
      'SELECT id, lease_owner FROM {s}.claim($1, $2, $3, $4, $5, NULL, NULL)',
      ['default', 'older', 10, 1000, now],
    );
    expect(older.map((r) => [r.id, r.lease_owner])).toEqual([['a', 'older']]);
  });

  it('never exceeds maxRunning, whatever the number of concurrent claimers', async () => {
    const stores = await processes(3);
    const items = Array.from({ length: 20 }, (_, i) => item({ id: `o${i}`, limits: { maxRunning: 3 } }));
    await stores[0]!.operationSubmitMany(items);
    const burst = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        stores[i % 3]!.operationClaimMany({ class: 'default', owner: `w${i}`, limit: 4, leaseMs: 60_000 }),
      ),
    );
    const first = burst.flatMap((b) => b.rows);
    expect(first.length).toBeLessThanOrEqual(3);
    // Whatever the burst left (claimers that found the row locked skipped it), a later claim
    // tops up to the cap and never past it.
    const later = await stores[1]!.operationClaimMany({
      class: 'default',
      owner: 'w',
      limit: 10,
      leaseMs: 60_000,
    });
    expect(first.length + later.rows.length).toBe(3);
    expect(await stores[0]!.queueStats()).toEqual([
      { class: 'default', tenant: 'North', waiting: 17, running: 3 },
    ]);
  });
});

describe('durable commits', () => {
  /** The store's connections as a server, database or role set to `value` would start them. */
  const startingWith = (value: string) => {
    const url = new URL(db.url);
    url.searchParams.set('options', `-c synchronous_commit=${value}`);
    return url.toString();
  };
  const settingOf = async (store: PostgresStore) =>
    (await store.context.query<{ v: string }>(`SELECT current_setting('synchronous_commit') AS v`))[0]!.v;

  it('raises synchronous_commit = off to local on the store’s own connections', async () => {
    const store = db.store({ connectionString: startingWith('off'), poolSize: 1 });
    expect(await settingOf(store)).toBe('local');
    await store.migrate();
    const [out] = await store.operationSubmitMany([item({ id: 'durable-1' })]);
    expect(out?.status).toBe('created');
    expect(await settingOf(store)).toBe('local');
  });

  it('leaves stronger settings alone, and off when told to', async () => {
    for (const value of ['on', 'remote_apply', 'remote_write']) {
      const store = db.store({ connectionString: startingWith(value), poolSize: 1 });
      expect(await settingOf(store)).toBe(value);
    }
    const opted = db.store({ connectionString: startingWith('off'), poolSize: 1, durableCommits: false });
    expect(await settingOf(opted)).toBe('off');
  });

  it('commits a claim alone without waiting for the flush, and nothing else', async () => {
    // The setting is read inside each call's transaction, on the one connection of the pool: the
    // calls run on a client in an open transaction, as the store's own statements would.
    const store = db.store({ schema: db.freshSchema(), connectionString: startingWith('on'), poolSize: 1 });
    await store.migrate();
    await store.operationSubmitMany([item({ id: 'a' }), item({ id: 'b' })]);
    const params = { class: 'default', owner: 'w', limit: 1, leaseMs: 60_000 };
    const inOneTransaction = async (call: (ctx: typeof store.context) => Promise<unknown>) => {
      const client = await store.context.pool.connect();
      try {
        await client.query('BEGIN');
        await call({ ...store.context, query: store.context.on(client) });
        const { rows } = await client.query<{ v: string }>(
          `SELECT current_setting('synchronous_commit') AS v`,
        );
        await client.query('COMMIT');
        return rows[0]!.v;
      } finally {
        client.release();
      }
    };
    let claimed: OperationRow | undefined;
    expect(
      await inOneTransaction(async (ctx) => {
        [claimed] = (await claimMany(ctx, params)).rows;
      }),
    ).toBe('off');
    expect(claimed?.id).toBe('a');
    // The next transaction on the same connection is back to the session's setting.
    expect(await settingOf(store)).toBe('on');
    const ends = [
      {
        lease: { tenant: 'North', id: 'a', epoch: claimed!.epoch },
        outcome: 'succeeded' as const,
        result: 1,
      },
    ];
    expect(await inOneTransaction((ctx) => finishAndClaim(ctx, ends, params))).toBe('on');
    expect((await store.operationGet({ tenant: 'North', id: 'a' }))?.state).toBe('succeeded');
    expect((await store.operationGet({ tenant: 'North', id: 'b' }))?.state).toBe('running');
  });
});

describe('leases and the journal', () => {
  it('heartbeats extend held leases and report lost ones and cancel requests', async () => {
    const clock = new FakeClock();
    const [store] = await processes(1, { clock });
    await store!.operationSubmitMany([item({ id: 'a' }), item({ id: 'b' })]);
    const { rows } = await store!.operationClaimMany({
      class: 'default',
      owner: 'w',
      limit: 2,
      leaseMs: 1000,
    });
    clock.advance(500);
    await store!.operationCancel({ tenant: 'North', id: 'b' });
    const status = await store!.leaseExtendMany({
      leases: [
        ...rows.map((r) => ({ tenant: r.tenant, id: r.id, epoch: r.epoch })),
        { tenant: 'North', id: 'a', epoch: 9 },
      ],
      leaseMs: 1000,
    });
    expect(status).toEqual([
      { ok: true, cancelRequested: false },
      { ok: true, cancelRequested: true },
      { ok: false, cancelRequested: false },
    ]);
    expect((await store!.operationGet({ tenant: 'North', id: 'a' }))?.leaseExpiresAt).toBe(
      clock.now() + 1000,
    );
  });

  it('fences finish: a worker whose lease was rescued and re-claimed writes nothing', async () => {
    const clock = new FakeClock();
    const [w1, w2] = await processes(2, { clock });
    await w1!.operationSubmitMany([item()]);
    const [first] = (await w1!.operationClaimMany({ class: 'default', owner: 'w1', limit: 1, leaseMs: 1000 }))
      .rows;
    clock.advance(1001);
    expect(await w2!.leaseRescue({ maxLeaseExpiries: 3, limit: 10 })).toMatchObject([
      { tenant: 'North', id: 'op-1', to: 'queued' },
    ]);
    const [second] = (
      await w2!.operationClaimMany({ class: 'default', owner: 'w2', limit: 1, leaseMs: 1000 })
    ).rows;
    expect(second!.epoch).toBeGreaterThan(first!.epoch);
    const stale = { tenant: 'North', id: 'op-1', epoch: first!.epoch };
    expect(await w1!.attemptFinishMany([{ lease: stale, outcome: 'succeeded', result: 'stale' }])).toEqual([
      false,
    ]);
    expect(await w1!.effectMarkCommitted({ lease: stale, name: 'charge', result: 1, reference: null })).toBe(
      false,
    );
    expect(await codeOf(w1!.effectBegin({ lease: stale, name: 'charge', key: 'k' }))).toBe('lease-lost');
    const fresh = { tenant: 'North', id: 'op-1', epoch: second!.epoch };
    expect(await w2!.attemptFinishMany([{ lease: fresh, outcome: 'succeeded', result: 'ok' }])).toEqual([
      true,
    ]);
    expect(await w2!.attemptFinishMany([{ lease: fresh, outcome: 'succeeded', result: 'twice' }])).toEqual([
      false,
    ]);
    const row = await w1!.operationGet({ tenant: 'North', id: 'op-1' });
    expect([row?.state, row?.result]).toEqual(['succeeded', 'ok']);
    expect((await w1!.attemptList({ tenant: 'North', id: 'op-1' })).map((a) => [a.epoch, a.outcome])).toEqual(
      [
        [first!.epoch, 'lease-expired'],
        [second!.epoch, 'succeeded'],
      ],
    );
  });

  it('journals an effect: pending, sends, committed; a cancel after it is too late', async () => {
    const [store] = await processes(1);
    await store!.operationSubmitMany([item()]);
    const [op] = (
      await store!.operationClaimMany({ class: 'default', owner: 'w', limit: 1, leaseMs: 60_000 })
    ).rows;
    const lease = { tenant: 'North', id: 'op-1', epoch: op!.epoch };
    const begun = await store!.effectBegin({
      lease,
      name: 'charge',
      key: 'key-1',
      provider: 'stub',
      cost: 5000,
    });
    expect([begun.created, begun.row.state, begun.row.sends, begun.row.cost]).toEqual([
      true,
      'pending',
      1,
      5000,
    ]);
    const again = await store!.effectBegin({ lease, name: 'charge', key: 'key-1' });
    expect([again.created, again.row.firstSentAt]).toEqual([false, begun.row.firstSentAt]);
    expect((await store!.effectRecordSend({ lease, name: 'charge' })).row.sends).toBe(2);
    expect(await store!.operationCancel({ tenant: 'North', id: 'op-1' })).toMatchObject({
      outcome: 'too_late',
    });
    expect(
      await store!.effectMarkCommitted({ lease, name: 'charge', result: { id: 'ch_1' }, reference: 'ch_1' }),
    ).toBe(true);
    const [effect] = await store!.effectList({ tenant: 'North', id: 'op-1' });
    expect([effect?.state, effect?.result, effect?.reference]).toEqual(['committed', { id: 'ch_1' }, 'ch_1']);
    expect(await store!.attemptFinishMany([{ lease, outcome: 'succeeded', result: null }])).toEqual([true]);
    expect((await store!.operationGet({ tenant: 'North', id: 'op-1' }))?.cancel).toBe('too_late');
  });

  it('refuses the first effect once a cancel was requested', async () => {
    const [store] = await processes(1);
    await store!.operationSubmitMany([item()]);
    const [op] = (
      await store!.operationClaimMany({ class: 'default', owner: 'w', limit: 1, leaseMs: 60_000 })
    ).rows;
    expect(await store!.operationCancel({ tenant: 'North', id: 'op-1' })).toMatchObject({
      outcome: 'requested',
    });
    const lease = { tenant: 'North', id: 'op-1', epoch: op!.epoch };
    expect(await codeOf(store!.effectBegin({ lease, name: 'charge', key: 'k' }))).toBe('cancel-requested');
    expect(await store!.attemptFinishMany([{ lease, outcome: 'cancelled' }])).toEqual([true]);
    expect((await store!.operationGet({ tenant: 'North', id: 'op-1' }))?.state).toBe('cancelled');
  });
});

describe('admission and budgets across processes', () => {
  const HOUR = 3_600_000;
  const leaseOf = (r: OperationRow) => ({ tenant: r.tenant, id: r.id, epoch: r.epoch });

  /** Claims every ready operation of the class (several claims: a claim serves `limit` at most). */
  async function claimAll(
    store: Store,
    want: number,
    extra: Partial<ClaimParams> = {},
  ): Promise<OperationRow[]> {
    const rows: OperationRow[] = [];
    for (let i = 0; i < 20 && rows.length < want; i++) {
      const claimed = await store.operationClaimMany({
        class: 'default',
        owner: 'w',
        limit: want - rows.length,
        leaseMs: 60_000,
        ...extra,
      });
      if (claimed.rows.length === 0) break;
      rows.push(...claimed.rows);
    }
    return rows;
  }

  /** Settles every promise; the successes and the error codes of the refusals. */
  async function outcomes<T>(promises: Array<Promise<T>>): Promise<{ ok: T[]; codes: string[] }> {
    const settled = await Promise.allSettled(promises);
    const ok: T[] = [];
    const codes: string[] = [];
    for (const s of settled) {
      if (s.status === 'fulfilled') ok.push(s.value);
      else if (isSluiceError(s.reason)) codes.push(s.reason.code);
      else throw s.reason;
    }
    return { ok, codes };
  }

  it('never overspends a spend budget when two processes draw on it at once, all or nothing', async () => {
    const clock = new FakeClock();
    const stores = await processes(2, { clock, poolSize: 6 });
    const tenants = ['A', 'B', 'C', 'D'];
    await stores[0]!.operationSubmitMany(
      Array.from({ length: 40 }, (_, i) => item({ tenant: tenants[i % 4]!, id: `op-${i}` })),
    );
    const rows = await claimAll(stores[0]!, 40);
    expect(rows).toHaveLength(40);
    // Each effect costs 100 and draws on its tenant's budget (400: 16 would fit in all) and on the
    // global one (1,000: 10 fit). Neither row exists yet: the first draws of the window race to
    // create them.
    const spendOf = (tenant: string, cost = 100): BudgetCharge[] => [
      { key: `spend:pay:tenant:${tenant}`, limit: 400, windowMs: HOUR, cost },
      { key: 'spend:pay:*', limit: 1000, windowMs: HOUR, cost },
    ];
    const begin = (r: OperationRow, i: number) =>
      stores[i % 2]!.effectBegin({
        lease: leaseOf(r),
        name: 'charge',
        key: `k-${r.id}`,
        spend: spendOf(r.tenant),
      });
    const first = await outcomes(rows.map(begin));
    expect(first.ok).toHaveLength(10);
    expect(first.codes).toEqual(Array(30).fill('budget-exhausted'));

    const usage = await stores[1]!.budgetUsage({ prefix: 'spend:pay:', since: clock.now() });
    const global = usage.find((u) => u.key === 'spend:pay:*');
    expect(global).toMatchObject({ reserved: 1000, committed: 0 });
    // All or nothing: every tenant's reservation is exactly its share of the global one.
    const won = first.ok.map((r) => r.row);
    for (const tenant of tenants) {
      const own = won.filter((e) => e.tenant === tenant).length;
      expect(own).toBeLessThanOrEqual(4);
      const reserved = usage.find((u) => u.key === `spend:pay:tenant:${tenant}`)?.reserved ?? 0;
      expect({ tenant, reserved }).toEqual({ tenant, reserved: own * 100 });
    }
    // A refusal wrote nothing: no effect row, no point of no return.
    const losers = rows.filter((r) => !won.some((e) => e.id === r.id));
    for (const r of losers.slice(0, 5)) {
      expect(await stores[0]!.effectList({ tenant: r.tenant, id: r.id })).toEqual([]);
      expect((await stores[0]!.operationGet({ tenant: r.tenant, id: r.id }))?.effectStartedAt).toBeNull();
    }

    // Settled from both processes at once: five committed, five failed (their spend released).
    await Promise.all(
      won.map((e, i) => {
        const lease = leaseOf(rows.find((r) => r.id === e.id)!);
        return i % 2 === 0
          ? stores[i % 2]!.effectMarkCommitted({ lease, name: 'charge', result: 1, reference: null })
          : stores[i % 2]!.effectMarkFailed({
              lease,
              name: 'charge',
              error: { code: 'declined', message: 'no' },
            });
      }),
    );
    const settled = (await stores[0]!.budgetUsage({ prefix: 'spend:pay:*', since: clock.now() }))[0];
    expect(settled).toMatchObject({ reserved: 0, committed: 500 });
    // The 500 released fit five more, whichever tenants race for them.
    const second = await outcomes(losers.map(begin));
    expect(second.ok).toHaveLength(5);
    expect(second.codes).toEqual(Array(25).fill('budget-exhausted'));
    expect((await stores[1]!.budgetUsage({ prefix: 'spend:pay:*', since: clock.now() }))[0]).toMatchObject({
      reserved: 500,
      committed: 500,
    });
  });

  it('never lets concurrent sends pass a call-rate cap', async () => {
    const clock = new FakeClock();
    const stores = await processes(3, { clock, poolSize: 4 });
    await stores[0]!.operationSubmitMany(Array.from({ length: 30 }, (_, i) => item({ id: `op-${i}` })));
    const rows = await claimAll(stores[0]!, 30);
    const rates: BudgetCharge[] = [{ key: 'rate:pay', limit: 7, windowMs: 1000, cost: 1 }];
    const { ok, codes } = await outcomes(
      rows.map((r, i) => stores[i % 3]!.effectBegin({ lease: leaseOf(r), name: 'charge', key: r.id, rates })),
    );
    expect(ok).toHaveLength(7);
    expect(codes).toEqual(Array(23).fill('budget-exhausted'));
    expect(await stores[2]!.budgetUsage({ prefix: 'rate:', since: clock.now() })).toEqual([
      {
        key: 'rate:pay',
        windowStart: clock.now() - (clock.now() % 1000),
        windowMs: 1000,
        reserved: 0,
        committed: 7,
      },
    ]);
  });

  it('never exceeds maxQueued under concurrent submits of many tenants from several processes', async () => {
    const stores = await processes(3, { poolSize: 4 });
    const limits = { maxQueued: 25, maxWaiting: 2 };
    // 20 tenants × 3 operations, in batches that mix tenants and classes in varying order
    // (the uncapped `bulk` class shares the batches: its class row is locked with the others).
    const batches: SubmitParams[][] = [];
    for (let b = 0; b < 30; b++) {
      const batch: SubmitParams[] = [];
      for (let k = 0; k < 2; k++) {
        const n = b * 2 + k;
        batch.push(item({ tenant: `T${(n * 7) % 20}`, id: `op-${n}`, limits }));
      }
      if (b % 3 === 0) batch.push(item({ tenant: `T${b % 20}`, id: `bulk-${b}`, class: 'bulk', limits: {} }));
      batches.push(b % 2 === 0 ? batch : batch.reverse());
    }
    const results = (
      await Promise.all(batches.map((batch, i) => stores[i % 3]!.operationSubmitMany(batch)))
    ).flat();
    expect(results).toHaveLength(70);
    const created = results.filter((o) => o.status === 'created');
    const bulk = created.filter((o) => o.status === 'created' && o.row.class === 'bulk');
    expect(bulk).toHaveLength(10);
    expect(created.length - bulk.length).toBe(25);
    const rejected = results.filter((o) => o.status === 'rejected');
    expect(rejected).toHaveLength(35);
    for (const o of rejected) {
      if (o.status !== 'rejected') continue;
      // Each refusal carries the count that refused it, never past the bound.
      if (o.reason === 'class-queue-full') expect(o.waiting).toBe(25);
      else expect(o).toMatchObject({ reason: 'tenant-queue-full', waiting: 2 });
    }
    expect(await stores[1]!.classStats()).toEqual([
      { class: 'bulk', waiting: 10 },
      { class: 'default', waiting: 25 },
    ]);
    const stats = await stores[2]!.queueStats();
    expect(stats.filter((s) => s.class === 'default').reduce((n, s) => n + s.waiting, 0)).toBe(25);
    expect(stats.every((s) => s.class === 'bulk' || s.waiting <= 2)).toBe(true);
  });

  it('keeps the class count exact and under maxQueued while claims race the submits', async () => {
    const stores = await processes(3, { poolSize: 4 });
    const limits = { maxQueued: 10 };
    let claimed = 0;
    const submitter = async (store: PostgresStore, s: number) => {
      const out: SubmitOutcome[] = [];
      for (let i = 0; i < 15; i++) {
        out.push(
          ...(await store.operationSubmitMany([
            item({ tenant: `T${(s + i) % 6}`, id: `s${s}-${i}-a`, limits }),
            item({ tenant: `T${(s + 2 * i) % 6}`, id: `s${s}-${i}-b`, limits }),
          ])),
        );
      }
      return out;
    };
    const claimer = async (store: PostgresStore) => {
      for (let i = 0; i < 15; i++) {
        // Read after the await: `claimed += await …` would add to a stale total.
        const { rows } = await store.operationClaimMany({
          class: 'default',
          owner: 'w',
          limit: 2,
          leaseMs: 60_000,
        });
        claimed += rows.length;
      }
    };
    const [a, b] = await Promise.all([
      submitter(stores[0]!, 0),
      submitter(stores[1]!, 1),
      claimer(stores[2]!),
      claimer(stores[0]!),
    ]);
    const created = [...a!, ...b!].filter((o) => o.status === 'created').length;
    const [cls] = await stores[2]!.classStats();
    expect(cls).toEqual({ class: 'default', waiting: created - claimed });
    expect(cls!.waiting).toBeLessThanOrEqual(10);
    const stats = await stores[1]!.queueStats();
    expect(stats.reduce((n, s) => n + s.waiting, 0)).toBe(created - claimed);
    expect(stats.reduce((n, s) => n + s.running, 0)).toBe(claimed);
  });

  it('keeps both counts exact when lone submits race each other and claims at both caps', async () => {
    // One item per call: the single-submit function, whose class refusal and raced duplicate take
    // back what the tenant's row had counted. Each id is sent by 9 callers at once, from 3 stores
    // whose connections are open already, so the callers' lookups run before the first commits.
    const stores = await processes(3, { poolSize: 3 });
    await Promise.all(stores.flatMap((st) => [st.queueStats(), st.queueStats(), st.queueStats()]));
    const limits = { maxWaiting: 3, maxQueued: 8 };
    const outcomes: SubmitOutcome[] = [];
    let claimed = 0;
    for (let k = 0; k < 24; k++) {
      const p = item({ tenant: `T${k % 4}`, id: `op-${k}`, limits });
      const claim =
        k % 2
          ? stores[0]!.operationClaimMany({ class: 'default', owner: 'w', limit: 1, leaseMs: 60_000 })
          : null;
      const answers = await Promise.all(
        stores.flatMap((st) => [st, st, st].map((x) => x.operationSubmitMany([p]))),
      );
      claimed += (await claim)?.rows.length ?? 0;
      outcomes.push(...answers.flat());
    }
    const created = outcomes.filter((o) => o.status === 'created');
    const ids = created.map((o) => (o.status === 'created' ? o.row.id : ''));
    expect(new Set(ids).size).toBe(ids.length);
    for (const o of outcomes) {
      if (o.status !== 'rejected') continue;
      if (o.reason === 'class-queue-full') expect(o.waiting).toBe(8);
      else expect(o).toMatchObject({ reason: 'tenant-queue-full', waiting: 3 });
    }
    const [cls] = await stores[1]!.classStats();
    expect(cls).toEqual({ class: 'default', waiting: created.length - claimed });
    const stats = await stores[2]!.queueStats();
    const rows = await stores[0]!.operationList({ limit: 500 });
    expect(rows).toHaveLength(created.length);
    for (const st of stats) {
      const mine = rows.filter((r) => r.tenant === st.tenant);
      expect({ tenant: st.tenant, waiting: st.waiting, running: st.running }).toEqual({
        tenant: st.tenant,
        waiting: mine.filter((r) => r.state === 'queued').length,
        running: mine.filter((r) => r.state === 'running').length,
      });
    }
  });

  it('never lets concurrent retry takes exceed floor + ratio × first attempts', async () => {
    const clock = new FakeClock();
    const stores = await processes(3, { clock, poolSize: 4 });
    const budget = { windowMs: 60_000, bucketMs: 1000, ratio: 0.1, floor: 2 };
    const submit = (prefix: string, n: number) =>
      stores[0]!.operationSubmitMany(
        Array.from({ length: n }, (_, i) => item({ tenant: `T${i % 5}`, id: `${prefix}${i}` })),
      );
    // Claims in three processes count the first attempts they start, each into its own shard. A
    // claimer that finds the queue rows held by the others stops early; the last one sweeps up.
    const claimRest = async (want: number) => {
      const raced = await Promise.all(
        stores.map((s, shard) => claimAll(s, want, { limit: 2, retryBudget: { bucketMs: 1000, shard } })),
      );
      const n = raced.flat().length;
      return n + (await claimAll(stores[0]!, want - n, { retryBudget: { bucketMs: 1000, shard: 0 } })).length;
    };
    await submit('op-', 30);
    expect(await claimRest(30)).toBe(30);
    const takes = await Promise.all(
      Array.from({ length: 40 }, (_, i) => stores[i % 3]!.retryBudgetTake({ ...budget, shard: i % 3 })),
    );
    // 2 + 10% of 30 = 5.
    expect(takes.filter((t) => t.allowed)).toHaveLength(5);
    expect(await stores[1]!.retryBudgetStats({ windowMs: 60_000 })).toEqual({
      firstAttempts: 30,
      retries: 5,
      denials: 35,
    });

    // Takes racing claims that start 20 more first attempts: never more than the final budget.
    await submit('more-', 20);
    const [more, claimedMore] = await Promise.all([
      Promise.all(
        Array.from({ length: 40 }, (_, i) => stores[i % 3]!.retryBudgetTake({ ...budget, shard: i % 3 })),
      ),
      claimRest(20),
    ]);
    expect(claimedMore).toBe(20);
    const allowed = 5 + more.filter((t) => t.allowed).length;
    expect(allowed).toBeLessThanOrEqual(2 + 0.1 * 50);
    expect(await stores[2]!.retryBudgetStats({ windowMs: 60_000 })).toEqual({
      firstAttempts: 50,
      retries: allowed,
      denials: 80 - allowed,
    });
  });

  it('purges spend windows and retry buckets a day after they ended, as SQLite does', async () => {
    const scenario = async (store: Store, clock: FakeClock) => {
      await store.operationSubmitMany([item({ id: 'a' }), item({ id: 'b' })]);
      const [a, b] = await claimAll(store, 2, { retryBudget: { bucketMs: 1000, shard: 0 } });
      const charge = (windowMs: number): BudgetCharge[] => [
        { key: `spend:w${windowMs}`, limit: 100, windowMs, cost: 1 },
      ];
      await store.effectBegin({ lease: leaseOf(a!), name: 'short', key: 'ka', spend: charge(1000) });
      await store.effectBegin({ lease: leaseOf(b!), name: 'long', key: 'kb', spend: charge(2 * 86_400_000) });
      const purge = { retentionMs: 86_400_000 * 30, tombstoneMs: 86_400_000 * 60, limit: 10 };
      const remaining = async () =>
        (await store.budgetUsage({ since: 0 }))
          .map((u) => u.key)
          .concat(String((await store.retryBudgetStats({ windowMs: 10 * 86_400_000 })).firstAttempts));
      clock.advance(86_400_000);
      await store.retentionPurge(purge);
      const before = await remaining();
      clock.advance(2000);
      await store.retentionPurge(purge);
      return { before, after: await remaining() };
    };
    const clock = new FakeClock();
    const [pg] = await processes(1, { clock });
    const liteClock = new FakeClock();
    const lite = sqliteStore({ path: ':memory:', clock: liteClock });
    await lite.migrate();
    try {
      const expected = await scenario(lite, liteClock);
      expect(expected).toEqual({
        before: ['spend:w1000', 'spend:w172800000', '2'],
        after: ['spend:w172800000', '0'],
      });
      expect(await scenario(pg!, clock)).toEqual(expected);
    } finally {
      await lite.close();
    }
  });
});

describe('maintenance', () => {
  it('lets concurrent rescuers split the expired leases', async () => {
    const clock = new FakeClock();
    const stores = await processes(3, { clock });
    await stores[0]!.operationSubmitMany(Array.from({ length: 30 }, (_, i) => item({ id: `o${i}` })));
    await stores[0]!.operationClaimMany({ class: 'default', owner: 'w', limit: 30, leaseMs: 1000 });
    clock.advance(1001);
    const rescued = (
      await Promise.all(stores.map((s) => s.leaseRescue({ maxLeaseExpiries: 3, limit: 30 })))
    ).flat();
    expect(rescued).toHaveLength(30);
    expect(new Set(rescued.map((r) => r.id)).size).toBe(30);
    expect(await stores[0]!.queueStats()).toEqual([
      { class: 'default', tenant: 'North', waiting: 30, running: 0 },
    ]);
  });

  it('purges old terminal operations to tombstones, never one awaiting reconciliation', async () => {
    const clock = new FakeClock();
    const [store] = await processes(1, { clock });
    await store!.operationSubmitMany([item({ id: 'done' }), item({ id: 'unknown' })]);
    const { rows } = await store!.operationClaimMany({
      class: 'default',
      owner: 'w',
      limit: 2,
      leaseMs: 60_000,
    });
    const lease = (id: string) => ({ tenant: 'North', id, epoch: rows.find((r) => r.id === id)!.epoch });
    await store!.effectBegin({ lease: lease('unknown'), name: 'charge', key: 'k' });
    expect(
      await store!.attemptFinishMany([
        { lease: lease('done'), outcome: 'succeeded', result: 1 },
        { lease: lease('unknown'), outcome: 'failed', error: { code: 'boom', message: 'x' } },
      ]),
    ).toEqual([true, true]);
    expect((await store!.operationGet({ tenant: 'North', id: 'unknown' }))?.state).toBe(
      'needs_reconciliation',
    );
    clock.advance(10_000);
    expect(await store!.retentionPurge({ retentionMs: 5000, tombstoneMs: 60_000, limit: 10 })).toEqual({
      purged: 1,
      tombstonesDeleted: 0,
      queuesDeleted: 0,
    });
    expect(await store!.operationGet({ tenant: 'North', id: 'done' })).toBeUndefined();
    expect((await store!.operationGet({ tenant: 'North', id: 'unknown' }))?.state).toBe(
      'needs_reconciliation',
    );
    expect(await store!.operationSubmitMany([item({ id: 'done' })])).toEqual([
      { status: 'expired', digestMatches: true },
    ]);
    clock.advance(60_000);
    expect(await store!.retentionPurge({ retentionMs: 5000, tombstoneMs: 60_000, limit: 10 })).toEqual({
      purged: 0,
      tombstonesDeleted: 1,
      queuesDeleted: 0,
    });
  });
});

/**
 * A store on a fresh schema with one connection (every statement's cached plan and read counter is
 * on it), a fake clock, autovacuum off on `tables` (no VACUUM or ANALYZE behind the test's back),
 * and an admin connection, which the caller ends.
 */
async function oneConnection(tables: string[]) {
  const clock = new FakeClock();
  const schema = db.freshSchema();
  const store = db.store({ schema, poolSize: 1, clock });
  await store.migrate();
  const admin = await db.client();
  await withoutAutovacuum(admin, schema, tables).catch(async (error) => {
    await admin.end();
    throw error;
  });
  return { clock, schema, store, admin };
}

describe('maintenance plans', () => {
  it('keep reading by index after the table grows under plans made while it was empty', async () => {
    const { clock, schema, store, admin } = await oneConnection(['operations', 'tombstones']);
    try {
      // More than the five runs after which PostgreSQL may cache a generic plan, on empty tables.
      const rescue = () => store.leaseRescue({ maxLeaseExpiries: 3, limit: 100 });
      const purge = () => store.retentionPurge({ retentionMs: 60_000, tombstoneMs: 600_000, limit: 100 });
      for (let i = 0; i < 8; i++) {
        expect(await rescue()).toEqual([]);
        expect(await purge()).toEqual({ purged: 0, tombstonesDeleted: 0, queuesDeleted: 0 });
      }
      // 20,000 operations and 20,000 tombstones, none of them due: no lease, finished just now.
      const now = clock.now();
      await admin.query(
        `INSERT INTO "${schema}".operations (tenant, id, kind, class, digest, input, state, max_attempts,
                                            run_after, created_at, updated_at, finished_at)
         SELECT 'Bulk', 'b' || g, 'noop', 'default', 'd', '{}',
                CASE WHEN g % 2 = 0 THEN 'succeeded' ELSE 'queued' END, 1, 0, $1, $1,
                CASE WHEN g % 2 = 0 THEN $1::bigint END
           FROM generate_series(1, 20000) g`,
        [now],
      );
      await admin.query(
        `INSERT INTO "${schema}".tombstones (tenant, id, kind, digest, state, finished_at, purged_at)
         SELECT 'Bulk', 't' || g, 'noop', 'd', 'succeeded', $1, $1 FROM generate_series(1, 20000) g`,
        [now],
      );
      const tables = ['operations', 'tombstones'];
      const before = await rowsRead(store, schema, tables);
      const n = 10;
      for (let i = 0; i < n; i++) {
        expect(await rescue()).toEqual([]);
        expect(await purge()).toEqual({ purged: 0, tombstonesDeleted: 0, queuesDeleted: 0 });
      }
      // Through an index a run that finds nothing due reads next to nothing; a scan, 40,000 rows.
      expect(((await rowsRead(store, schema, tables)) - before) / n).toBeLessThan(100);
    } finally {
      await admin.end();
    }
  });
});

describe('queue rows by tenant', () => {
  it("reads one tenant's counters, and forgets a departed tenant's, by key among thousands", async () => {
    const { clock, schema, store, admin } = await oneConnection(['queues', 'classes']);
    try {
      await store.operationSubmitMany([item({ tenant: 'Gone', id: 'last' })]);
      const { rows } = await store.operationClaimMany({
        class: 'default',
        owner: 'w',
        limit: 1,
        leaseMs: 60_000,
      });
      await store.attemptFinishMany([
        { lease: { tenant: 'Gone', id: 'last', epoch: rows[0]!.epoch }, outcome: 'succeeded', result: 1 },
      ]);
      // 6,000 other tenants' rows at rest in two classes, with statistics as autovacuum would make.
      await admin.query(
        `INSERT INTO "${schema}".queues (class, tenant)
         SELECT c, 'T' || g FROM generate_series(1, 3000) g, (VALUES ('default'), ('bulk')) v(c)`,
      );
      await admin.query(`INSERT INTO "${schema}".classes (class) VALUES ('bulk') ON CONFLICT DO NOTHING`);
      await admin.query(`ANALYZE "${schema}".queues, "${schema}".classes`);
      clock.advance(10_000);
      const before = await rowsRead(store, schema, ['queues']);
      expect(await store.queueStats({ tenant: 'T7' })).toEqual([
        { class: 'bulk', tenant: 'T7', waiting: 0, running: 0 },
        { class: 'default', tenant: 'T7', waiting: 0, running: 0 },
      ]);
      expect(await store.retentionPurge({ retentionMs: 5000, tombstoneMs: 60_000, limit: 10 })).toEqual({
        purged: 1,
        tombstonesDeleted: 0,
        queuesDeleted: 1,
      });
      // By key, a few rows each; a scan, 6,000.
      expect((await rowsRead(store, schema, ['queues'])) - before).toBeLessThan(20);
      expect(await store.queueStats({ tenant: 'Gone' })).toEqual([]);
    } finally {
      await admin.end();
    }
  });
});

describe('the cursor key', () => {
  it('is one for every process sharing a schema, and another for another schema', async () => {
    const [a, b] = await processes(2);
    const [other] = await processes(1);
    const key = await a!.secret('cursor');
    expect(key).toMatch(/^[0-9a-f]{32}$/);
    expect(await b!.secret('cursor')).toBe(key);
    expect(await other!.secret('cursor')).not.toBe(key);
  });
});

describe('budget windows', () => {
  it('in effect are read by their end, past a day of ended ones and plans made while empty', async () => {
    const { clock, schema, store, admin } = await oneConnection(['budgets']);
    try {
      const now = clock.now();
      const read = () => store.budgetUsage({ prefix: 'spend:', since: now });
      for (let i = 0; i < 8; i++) expect(await read()).toEqual([]);
      // 2,000 tenants' hourly spend windows: the one in effect, and the 23 that ended today.
      await admin.query(
        `INSERT INTO "${schema}".budgets (key, window_start, window_ms, committed)
         SELECT 'spend:pay:tenant:T' || t, $1::bigint - $1::bigint % 3600000 - h * 3600000, 3600000, 1
           FROM generate_series(1, 2000) t, generate_series(0, 23) h`,
        [now],
      );
      await admin.query(`ANALYZE "${schema}".budgets`);
      const before = await rowsRead(store, schema, ['budgets']);
      expect(await read()).toHaveLength(2000);
      // By the end, about the 2,000 in effect; a scan, 48,000.
      expect((await rowsRead(store, schema, ['budgets'])) - before).toBeLessThan(4000);

      // One tenant's, by the tenant its keys name: its 24 windows at most, not the 2,000 tenants'.
      const mark = await rowsRead(store, schema, ['budgets']);
      expect(await store.budgetUsage({ prefix: 'spend:', since: now, tenant: 'T7' })).toEqual([
        expect.objectContaining({ key: 'spend:pay:tenant:T7', committed: 1 }),
      ]);
      expect((await rowsRead(store, schema, ['budgets'])) - mark).toBeLessThan(30);
    } finally {
      await admin.end();
    }
  });
});

describe('claim reads', () => {
  it("do not step over the index entries that a tenant's earlier claims left behind", async () => {
    // Without VACUUM, every operation claimed leaves its entry in the ready index.
    const { clock, schema, store, admin } = await oneConnection(['operations', 'queues']);
    try {
      // 2,000 operations of a tenant, ready one millisecond apart from now on (run_after in order).
      const enqueue = async (tenant: string) => {
        for (let i = 0; i < 2000; i += 500)
          await store.operationSubmitMany(
            Array.from({ length: 500 }, (_, k) => item({ tenant, id: `${tenant}-${i + k}`, delayMs: i + k })),
          );
        clock.advance(2000);
      };
      // Pages of the ready index read per claim of 32 (each claim's operations then end).
      const pagesPerClaim = async (rounds: number): Promise<number> => {
        const before = await indexPagesRead(store, schema, 'operations_ready');
        for (let r = 0; r < rounds; r++) {
          const { rows } = await store.operationClaimMany({
            class: 'default',
            owner: 'w',
            limit: 32,
            leaseMs: 60_000,
          });
          expect(rows).toHaveLength(32);
          const ends = rows.map((x) => ({
            lease: { tenant: x.tenant, id: x.id, epoch: x.epoch },
            outcome: 'succeeded' as const,
            result: 1,
          }));
          expect(await store.attemptFinishMany(ends)).toEqual(rows.map(() => true));
        }
        return ((await indexPagesRead(store, schema, 'operations_ready')) - before) / rounds;
      };
      // Two tenants at once (the general path, 16 each per claim): 1,600 of each claimed between
      // the first five claims and the last five.
      await enqueue('North');
      await enqueue('South');
      const bothEarly = await pagesPerClaim(5);
      await pagesPerClaim(90);
      const bothLate = await pagesPerClaim(5);
      await pagesPerClaim(25);
      // A third tenant alone (a lone candidate, one statement): 1,600 claimed in between.
      await enqueue('East');
      const aloneEarly = await pagesPerClaim(5);
      await pagesPerClaim(40);
      const aloneLate = await pagesPerClaim(5);
      // Reads that started at the front of a tenant's range would cross the entries its 1,600
      // claimed operations left there, about ten pages per read, two reads per tenant a claim.
      expect(bothLate, `${bothEarly} → ${bothLate}`).toBeLessThan(bothEarly + 4);
      expect(aloneLate, `${aloneEarly} → ${aloneLate}`).toBeLessThan(aloneEarly + 4);
    } finally {
      await admin.end();
    }
  });
});

describe('wake-ups', () => {
  it('notifies listeners in other processes when submitted work commits', async () => {
    const [listener, submitter] = await processes(2);
    let woke!: (cls: string) => void;
    const wake = new Promise<string>((resolve) => {
      woke = resolve;
    });
    const stop = await listener!.subscribe((cls) => woke(cls));
    try {
      await submitter!.operationSubmitMany([item({ class: 'interactive' })]);
      expect(await wake).toBe('interactive');
    } finally {
      await stop();
    }
  });

  it('listens again by itself after its connection is killed, and says so', async () => {
    const [listener, submitter] = await processes(2);
    const classes: string[] = [];
    const told: string[] = [];
    let woke!: () => void;
    let reconnected!: () => void;
    const back = new Promise<void>((resolve) => {
      reconnected = resolve;
    });
    const wake = new Promise<void>((resolve) => {
      woke = resolve;
    });
    const stop = await listener!.subscribe(
      (cls) => {
        classes.push(cls);
        woke();
      },
      {
        onLost: (error) => told.push(`lost: ${isSluiceError(error) ? error.code : String(error)}`),
        onReconnect: () => {
          told.push('back');
          reconnected();
        },
      },
    );
    expect(told).toEqual([]);
    const admin = await db.client();
    try {
      const killed = await admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE application_name = 'sluice-listen' AND datname = current_database()`,
      );
      expect(killed.rowCount).toBe(1);
      await back;
      // One loss, reported before listening resumed, as the store's stable code.
      expect(told).toEqual(['lost: store-unavailable', 'back']);
      await submitter!.operationSubmitMany([item({ class: 'bulk' })]);
      await wake;
      expect(classes).toEqual(['bulk']);
    } finally {
      await admin.end();
      await stop();
    }
  });
});

describe('wake-ups across an outage at start', () => {
  it('a listener started while the database is unreachable listens once it is back', async () => {
    const [submitter] = await processes(1);
    const link = await tcpRelay(new URL(db.url), { closed: true });
    const listener = postgresStore({
      connectionString: link.url,
      schema: submitter!.context.schema,
      connectTimeoutMs: 2000,
    });
    let reconnected!: () => void;
    const back = new Promise<void>((resolve) => {
      reconnected = resolve;
    });
    let woke!: (cls: string) => void;
    const wake = new Promise<string>((resolve) => {
      woke = resolve;
    });
    // Resolves although nothing answers: it keeps trying in the background, and says it is not
    // listening before it resolves.
    const lost: unknown[] = [];
    const stop = await listener.subscribe((cls) => woke(cls), {
      onLost: (error) => lost.push(error),
      onReconnect: () => reconnected(),
    });
    expect(lost).toHaveLength(1);
    expect(isSluiceError(lost[0]) && lost[0].code).toBe('store-unavailable');
    try {
      link.open();
      await back;
      await submitter!.operationSubmitMany([item({ class: 'bulk' })]);
      expect(await wake).toBe('bulk');
    } finally {
      await stop();
      await listener.close();
      await link.cut();
    }
  });
});

describe('errors', () => {
  it('reports a server that went away as store-unavailable (retryable)', async () => {
    const link = await tcpRelay(new URL(db.url));
    const store = db.store({ connectionString: link.url, poolSize: 2, connectTimeoutMs: 2000 });
    await store.migrate();
    await store.operationSubmitMany([item()]);
    await link.cut();
    const error = await store.operationSubmitMany([item({ id: 'op-2' })]).catch((e: unknown) => e);
    expect(isSluiceError(error) && [error.code, error.retryable]).toEqual(['store-unavailable', true]);
    expect(
      await codeOf(store.operationClaimMany({ class: 'default', owner: 'w', limit: 1, leaseMs: 1 })),
    ).toBe('store-unavailable');
  });

  it('reports a refused connection as store-unavailable', async () => {
    const port = await freePort();
    const store = db.store({ connectionString: `postgres://postgres@127.0.0.1:${port}/x`, poolSize: 1 });
    expect(await codeOf(store.migrate())).toBe('store-unavailable');
    expect(await codeOf(store.operationGet({ tenant: 'a', id: 'b' }))).toBe('store-unavailable');
  });

  it('reports a database that takes no connections (ALLOW_CONNECTIONS false) as store-unavailable', async () => {
    // The server refuses the session with a FATAL of SQLSTATE 55000, a code that elsewhere means
    // a statement's precondition.
    const admin = await db.client();
    const name = `closed_${db.freshSchema()}`;
    try {
      await admin.query(`CREATE DATABASE ${name}`);
      await admin.query(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`);
      const url = new URL(db.url);
      url.pathname = `/${name}`;
      const store = db.store({ connectionString: url.href, poolSize: 1 });
      const error = await store.operationGet({ tenant: 'a', id: 'b' }).catch((e: unknown) => e);
      expect(isSluiceError(error) && [error.code, error.retryable]).toEqual(['store-unavailable', true]);
      expect((error as Error).message).toMatch(/not currently accepting connections/);
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${name}`);
      await admin.end();
    }
  });

  it('reports a connection the server terminated mid-statement as store-unavailable, then recovers', async () => {
    const [store] = await processes(1);
    // Settled into a value at once: its rejection may arrive before the test looks at it.
    const slow = store!.context.query("SELECT pg_sleep(30), 'sluice-slow'").then(
      () => 'resolved',
      (error: unknown) => (isSluiceError(error) ? error.code : 'unclassified'),
    );
    const admin = await db.client();
    try {
      // Wait until the statement is running on the server (each check is a round trip).
      let pid: number | undefined;
      while (pid === undefined) {
        const { rows } = await admin.query(
          `SELECT pid FROM pg_stat_activity WHERE query LIKE '%sluice-slow%' AND state = 'active' AND pid <> pg_backend_pid()`,
        );
        pid = rows[0]?.pid;
      }
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      expect(await slow).toBe('store-unavailable');
      await store!.operationSubmitMany([item()]);
      expect((await store!.operationGet({ tenant: 'North', id: 'op-1' }))?.state).toBe('queued');
    } finally {
      await admin.end();
    }
  });

  it('reports a statement cut by statement_timeout as store-statement-timeout', async () => {
    const store = db.store({ statementTimeoutMs: 50 });
    expect(await codeOf(store.context.query('SELECT pg_sleep(5)'))).toBe('store-statement-timeout');
  });

  it('classifies SQLSTATEs and socket errors into the closed set', () => {
    const reason = (e: unknown) => {
      const c = classifyPgError(e);
      return isSluiceError(c) ? c.code : 'unclassified';
    };
    const pgError = (code: string) => Object.assign(new Error(code), { code });
    expect(reason(pgError('08006'))).toBe('store-unavailable');
    expect(reason(pgError('57P01'))).toBe('store-unavailable');
    expect(reason(pgError('57P03'))).toBe('store-unavailable');
    for (const code of ['25006', '3D000', '28000', '28P01', '53100', '53200', '57P05', '25P03'])
      expect([code, reason(pgError(code))]).toEqual([code, 'store-unavailable']);
    expect(reason(pgError('40001'))).toBe('store-serialization');
    expect(reason(pgError('40P01'))).toBe('store-serialization');
    expect(reason(pgError('55P03'))).toBe('store-busy');
    expect(reason(pgError('57014'))).toBe('store-statement-timeout');
    expect(reason(pgError('23505'))).toBe('store-unique-violation');
    // Only the store's own statements come here: a table, function or column of its schema missing.
    for (const code of ['3F000', '42P01', '42883', '42703'])
      expect([code, reason(pgError(code))]).toEqual([code, 'store-not-migrated']);
    expect(reason(pgError('42601'))).toBe('store-unknown');
    // A database closed to connections refuses the login with a 55000: the same code as an ERROR
    // is a statement's precondition, and other FATALs at login are settings to fix, not outages.
    const fatal = (code: string, routine?: string) =>
      Object.assign(pgError(code), { severity: 'FATAL', routine });
    expect(reason(fatal('55000'))).toBe('store-unavailable');
    expect(reason(Object.assign(pgError('55000'), { severity: 'FATALE', routine: 'CheckMyDatabase' }))).toBe(
      'store-unavailable',
    );
    expect(reason(pgError('55000'))).toBe('store-unknown');
    expect(reason(fatal('22023', 'parse_and_validate_value'))).toBe('store-unknown');
    expect(reason(fatal('42704'))).toBe('store-unknown');
    expect(reason(pgError('57P04'))).toBe('store-unavailable');
    expect(reason(fatal('42P01'))).toBe('store-not-migrated');
    expect(reason(pgError('ECONNRESET'))).toBe('store-unavailable');
    expect(reason(new Error('Connection terminated unexpectedly'))).toBe('store-unavailable');
    expect(reason(new TypeError('not a database error'))).toBe('unclassified');
  });
});

describe("a claim's time", () => {
  it("is the server's, never this host's in its place", () => {
    // The statements answer a row with the server's time whether or not they claimed anything;
    // without one, the attempts' deadlines would be counted from this host's clock.
    expect(() => claimResultOf([])).toThrow(/without the server's time/);
    expect(
      claimResultOf([{ claim_now: '1700000000000', claim_contended: false, claim_capped: null, seq: null }])
        .now,
    ).toBe(1_700_000_000_000);
  });
});
