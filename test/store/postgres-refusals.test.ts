/**
 * PostgreSQL: a refused submit leaves the queue rows as it found them. SQLite checks both caps
 * before it writes anything; PostgreSQL's submit functions count the tenant in first (one
 * statement on the accepted path) and take the refusal back when the class turns out full. The
 * take-back undid the count alone: a tenant with nothing waiting was left marked ready (the
 * claims found it and nothing in it) with its virtual time moved, a tenant whose work was all
 * delayed was marked due now, and a tenant never seen before kept a queue row that no purge
 * removes (the purge forgets a tenant with its last operation, and this one had none). A tenant
 * refused by its own cap of 0 left such a row too. Each function (one item, a batch, a batch
 * naming an id twice), in and out of the caller's transaction, is checked against the table
 * itself.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { PostgresStore } from '../../src/store/postgres/index.js';
import type { SubmitOutcome, SubmitParams } from '../../src/store/types.js';
import {
  claimOne,
  expectCountersTrue,
  leaseOf,
  submitCreated,
  submitParams,
} from '../conformance/fixtures.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();
afterEach(() => db.closeStores());

const HOUR = 3_600_000;
const limits = { maxQueued: 4, maxWaiting: 3, maxRunning: 5, weight: 1 };
type Item = Parameters<typeof submitParams>[0];

/** A store whose class `default` is full (4 waiting), beside tenants in every state a row has. */
async function fullClass(): Promise<{ store: PostgresStore; schema: string }> {
  const schema = db.freshSchema();
  const store = db.store({ schema });
  await store.migrate();
  // Idle: one operation, run and ended; its row stays (the tenant has an operation) with nothing
  // waiting, not ready, its virtual time moved by the claim.
  await submitCreated(store, { tenant: 'Idle', id: 'i1', limits });
  const row = await claimOne(store);
  expect(await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'succeeded', result: 1 }])).toEqual([
    true,
  ]);
  // Later: all its work delayed by an hour, so not due before then.
  await submitCreated(store, { tenant: 'Later', id: 'l1', limits, delayMs: HOUR });
  await submitCreated(store, { tenant: 'Busy', id: 'b1', limits });
  await submitCreated(store, { tenant: 'Busy', id: 'b2', limits });
  await submitCreated(store, { tenant: 'Busy', id: 'b3', limits });
  return { store, schema };
}

async function table(schema: string, name: 'queues' | 'classes'): Promise<unknown[]> {
  const c = await db.client();
  try {
    return (await c.query(`SELECT * FROM "${schema}".${name} ORDER BY 1, 2`)).rows;
  } finally {
    await c.end();
  }
}

const reasons = (out: SubmitOutcome[]) => out.map((o) => (o.status === 'rejected' ? o.reason : o.status));

describe('PostgreSQL: a refused submit writes nothing to the queue rows', () => {
  const refusedByTheClass: Array<[string, Item[]]> = [
    ['one item, a tenant with nothing waiting', [{ tenant: 'Idle', id: 'i2', limits }]],
    ['one item, a tenant whose work is all delayed', [{ tenant: 'Later', id: 'l2', limits }]],
    ['one item, a tenant never seen', [{ tenant: 'New', id: 'n1', limits }]],
    [
      'a batch of three tenants',
      [
        { tenant: 'Idle', id: 'i2', limits },
        { tenant: 'Later', id: 'l2', limits },
        { tenant: 'New', id: 'n1', limits },
      ],
    ],
    [
      'a batch naming an id twice',
      [
        { tenant: 'New', id: 'n1', limits },
        { tenant: 'New', id: 'n1', limits },
        { tenant: 'Idle', id: 'i2', limits },
      ],
    ],
  ];

  for (const [name, items] of refusedByTheClass) {
    for (const inTx of [false, true]) {
      it(`class-queue-full, ${name}${inTx ? ', in the caller’s transaction' : ''}`, async () => {
        const { store, schema } = await fullClass();
        const queues = await table(schema, 'queues');
        const classes = await table(schema, 'classes');
        const params: SubmitParams[] = items.map((i) => submitParams(i));
        let out: SubmitOutcome[];
        if (inTx) {
          const c = await db.client();
          try {
            await c.query('BEGIN');
            out = await store.operationSubmitMany(params, { tx: c });
            await c.query('COMMIT');
          } finally {
            await c.end();
          }
        } else {
          out = await store.operationSubmitMany(params);
        }
        // Every item refused by the class (a repeated id is answered as its first was).
        expect(new Set(reasons(out))).toEqual(new Set(['class-queue-full']));
        expect(await table(schema, 'queues')).toEqual(queues);
        expect(await table(schema, 'classes')).toEqual(classes);
        await expectCountersTrue(store);
      });
    }
  }

  it('tenant-queue-full at a cap of 0 leaves no row for a tenant never seen, alone or in a batch', async () => {
    const { store, schema } = await fullClass();
    const queues = await table(schema, 'queues');
    const blocked = { ...limits, maxQueued: null, maxWaiting: 0 };
    expect(
      reasons(await store.operationSubmitMany([submitParams({ tenant: 'Zero', id: 'z1', limits: blocked })])),
    ).toEqual(['tenant-queue-full']);
    expect(
      reasons(
        await store.operationSubmitMany([
          submitParams({ tenant: 'Zero', id: 'z1', limits: blocked }),
          submitParams({ tenant: 'Zero2', id: 'z1', limits: blocked }),
        ]),
      ),
    ).toEqual(['tenant-queue-full', 'tenant-queue-full']);
    expect(await table(schema, 'queues')).toEqual(queues);
  });

  it('a batch that is partly accepted keeps the rows of what it accepted, and only those', async () => {
    const { store, schema } = await fullClass();
    // Room for one more in `default`, none in its own cap for `Capped`, and a new class.
    const row = await claimOne(store);
    expect(row.tenant).toBe('Busy');
    const out = await store.operationSubmitMany([
      submitParams({ tenant: 'Fresh', id: 'f1', limits }),
      submitParams({ tenant: 'Fresh2', id: 'f1', limits }),
      submitParams({ tenant: 'Other', id: 'o1', class: 'other', limits }),
    ]);
    expect(reasons(out)).toEqual(['created', 'class-queue-full', 'created']);
    const tenants = ((await table(schema, 'queues')) as Array<{ tenant: string }>).map((q) => q.tenant);
    expect(tenants).toContain('Fresh');
    expect(tenants).toContain('Other');
    expect(tenants).not.toContain('Fresh2');
    await expectCountersTrue(store);
  });

  it("forgets, at a later purge, a tenant's row a transaction held while its last operation was purged", async () => {
    const schema = db.freshSchema();
    const store = db.store({ schema });
    await store.migrate();
    const capped = { maxQueued: 1 };
    // A's only operation, ended; then B fills the class.
    await submitCreated(store, { tenant: 'A', id: 'a1', limits: capped });
    const row = await claimOne(store);
    await store.attemptFinishMany([{ lease: leaseOf(row), outcome: 'succeeded', result: 1 }]);
    await submitCreated(store, { tenant: 'B', id: 'b1', limits: capped });
    // A transaction submits for A (refused by the class) and holds A's row while the purge runs.
    const c = await db.client();
    try {
      await c.query('BEGIN');
      const [refused] = await store.operationSubmitMany(
        [submitParams({ tenant: 'A', id: 'a2', limits: capped })],
        {
          tx: c,
        },
      );
      expect(refused).toMatchObject({ status: 'rejected', reason: 'class-queue-full' });
      const first = await store.retentionPurge({ retentionMs: 0, tombstoneMs: 86_400_000, limit: 50 });
      expect([first.purged, first.queuesDeleted]).toEqual([1, 0]);
      await c.query('COMMIT');
    } finally {
      await c.end();
    }
    // A has no operation left; the next pass, which purges nothing of A's, forgets its row.
    const second = await store.retentionPurge({ retentionMs: 0, tombstoneMs: 86_400_000, limit: 50 });
    expect(second.queuesDeleted).toBe(1);
    const tenants = ((await table(schema, 'queues')) as Array<{ tenant: string }>).map((q) => q.tenant);
    expect(tenants).toEqual(['B']);
  });

  it('clears, once, the rows refused submits of earlier versions left', async () => {
    const schema = db.freshSchema();
    const store = db.store({ schema });
    await store.migrate();
    await submitCreated(store, { tenant: 'Busy', id: 'b1' });
    // As version 31 left them: a row of a tenant never accepted, and one marked ready with nothing
    // waiting; version 32 struck off, so that the next migrate applies it again.
    const c = await db.client();
    try {
      await c.query(`INSERT INTO "${schema}".queues (class, tenant, vtime) VALUES ('default', 'Refused', 3)`);
      await c.query(`INSERT INTO "${schema}".queues (class, tenant, ready_at) VALUES ('other', 'Busy', 1)`);
      await c.query(`DROP FUNCTION "${schema}".queue_take_back, "${schema}".queues_forget_made`);
      await c.query(`DELETE FROM "${schema}".migrations WHERE version = 32`);
    } finally {
      await c.end();
    }
    await db.store({ schema }).migrate();
    const rows = (await table(schema, 'queues')) as Array<{
      class: string;
      tenant: string;
      ready_at: unknown;
    }>;
    expect(rows.map((r) => [r.class, r.tenant, r.ready_at === null])).toEqual([
      ['default', 'Busy', false],
      ['other', 'Busy', true],
    ]);
    await expectCountersTrue(store);
  });
});
