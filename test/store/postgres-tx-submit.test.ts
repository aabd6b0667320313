/**
 * Transactional submit on PostgreSQL, at engine level: `sluice.submit(request, { tx: client })`
 * with the application's own `pg` client, inside the application's own transaction, next to its
 * business write. The operation is accepted if and only if that transaction commits — the outbox
 * pattern with no outbox. (The SQLite form is test/engine/transactional-submit.test.ts; the
 * store-level form is in test/store/postgres-basics.test.ts.)
 *
 * What store/postgres/submit.ts does with `tx`: it runs its one statement on the caller's client
 * with no BEGIN, COMMIT or retry of its own. A client that has not begun a transaction, whose
 * submit would commit at once, and a pool are invalid arguments, as is anything without
 * `query()`; a client whose transaction already failed gets the server's refusal, classified as a
 * store error.
 */
import pg from 'pg';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  isInvalidArgument,
  isOperationConflict,
  isStoreError,
  type PostgresStore,
  type Store,
} from '../../src/index.js';
import { ProviderStub } from '../../src/testing/index.js';
import { submitParams } from '../conformance/fixtures.js';
import { defineCharge } from '../helpers/charge-kind.js';
import { type Harness, harness } from '../helpers/engine.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();
let h: Harness | undefined;
let provider: ProviderStub;
const clients: pg.Client[] = [];

beforeAll(async () => {
  const c = await db.client();
  // The application's own table, outside Sluice's schemas (this file has its own database).
  await c.query('CREATE TABLE invoices (id integer PRIMARY KEY, amount_cents integer NOT NULL)');
  await c.end();
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((c) => c.end().catch(() => {})));
  await h?.close();
  h = undefined;
});

/** An engine on a fresh schema, with the charge kind; no worker started. */
async function engine(): Promise<Harness> {
  h = await harness({ store: db.store({ poolSize: 4 }) });
  provider = new ProviderStub();
  defineCharge(h.sluice, provider);
  return h;
}

/** The application's own connection (not the store's pool). */
async function appClient(): Promise<pg.Client> {
  const c = await db.client();
  clients.push(c);
  return c;
}

const request = (id: string, invoice: number) => ({
  tenant: 'North',
  id,
  kind: 'charge',
  input: { invoice, amount_cents: 5000 },
});

const invoiceExists = async (c: pg.Client, id: number) =>
  (await c.query('SELECT 1 FROM invoices WHERE id = $1', [id])).rowCount === 1;

describe('transactional submit (PostgreSQL, engine level)', () => {
  it('commits with the business write: invisible until COMMIT, then run once by a worker', async () => {
    const { sluice, store } = await engine();
    // Running from the start: it is woken by the submit, yet cannot see uncommitted work.
    sluice.worker().start();
    const app = await appClient();
    await app.query('BEGIN');
    await app.query('INSERT INTO invoices (id, amount_cents) VALUES (101, 5000)');
    const { created, operation } = await sluice.submit(request('mail-101', 101), { tx: app });
    expect([created, operation.state]).toEqual([true, 'queued']);
    // Outside the transaction, nothing yet: not the operation, not a queue counter.
    expect(await sluice.get({ tenant: 'North', id: 'mail-101' })).toBeUndefined();
    expect(await store.queueStats()).toEqual([]);
    const [{ now: beforeCommit }] = (
      await app.query<{ now: string }>('SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now')
    ).rows as [{ now: string }];
    await app.query('COMMIT');

    const done = await sluice.wait({ tenant: 'North', id: 'mail-101' }, { timeoutMs: 20_000 });
    expect([done.state, done.result]).toEqual(['succeeded', { charge: 'ch_1' }]);
    const full = await sluice.get({ tenant: 'North', id: 'mail-101' }, { include: ['attempts'] });
    expect(full?.attempts?.map((a) => a.outcome)).toEqual(['succeeded']);
    // The one attempt started only after the transaction was about to commit.
    expect(Date.parse(full!.attempts![0]!.startedAt)).toBeGreaterThanOrEqual(Number(beforeCommit));
    expect(provider.calls).toBe(1);
    expect(await invoiceExists(app, 101)).toBe(true);
    expect(await store.queueStats()).toEqual([{ class: 'default', tenant: 'North', waiting: 0, running: 0 }]);
  });

  it('rolls back with the business write: no operation, no counter change, the id still free', async () => {
    const { sluice, store } = await engine();
    // Another operation of the tenant already waits (delayed), so its queue counter row exists.
    await sluice.submit({ ...request('other', 1), delayMs: 1_800_000 });
    const counters = await store.queueStats();
    expect(counters).toEqual([{ class: 'default', tenant: 'North', waiting: 1, running: 0 }]);

    const app = await appClient();
    await app.query('BEGIN');
    await app.query('INSERT INTO invoices (id, amount_cents) VALUES (102, 5000)');
    const { created } = await sluice.submit(request('mail-102', 102), { tx: app });
    expect(created).toBe(true);
    await app.query('ROLLBACK');

    expect(await sluice.get({ tenant: 'North', id: 'mail-102' })).toBeUndefined();
    expect(await invoiceExists(app, 102)).toBe(false);
    expect(await store.queueStats()).toEqual(counters);
    expect((await sluice.list()).operations.map((o) => o.id)).toEqual(['other']);

    // Nothing was accepted, so the id is free: a plain submit creates it, and it runs once.
    sluice.worker().start();
    expect((await sluice.submit(request('mail-102', 102))).created).toBe(true);
    const done = await sluice.wait({ tenant: 'North', id: 'mail-102' }, { timeoutMs: 20_000 });
    expect(done.state).toBe('succeeded');
    expect(provider.calls).toBe(1);
  });

  it('serialises racing transactions on one id: the second is created if the first rolls back', async () => {
    const { sluice } = await engine();
    const [first, second] = [await appClient(), await appClient()];
    await first.query('BEGIN');
    expect((await sluice.submit(request('race-1', 1), { tx: first })).created).toBe(true);
    await second.query('BEGIN');
    const secondSubmit = sluice.submit(request('race-1', 1), { tx: second });
    // The second waits on the first's uncommitted row locks (seen by the server, not guessed).
    await waitUntilBlocked(second);
    await first.query('ROLLBACK');
    expect((await secondSubmit).created).toBe(true);
    await second.query('COMMIT');
    expect((await sluice.list()).operations.map((o) => [o.id, o.state])).toEqual([['race-1', 'queued']]);
  });

  it('serialises racing transactions on one id: the second finds it if the first commits', async () => {
    const { sluice, store } = await engine();
    const [first, second] = [await appClient(), await appClient()];
    await first.query('BEGIN');
    expect((await sluice.submit(request('race-2', 2), { tx: first })).created).toBe(true);
    await second.query('BEGIN');
    const secondSubmit = sluice.submit(request('race-2', 2), { tx: second });
    await waitUntilBlocked(second);
    await first.query('COMMIT');
    const answer = await secondSubmit;
    expect([answer.created, answer.operation.id]).toEqual([false, 'race-2']);
    await second.query('COMMIT');
    expect((await sluice.list()).operations).toHaveLength(1);
    expect(await store.queueStats()).toEqual([{ class: 'default', tenant: 'North', waiting: 1, running: 0 }]);
  });

  it('answers a conflict inside the transaction without spoiling it: the business write still commits', async () => {
    const { sluice } = await engine();
    await sluice.submit(request('mail-103', 103));
    const app = await appClient();
    await app.query('BEGIN');
    await app.query('INSERT INTO invoices (id, amount_cents) VALUES (103, 5000)');
    const conflict = await sluice
      .submit({ ...request('mail-103', 103), input: { invoice: 103, amount_cents: 1 } }, { tx: app })
      .catch((e) => e);
    expect(isOperationConflict(conflict)).toBe(true);
    // Same id, same input: the existing operation, from inside the transaction.
    expect((await sluice.submit(request('mail-103', 103), { tx: app })).created).toBe(false);
    await app.query('COMMIT');
    expect(await invoiceExists(app, 103)).toBe(true);
    const op = await sluice.get({ tenant: 'North', id: 'mail-103' });
    expect(op?.input).toEqual({ invoice: 103, amount_cents: 5000 });
    expect((await sluice.list()).operations).toHaveLength(1);
  });

  it('leaves the class free while the transaction stays open: other tenants submit, workers claim', async () => {
    const { sluice, store } = await engine();
    const app = await appClient();
    await app.query('BEGIN');
    expect((await sluice.submit(request('held-1', 1), { tx: app })).created).toBe(true);
    // From here to its COMMIT the transaction stays open. Until migration 31 it held the class's
    // counter row, and this submit and every claim of the class waited for it.
    sluice.worker().start();
    expect((await sluice.submit({ ...request('free-1', 2), tenant: 'South' })).created).toBe(true);
    const free = await sluice.wait({ tenant: 'South', id: 'free-1' }, { timeoutMs: 20_000 });
    expect(free.state).toBe('succeeded');
    expect(await store.classStats()).toEqual([{ class: 'default', waiting: 0 }]);

    await app.query('COMMIT');
    const held = await sluice.wait({ tenant: 'North', id: 'held-1' }, { timeoutMs: 20_000 });
    expect(held.state).toBe('succeeded');
    expect(provider.calls).toBe(2);
    // Counted in as a delta, counted out of the class row by its claim: none waiting in all.
    expect(await store.classStats()).toEqual([{ class: 'default', waiting: 0 }]);
    expect(await deltas(store)).toEqual([{ waiting: 1 }]);
  });

  it("counts the class's bound with the committed deltas, and the workers' fold moves them in", async () => {
    h = await harness({
      store: db.store({ poolSize: 4 }),
      sluice: { classes: { default: { maxQueued: 4 } } },
    });
    provider = new ProviderStub();
    defineCharge(h.sluice, provider);
    const { sluice, store } = h;
    const [app, other] = [await appClient(), await appClient()];
    await app.query('BEGIN');
    const batch = await sluice.submitMany([request('b-1', 1), request('b-2', 2)], { tx: app });
    expect(batch.map((r) => r.ok)).toEqual([true, true]);
    expect((await sluice.submit(request('b-3', 3), { tx: app })).created).toBe(true);
    await app.query('COMMIT');
    // One delta row for the transaction's backend, and no class row yet (the class is new): the
    // readers find the class by its deltas.
    expect(await deltas(store)).toEqual([{ waiting: 3 }]);
    expect(await classRow(store)).toBeUndefined();
    expect(await store.classStats()).toEqual([{ class: 'default', waiting: 3 }]);
    expect(await store.queueStats({ tenant: 'North' })).toEqual([
      { class: 'default', tenant: 'North', waiting: 3, running: 0 },
    ]);

    // A fourth in a transaction left open: the fold skips the row that transaction holds.
    await other.query('BEGIN');
    expect((await sluice.submit(request('b-4', 4), { tx: other })).created).toBe(true);
    await store.countersFold?.();
    expect(await classRow(store)).toBe(3);
    expect(await deltas(store)).toEqual([]);
    await other.query('COMMIT');
    expect(await deltas(store)).toEqual([{ waiting: 1 }]);
    expect(await store.classStats()).toEqual([{ class: 'default', waiting: 4 }]);

    // Full, counted either way: refused inside a transaction and outside one.
    await app.query('BEGIN');
    const inside = await sluice.submit(request('b-5', 5), { tx: app }).catch((e) => e);
    await app.query('ROLLBACK');
    const outside = await sluice.submit(request('b-6', 6)).catch((e) => e);
    expect([inside.code, outside.code]).toEqual(['class-queue-full', 'class-queue-full']);

    await store.countersFold?.();
    expect(await deltas(store)).toEqual([]);
    expect(await classRow(store)).toBe(4);
    expect(await store.classStats()).toEqual([{ class: 'default', waiting: 4 }]);
    const again = await sluice.submit(request('b-6', 6)).catch((e) => e);
    expect(again.code).toBe('class-queue-full');
  });

  it('folds without waiting for a transaction that holds a class row, one class at a time', async () => {
    const { store } = await engine();
    const app = await appClient();
    // Deltas in two classes, committed.
    await app.query('BEGIN');
    await store.operationSubmitMany(
      [submitParams({ id: 'd-1', class: 'default' }), submitParams({ id: 'b-1', class: 'bulk' })],
      { tx: app },
    );
    await app.query('COMMIT');
    // Another transaction holds the default class's row, as a submit of a build before migration
    // 31 held it inside its caller's transaction (the bulk class has no row yet).
    await store.operationSubmitMany([submitParams({ id: 'd-0', class: 'default' })]);
    const holder = await appClient();
    await holder.query('BEGIN');
    await holder.query(`UPDATE ${schemaOf(store)}.classes SET waiting = waiting WHERE class = 'default'`);
    // The fold passes the held class by and folds the other, making its row.
    expect(await store.countersFold?.()).toBe(1);
    expect(await deltas(store)).toEqual([{ waiting: 1 }]);
    await holder.query('COMMIT');
    expect(await store.countersFold?.()).toBe(1);
    expect(await deltas(store)).toEqual([]);
    expect(await store.classStats()).toEqual([
      { class: 'bulk', waiting: 1 },
      { class: 'default', waiting: 2 },
    ]);
  });

  it("refuses, as a wrong argument, a client of another database than the store's", async () => {
    const { sluice } = await engine();
    // The server's `postgres` database: the application's own, say, where no Sluice schema is.
    const url = new URL(db.url);
    url.pathname = '/postgres';
    const other = new pg.Client({ connectionString: url.toString() });
    await other.connect();
    clients.push(other);
    await other.query('BEGIN');
    const refused = await sluice.submit(request('elsewhere-1', 1), { tx: other }).catch((e) => e);
    await other.query('ROLLBACK');
    expect([isInvalidArgument(refused), refused.message]).toEqual([
      true,
      expect.stringMatching(/^tx: the connection given does not reach the store's schema/),
    ]);
    expect(await sluice.get({ tenant: 'North', id: 'elsewhere-1' })).toBeUndefined();
  });

  it('refuses a client outside any transaction, and a pool: nothing is stored, the client still usable', async () => {
    const { sluice, store } = await engine();
    const app = await appClient();
    // Without BEGIN the submit would commit on its own at once, whatever the application did next.
    const idle = await sluice.submit(request('auto-1', 1), { tx: app }).catch((e) => e);
    expect([isInvalidArgument(idle), idle.message]).toEqual([
      true,
      expect.stringMatching(/has not begun one \(BEGIN, awaited\)/),
    ]);
    // A pool runs each query on whichever connection is free, each in a transaction of its own.
    const pool = new pg.Pool({ connectionString: db.url, max: 1 });
    try {
      const pooled = await sluice.submit(request('auto-2', 2), { tx: pool as never }).catch((e) => e);
      expect([isInvalidArgument(pooled), pooled.message]).toEqual([
        true,
        expect.stringMatching(/not a pool$/),
      ]);
    } finally {
      await pool.end();
    }
    expect(await sluice.get({ tenant: 'North', id: 'auto-1' })).toBeUndefined();
    expect(await sluice.get({ tenant: 'North', id: 'auto-2' })).toBeUndefined();
    expect(await store.queueStats()).toEqual([]);
    // The same client, once it has begun a transaction, is taken.
    await app.query('BEGIN');
    expect((await sluice.submit(request('auto-1', 1), { tx: app })).created).toBe(true);
    await app.query('COMMIT');
    expect((await sluice.get({ tenant: 'North', id: 'auto-1' }))?.state).toBe('queued');
  });

  it('refuses a transaction that already failed, and one that is no client: nothing is stored', async () => {
    const { sluice, store } = await engine();
    const app = await appClient();
    await app.query('BEGIN');
    await expect(app.query('SELECT 1 / 0')).rejects.toThrow();
    const refused = await sluice.submit(request('bad-1', 1), { tx: app }).catch((e) => e);
    // 25P02 (in_failed_sql_transaction): a store error, and not worth retrying as is.
    expect(isStoreError(refused)).toBe(true);
    expect(refused.retryable).toBe(false);
    await app.query('ROLLBACK');

    const notAClient = await sluice.submit(request('bad-2', 2), { tx: {} as never }).catch((e) => e);
    expect(isInvalidArgument(notAClient)).toBe(true);

    expect(await sluice.get({ tenant: 'North', id: 'bad-1' })).toBeUndefined();
    expect(await sluice.get({ tenant: 'North', id: 'bad-2' })).toBeUndefined();
    expect(await store.queueStats()).toEqual([]);
  });
});

/** The class deltas of transactional submits not yet folded into the class row. */
const deltas = (store: Store) =>
  (store as PostgresStore).context.query<{ waiting: number }>(
    'SELECT waiting FROM {s}.class_deltas ORDER BY backend',
  );

/** The store's schema, quoted. */
const schemaOf = (store: Store) => `"${(store as PostgresStore).context.schema}"`;

/** The class row's own count, without the deltas. */
const classRow = async (store: Store) =>
  (await (store as PostgresStore).context.query<{ waiting: number }>('SELECT waiting FROM {s}.classes'))[0]
    ?.waiting;

/** Resolves once the server reports `client`'s backend waiting on a lock; fails after a guard. */
async function waitUntilBlocked(client: pg.Client, guardMs = 10_000): Promise<void> {
  const pid = (client as unknown as { processID: number }).processID;
  const observer = await appClient();
  const deadline = performance.now() + guardMs;
  for (;;) {
    const { rows } = await observer.query(
      `SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`,
      [pid],
    );
    if (rows.length === 1) return;
    if (performance.now() > deadline) throw new Error(`backend ${pid} did not block in ${guardMs} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
