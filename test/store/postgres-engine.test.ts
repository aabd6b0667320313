/**
 * The engine on the PostgreSQL store: the smoke test's operation (one journaled charge) end to
 * end with the server's clock, then two engines sharing one schema (two processes' worth of
 * pools, workers and batchers) processing tenants' operations with exactly one charge each, and
 * a retry that goes back through the queue. Then how a worker finds work with polling out of the
 * picture (a poll interval longer than the test): announced work by NOTIFY, and the two kinds
 * of work nothing announces — a backlog deeper than the slots, a capped tenant's next operation —
 * by claiming when a slot frees, as is all work while wake-ups are lost; and no claim at all when
 * the queue is drained. Last, that the
 * plans a connection made while the tables were empty still find rows by key once they are large.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { StoreError } from '../../src/core/errors/index.js';
import { Retryable, type SluiceOptions } from '../../src/index.js';
import type { Store } from '../../src/store/store.js';
import type { ClaimResult } from '../../src/store/types.js';
import { ProviderStub } from '../../src/testing/index.js';
import { chargeAcross, defineCharge, O7 } from '../helpers/charge-kind.js';
import { type Harness, harness } from '../helpers/engine.js';
import { rowsRead, usePostgres, withoutAutovacuum } from '../helpers/postgres.js';

const db = usePostgres();
const open: Harness[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((h) => h.close()));
});

async function engine(schema: string): Promise<Harness> {
  const h = await harness({ store: db.store({ schema, poolSize: 4 }) });
  open.push(h);
  return h;
}

describe('an engine on PostgreSQL', () => {
  it('runs an operation with one effect from submit to success', async () => {
    const h = await engine(db.freshSchema());
    const provider = new ProviderStub();
    defineCharge(h.sluice, provider);
    h.worker().start();
    const { operation, created } = await h.sluice.submit({
      tenant: 'North',
      id: 'O7',
      kind: 'charge',
      input: O7,
    });
    expect([created, operation.state]).toEqual([true, 'queued']);
    const done = await h.sluice.wait({ tenant: 'North', id: 'O7' });
    expect([done.state, done.result]).toEqual(['succeeded', { charge: 'ch_1' }]);
    const full = await h.sluice.get({ tenant: 'North', id: 'O7' }, { include: ['attempts', 'effects'] });
    expect(full?.attempts?.map((a) => a.outcome)).toEqual(['succeeded']);
    expect(full?.effects?.map((e) => [e.name, e.state, e.reference])).toEqual([
      ['charge', 'committed', 'ch_1'],
    ]);
    expect(provider.calls).toBe(1);
    expect(await h.store.queueStats()).toEqual([
      { class: 'default', tenant: 'North', waiting: 0, running: 0 },
    ]);
  });

  it('shares one schema between two engines: every operation charged exactly once', async () => {
    const schema = db.freshSchema();
    const [a, b] = [await engine(schema), await engine(schema)];
    const provider = new ProviderStub();
    for (const h of [a, b]) {
      defineCharge(h.sluice, provider);
      h.worker({ slots: { default: 3 } }).start();
    }
    const done = await chargeAcross([a.sluice, b.sluice], 40, 4);
    expect(done.every((op) => op.state === 'succeeded')).toBe(true);
    expect(provider.calls).toBe(40);
    expect(provider.ledger()).toHaveLength(40);
    expect(provider.doubleCharges()).toEqual([]);
    const stats = await a.store.queueStats();
    expect(stats.every((s) => s.waiting === 0 && s.running === 0)).toBe(true);
  });

  it('sends a retryable failure back through the queue and succeeds on the next attempt', async () => {
    const h = await engine(db.freshSchema());
    let calls = 0;
    h.sluice.define('flaky', {
      input: z.object({}),
      limits: { backoff: { baseMs: 1, capMs: 1 } },
      async run() {
        calls++;
        if (calls === 1) throw new Retryable('first call fails');
        return 'ok';
      },
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'f1', kind: 'flaky', input: {} });
    const done = await h.sluice.wait({ tenant: 'North', id: 'f1' });
    expect([done.state, done.result, calls]).toEqual(['succeeded', 'ok', 2]);
    const full = await h.sluice.get({ tenant: 'North', id: 'f1' }, { include: ['attempts'] });
    expect(full?.attempts?.map((a) => a.outcome)).toEqual(['retry', 'succeeded']);
  });
});

/** Longer than any test here: work found at all was found without the poll. */
const NO_POLL_MS = 600_000;

/**
 * A producer engine (submits only) and a worker engine on one schema, as an API process and a
 * worker process: only NOTIFY tells the worker about a submit. The worker's store counts its
 * claims; `listening` resolves once the worker listens (before that, a NOTIFY would be missed).
 */
async function producerAndWorker(sluice?: Partial<SluiceOptions>) {
  const schema = db.freshSchema();
  const producer = await harness({ store: db.store({ schema, poolSize: 2 }), sluice });
  open.push(producer);
  const store: Store = db.store({ schema, poolSize: 2 });
  let claims = 0;
  let around: ((claim: () => Promise<ClaimResult>) => Promise<ClaimResult>) | undefined;
  const claim = store.operationClaimMany.bind(store);
  store.operationClaimMany = (params) => {
    claims++;
    const wrap = around;
    around = undefined;
    return wrap ? wrap(() => claim(params)) : claim(params);
  };
  // A claim that rides with attempts' ends counts as a claim too.
  const finishAndClaim = store.attemptFinishAndClaim.bind(store);
  store.attemptFinishAndClaim = (items, params) => {
    claims++;
    return finishAndClaim(items, params);
  };
  let listening: Promise<unknown> | undefined;
  let deaf = false;
  let told: Parameters<typeof subscribe>[1];
  const subscribe = store.subscribe!.bind(store);
  store.subscribe = (onClass, options) => {
    told = options;
    listening = subscribe((cls) => {
      if (!deaf) onClass(cls);
    }, options);
    return listening as ReturnType<typeof subscribe>;
  };
  const consumer = await harness({ store, sluice });
  open.push(consumer);
  for (const h of [producer, consumer])
    h.sluice.define('noop', { input: z.object({ n: z.number() }), run: ({ n }) => n });
  return {
    schema,
    producer,
    consumer,
    claims: () => claims,
    /** Runs the worker's next claim inside `wrap`. */
    aroundNextClaim(wrap: (claim: () => Promise<ClaimResult>) => Promise<ClaimResult>) {
      around = wrap;
    },
    async start(slots: number) {
      consumer.worker({ pollIntervalMs: NO_POLL_MS, slots: { default: slots } }).start();
      await listening;
    },
    /**
     * From now on no wake-up reaches the worker, and the store says so, as when its listening
     * connection dies and stays down (the store's side of that, on a real kill, is in
     * postgres-basics.test.ts).
     */
    loseWakeups() {
      deaf = true;
      told?.onLost?.(new StoreError('unavailable', 'the listening connection ended'));
    },
  };
}

describe('a worker on PostgreSQL without polling', () => {
  it('claims once per announced operation, and not again when its attempt ends', async () => {
    const { producer, claims, start } = await producerAndWorker();
    await start(4);
    const before = claims();
    const n = 5;
    for (let i = 0; i < n; i++) {
      await producer.sluice.submit({ tenant: 'North', id: `a${i}`, kind: 'noop', input: { n: i } });
      expect((await producer.sluice.wait({ tenant: 'North', id: `a${i}` })).state).toBe('succeeded');
    }
    // One claim per NOTIFY; a claim after each ended attempt (the queue drained) would double it.
    expect(claims() - before).toBe(n);
  });

  it('claims again soon when a lock another transaction held hid announced work', async () => {
    const { schema, producer, aroundNextClaim, start } = await producerAndWorker();
    await start(4);
    await producer.sluice.submit({ tenant: 'North', id: 'first', kind: 'noop', input: { n: 0 } });
    expect((await producer.sluice.wait({ tenant: 'North', id: 'first' })).state).toBe('succeeded');
    // The claim this submit's NOTIFY asks for runs while North's queue row is held, as a finish
    // or a submit of North's holds it until its commit; nothing announces the work again.
    const holder = await db.client();
    let held: ClaimResult | undefined;
    try {
      aroundNextClaim(async (claim) => {
        await holder.query('BEGIN');
        await holder.query(`SELECT 1 FROM "${schema}".queues WHERE tenant = 'North' FOR UPDATE`);
        held = await claim();
        await holder.query('COMMIT');
        return held;
      });
      await producer.sluice.submit({ tenant: 'North', id: 'hidden', kind: 'noop', input: { n: 1 } });
      expect(
        (await producer.sluice.wait({ tenant: 'North', id: 'hidden' }, { timeoutMs: 15_000 })).state,
      ).toBe('succeeded');
      expect(held?.rows).toEqual([]);
      expect(held?.contended).toBe(true);
    } finally {
      await holder.end();
    }
  }, 20_000);

  it('claims again as slots free while a backlog deeper than the slots waits', async () => {
    const { producer, start } = await producerAndWorker();
    await start(2);
    const refs = Array.from({ length: 9 }, (_, i) => ({ tenant: `T${i % 3}`, id: `b${i}` }));
    await Promise.all(refs.map((r, i) => producer.sluice.submit({ ...r, kind: 'noop', input: { n: i } })));
    const done = await Promise.all(refs.map((r) => producer.sluice.wait(r, { timeoutMs: 15_000 })));
    expect(done.map((o) => o.state)).toEqual(refs.map(() => 'succeeded'));
  }, 20_000);

  it('claims as slots free while its wake-ups are lost, instead of waiting to be told', async () => {
    const { producer, consumer, start, loseWakeups } = await producerAndWorker();
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered!: () => void;
    const running = new Promise<void>((resolve) => {
      entered = resolve;
    });
    for (const h of [producer, consumer])
      h.sluice.define('held', {
        input: z.object({}),
        run: async () => {
          entered();
          await gate;
          return 'held';
        },
      });
    // Two slots, one taken: the claim did not fill them, so nothing but a wake-up (or, while
    // wake-ups are lost, the end of the running attempt) would claim again.
    await start(2);
    await producer.sluice.submit({ tenant: 'North', id: 'held', kind: 'held', input: {} });
    await running;
    loseWakeups();
    await producer.sluice.submit({ tenant: 'North', id: 'after', kind: 'noop', input: { n: 1 } });
    release();
    const after = await producer.sluice.wait({ tenant: 'North', id: 'after' }, { timeoutMs: 15_000 });
    expect(after.state).toBe('succeeded');
  }, 20_000);

  it("claims a capped tenant's next operation when its running one ends", async () => {
    const { producer, start } = await producerAndWorker({ tenants: { North: { '*': { maxRunning: 1 } } } });
    await start(8);
    const refs = Array.from({ length: 4 }, (_, i) => ({ tenant: 'North', id: `c${i}` }));
    await Promise.all(refs.map((r, i) => producer.sluice.submit({ ...r, kind: 'noop', input: { n: i } })));
    const done = await Promise.all(refs.map((r) => producer.sluice.wait(r, { timeoutMs: 15_000 })));
    expect(done.map((o) => o.state)).toEqual(refs.map(() => 'succeeded'));
  }, 20_000);
});

describe('plans on PostgreSQL', () => {
  it('keep finding rows by key after a table grows under plans made while it was empty', async () => {
    const schema = db.freshSchema();
    // One connection: every statement of the engine, and every plan it caches, is on it.
    const store = db.store({ schema, poolSize: 1 });
    const h = await harness({ store });
    open.push(h);
    const provider = new ProviderStub();
    defineCharge(h.sluice, provider);
    h.sluice.define('noop', { input: z.object({ n: z.number() }), run: ({ n }) => n });
    const admin = await db.client();
    try {
      // An ANALYZE would replace the plans this is about; autovacuum may not run one meanwhile.
      await withoutAutovacuum(admin, schema, [
        'operations',
        'queues',
        'classes',
        'attempts',
        'effects',
        'events',
      ]);
      h.worker().start();
      // One at a time, more than the five calls after which PostgreSQL may cache a generic plan:
      // submit, claim, the journal's two writes and the finish, each planned on nearly empty tables.
      const runOne = async (id: string, i: number) => {
        const charge = i % 2 === 0;
        await h.sluice.submit({
          tenant: 'North',
          id,
          kind: charge ? 'charge' : 'noop',
          input: charge ? { invoice: i, amount_cents: 100 + i } : { n: i },
        });
        expect((await h.sluice.wait({ tenant: 'North', id })).state).toBe('succeeded');
      };
      for (let i = 0; i < 8; i++) await runOne(`warm${i}`, i);
      // The table grows by 20,000 rows, finished and waiting, none of them North's.
      await admin.query(
        `INSERT INTO "${schema}".operations (tenant, id, kind, class, digest, input, state, max_attempts,
                                            run_after, created_at, updated_at, finished_at)
         SELECT 'Bulk', 'b' || g, 'noop', CASE WHEN g % 2 = 0 THEN 'default' ELSE 'elsewhere' END, 'd', '{}',
                CASE WHEN g % 2 = 0 THEN 'succeeded' ELSE 'queued' END, 1, 0, 0, 0,
                CASE WHEN g % 2 = 0 THEN 0 END
           FROM generate_series(1, 20000) g`,
      );
      const before = await rowsRead(store, schema, ['operations']);
      const n = 10;
      for (let i = 0; i < n; i++) await runOne(`op${i}`, 100 + i);
      const perOperation = ((await rowsRead(store, schema, ['operations'])) - before) / n;
      // By key, an operation's whole life reads a few dozen rows; one scan of the table, 20,000.
      expect(perOperation).toBeLessThan(200);
    } finally {
      await admin.end();
    }
  }, 30_000);
});
