/**
 * `sluice.submitMany`: many requests in one store call, each checked as `submit` checks it and
 * answered in its place, on both stores; its bound of 1,000 requests at the edge; inside the
 * caller's transaction on each store.
 */
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  CapacityExceeded,
  MAX_SUBMIT_MANY,
  type SluiceOptions,
  type SubmitManyResult,
  type SubmitRequest,
} from '../../src/index.js';
import { type Harness, harness } from '../helpers/engine.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();
const open: Harness[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((h) => h.close()));
});

const stores = {
  sqlite: (sluice?: Partial<SluiceOptions>) => harness({ sluice }),
  postgres: (sluice?: Partial<SluiceOptions>) =>
    harness({ store: db.store({ schema: db.freshSchema(), poolSize: 2 }), sluice }),
};

async function engine(store: keyof typeof stores, sluice?: Partial<SluiceOptions>): Promise<Harness> {
  const h = await stores[store](sluice);
  open.push(h);
  h.sluice.define('charge', {
    input: z.object({ amount: z.number().int().positive() }),
    limits: { maxInputBytes: 100 },
    run: () => 'ok',
  });
  return h;
}

const charge = (id: string, amount = 5, tenant = 'North'): SubmitRequest => ({
  tenant,
  id,
  kind: 'charge',
  input: { amount },
});

/** Each answer as `created`, `existing` or the refusal's code, in order. */
const summary = (results: SubmitManyResult[]) =>
  results.map((r) =>
    r.ok ? (r.created ? `created ${r.operation.id}` : `existing ${r.operation.id}`) : r.error.code,
  );

describe.each(['sqlite', 'postgres'] as const)('submitMany on %s', (store) => {
  it('answers each request in its place; a refusal refuses only itself', async () => {
    const h = await engine(store);
    const events: string[] = [];
    h.sluice.events.on('submitted', (e) => events.push(`submitted ${e.id} ${e.created}`));
    h.sluice.events.on('rejected', (e) => events.push(`rejected ${e.tenant} ${e.reason}`));
    const results = await h.sluice.submitMany([
      charge('a'),
      charge('a'),
      charge('a', 6),
      { tenant: 'North', id: 'x', kind: 'refund', input: {} },
      charge('neg', -1),
      { ...charge('big'), input: { amount: 1, note: 'n'.repeat(200) } },
      charge('', 5),
      { ...charge('nan'), input: { amount: Number.NaN } },
      null as unknown as SubmitRequest,
      charge('b', 7, 'South'),
    ]);
    expect(summary(results)).toEqual([
      'created a',
      'existing a',
      'idempotency-key-reused',
      'kind-unknown',
      'input-invalid',
      'input-too-large',
      'invalid-argument',
      'input-not-json',
      'invalid-argument',
      'created b',
    ]);
    const a = results[0]!;
    expect(a.ok && a.operation).toMatchObject({
      tenant: 'North',
      id: 'a',
      state: 'queued',
      input: { amount: 5 },
    });
    expect((await h.sluice.get({ tenant: 'South', id: 'b' }))?.input).toEqual({ amount: 7 });
    const { operations } = await h.sluice.list();
    expect(operations.map((o) => o.id).sort()).toEqual(['a', 'b']);
    expect(events).toEqual([
      'rejected North kind-unknown',
      'rejected North input-invalid',
      'rejected North input-too-large',
      'rejected North invalid-argument',
      'rejected North input-not-json',
      'rejected  invalid-argument',
      'submitted a true',
      'submitted a false',
      'rejected North idempotency-key-reused',
      'submitted b true',
    ]);
    // What it accepted runs like any submit's operation.
    h.worker().start();
    expect((await h.sluice.wait({ tenant: 'South', id: 'b' })).result).toBe('ok');
  });

  it(`takes ${MAX_SUBMIT_MANY} requests in one call and refuses one more, accepting none`, async () => {
    const h = await engine(store);
    const many = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => charge(`${prefix}${i}`));
    const refused = await h.sluice.submitMany(many('over-', MAX_SUBMIT_MANY + 1)).catch((e) => e);
    expect(refused.code).toBe('invalid-argument');
    expect(refused.message).toContain(`${MAX_SUBMIT_MANY + 1}`);
    expect((await h.sluice.list()).operations).toEqual([]);
    const results = await h.sluice.submitMany(many('op-', MAX_SUBMIT_MANY));
    expect(results.filter((r) => r.ok && r.created)).toHaveLength(MAX_SUBMIT_MANY);
    expect(await h.store.queueStats()).toEqual([
      { class: 'default', tenant: 'North', waiting: MAX_SUBMIT_MANY, running: 0 },
    ]);
    expect(await h.sluice.submitMany([])).toEqual([]);
    const notArray = await h.sluice.submitMany({} as unknown as SubmitRequest[]).catch((e) => e);
    expect(notArray.code).toBe('invalid-argument');
  });

  it("refuses what goes past a tenant's waiting cap, in place, with a time to retry after", async () => {
    const h = await engine(store, { tenants: { North: { '*': { maxWaiting: 3 } } } });
    await h.sluice.submit(charge('first'));
    const results = await h.sluice.submitMany([
      charge('a'),
      charge('b'),
      charge('s', 5, 'South'),
      charge('c'),
      charge('d'),
    ]);
    expect(summary(results)).toEqual([
      'created a',
      'created b',
      'created s',
      'tenant-queue-full',
      'tenant-queue-full',
    ]);
    const full = results[3]!;
    expect(full.ok).toBe(false);
    if (!full.ok) {
      expect(full.error).toBeInstanceOf(CapacityExceeded);
      expect((full.error as CapacityExceeded).retryAfterMs).toBeGreaterThan(0);
      expect(full.error.message).toContain('has 3 operations waiting');
    }
    expect(await h.sluice.get({ tenant: 'North', id: 'c' })).toBeUndefined();
  });
});

describe("submitMany inside the caller's transaction", () => {
  it('on SQLite: nothing when it rolls back, every accepted one when it commits', async () => {
    const h = await engine('sqlite');
    const app = new Database(h.dbPath);
    try {
      app.pragma('busy_timeout = 5000');
      app.exec('BEGIN IMMEDIATE');
      expect(summary(await h.sluice.submitMany([charge('a'), charge('b')], { tx: app }))).toEqual([
        'created a',
        'created b',
      ]);
      app.exec('ROLLBACK');
      expect((await h.sluice.list()).operations).toEqual([]);
      expect(await h.store.queueStats()).toEqual([]);
      app.exec('BEGIN IMMEDIATE');
      const results = await h.sluice.submitMany([charge('a'), charge('bad', 0), charge('b')], { tx: app });
      expect(summary(results)).toEqual(['created a', 'input-invalid', 'created b']);
      app.exec('COMMIT');
      expect((await h.sluice.list()).operations.map((o) => o.id).sort()).toEqual(['a', 'b']);
    } finally {
      app.close();
    }
  });

  it('on PostgreSQL: one call in the open transaction, nothing when it rolls back', async () => {
    const h = await engine('postgres');
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    try {
      const requests = Array.from({ length: 300 }, (_, i) => charge(`op-${i}`, 1, `T${i % 7}`));
      await client.query('BEGIN');
      const results = await h.sluice.submitMany(requests, { tx: client });
      expect(results.every((r) => r.ok && r.created)).toBe(true);
      await client.query('ROLLBACK');
      expect((await h.sluice.list()).operations).toEqual([]);
      expect(await h.store.queueStats()).toEqual([]);
      await client.query('BEGIN');
      await h.sluice.submitMany(requests, { tx: client });
      await client.query('COMMIT');
      expect((await h.sluice.list({ limit: 500 })).operations).toHaveLength(300);
      const waiting = (await h.store.queueStats()).reduce((n, s) => n + s.waiting, 0);
      expect(waiting).toBe(300);
    } finally {
      await client.end();
    }
  });
});
