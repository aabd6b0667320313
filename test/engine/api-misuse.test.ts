/**
 * Mistakes a caller of the library makes, refused where they are made: a misspelled key of a
 * kind, of the engine's or a store's options, a handler that is not a function, a kind whose
 * class no worker of the engine can run. Each one used to be accepted and to fail later, or
 * never: `clas: 'bulk'` ran in `default`, a missing `run` burned every attempt on a TypeError,
 * a kind of a new class defined after `sluice.worker()` waited for ever.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import type {
  AdmissionConfig,
  KindDefinition,
  PostgresOptions,
  ProviderBudgets,
  ResolvedLimits,
  RetryBudgetConfig,
  SluiceOptions,
  SqliteOptions,
  WorkerEvents,
} from '../../src/index.js';
import { DEFAULT_LIMITS, deriveEffectKey, postgresStore, Sluice, sqliteStore } from '../../src/index.js';
import { type Charge, ProviderStub } from '../../src/testing/index.js';
import { type Harness, harness, silent } from '../helpers/engine.js';
import { captureLog } from '../helpers/log-capture.js';
import { usePostgres } from '../helpers/postgres.js';

/** The error `fn` throws (or rejects with), as `{ code, message }`; undefined if it returns. */
const refusal = (fn: () => unknown): { code: unknown; message: string } | undefined => {
  try {
    fn();
    return undefined;
  } catch (error) {
    return { code: (error as { code?: unknown }).code, message: (error as Error).message };
  }
};

const input = z.object({});
const ref = (id: string) => ({ tenant: 'North', id });

describe('sluice.define', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('refuses a key of the definition it does not know, naming it, and keeps no kind', async () => {
    h = await harness();
    const misspelt = { input, clas: 'bulk', run: () => null } as unknown as KindDefinition;
    const got = refusal(() => h.sluice.define('job', misspelt));
    expect(got?.code).toBe('invalid-argument');
    expect(got?.message).toMatch(/unknown key clas\b/);
    expect(h.sluice.kind('job')).toBeUndefined();
    // The name stays free for the definition meant.
    expect(h.sluice.define('job', { input, class: 'bulk', run: () => null }).class).toBe('bulk');
  });

  it("refuses a limit it does not know, and one of the back-off's", async () => {
    h = await harness();
    const timeout = refusal(() =>
      h.sluice.define('job', { input, limits: { timeoutMs: 5 } as never, run: () => null }),
    );
    expect(timeout?.code).toBe('invalid-argument');
    expect(timeout?.message).toMatch(/limits: unknown key timeoutMs\b/);
    const backoff = refusal(() =>
      h.sluice.define('job', { input, limits: { backoff: { base: 5 } } as never, run: () => null }),
    );
    expect(backoff?.code).toBe('invalid-argument');
    expect(backoff?.message).toMatch(/limits\.backoff: unknown key base\b/);
    // Not an object at all.
    expect(refusal(() => h.sluice.define('job', { input, limits: 5 as never, run: () => null }))?.code).toBe(
      'invalid-argument',
    );
    expect(h.sluice.kind('job')).toBeUndefined();
  });

  it('refuses a handler that is missing or not a function, before any submit can burn its attempts', async () => {
    h = await harness();
    for (const run of [undefined, 'run', { call: () => null }]) {
      const got = refusal(() => h.sluice.define('job', { input, run } as unknown as KindDefinition));
      expect({ run, code: got?.code }).toEqual({ run, code: 'invalid-argument' });
      expect(got?.message).toMatch(/\brun\b.*function/);
    }
    expect(refusal(() => h.sluice.define('job', null as never))?.code).toBe('invalid-argument');
    expect(h.sluice.kind('job')).toBeUndefined();
  });

  it('refuses a kind of a class a worker of the engine already made has no slots for', async () => {
    h = await harness();
    h.sluice.define('first', { input, run: () => 'first' });
    const worker = h.worker({ slots: { reports: 1 } });
    // Its class has no channel in that worker: the operations would wait for ever.
    const got = refusal(() => h.sluice.define('bulky', { input, class: 'bulk', run: () => null }));
    expect(got?.code).toBe('invalid-argument');
    expect(got?.message).toMatch(/class bulk/);
    expect(h.sluice.kind('bulky')).toBeUndefined();
    // A class the worker has: the default (of a kind defined before it), or one its slots name.
    h.sluice.define('second', { input, run: () => 'second' });
    h.sluice.define('report', { input, class: 'reports', run: () => 'report' });
    worker.start();
    await h.sluice.submitMany([
      { ...ref('s1'), kind: 'second', input: {} },
      { ...ref('r1'), kind: 'report', input: {} },
    ]);
    expect((await h.sluice.wait(ref('s1'))).result).toBe('second');
    expect((await h.sluice.wait(ref('r1'))).result).toBe('report');
    // Once no worker is left, a new class is anyone's: the next worker is made with it.
    await worker.stop();
    h.sluice.define('bulky', { input, class: 'bulk', run: () => 'bulk' });
    h.worker().start();
    await h.sluice.submit({ ...ref('b1'), kind: 'bulky', input: {} });
    expect((await h.sluice.wait(ref('b1'))).result).toBe('bulk');
  });

  it('takes a class a worker was told to give no slots: that is its choice, not an oversight', async () => {
    h = await harness();
    h.worker({ slots: { bulk: 0, default: 1 } });
    expect(h.sluice.define('bulky', { input, class: 'bulk', run: () => null }).class).toBe('bulk');
  });

  it('names an effect by its identity: a second ctx.effect of one name returns the first one’s result', async () => {
    // What docs/handlers.md says of a loop: each effect needs a name of its own.
    const { logger, lines: logged } = captureLog('warn');
    h = await harness({ sluice: { logger } });
    const provider = new ProviderStub();
    h.sluice.define('lines', {
      input: z.object({ lines: z.array(z.object({ id: z.string(), amount_cents: z.number() })) }),
      async run({ lines }, ctx) {
        const same: string[] = [];
        const own: string[] = [];
        for (const line of lines) {
          const params = { line: line.id, amount_cents: line.amount_cents };
          same.push((await ctx.effect('charge', { call: ({ key }) => provider.charge({ key, params }) })).id);
          own.push(
            (await ctx.effect(`charge:${line.id}`, { call: ({ key }) => provider.charge({ key, params }) }))
              .id,
          );
        }
        return { same, own };
      },
    });
    h.worker().start();
    const lines = [
      { id: 'a', amount_cents: 100 },
      { id: 'b', amount_cents: 200 },
      { id: 'c', amount_cents: 300 },
    ];
    await h.sluice.submit({ ...ref('L1'), kind: 'lines', input: { lines } });
    const done = await h.sluice.wait(ref('L1'));
    expect(done.result).toEqual({ same: ['ch_1', 'ch_1', 'ch_1'], own: ['ch_2', 'ch_3', 'ch_4'] });
    expect(provider.calls).toBe(4);
    // And the worker says so, once for the name.
    const repeats = logged.filter((l) =>
      String(l.msg).startsWith('an effect this attempt committed was asked again'),
    );
    expect(repeats.map((l) => [l.operation, l.effect])).toEqual([['L1', 'charge']]);
  });
});

describe('reads and cancels: what they would have ignored', () => {
  let h: Harness | undefined;
  afterEach(async () => h?.close());

  it("get refuses an include it does not know; cancel a blank or over-long 'by'", async () => {
    h = await harness();
    h.sluice.define('job', { input: z.object({}), run: () => 'done' });
    await h.sluice.submit({ ...ref('g1'), kind: 'job', input: {} });
    const typo = await h.sluice
      .get(ref('g1'), { include: ['attempt' as 'attempts'] })
      .catch((e: unknown) => e);
    expect(typo).toMatchObject({ code: 'invalid-argument', message: expect.stringMatching(/"attempt"/) });
    expect((await h.sluice.get(ref('g1'), { include: ['attempts', 'effects', 'events'] }))?.attempts).toEqual(
      [],
    );
    for (const by of ['', '   ', 'x'.repeat(201), 'nul\u0000'])
      expect(
        await h.sluice.cancel(ref('g1'), { by }).catch((e: unknown) => (e as { code: string }).code),
      ).toBe('invalid-argument');
    // Refused before the store: the operation is still queued.
    expect((await h.sluice.get(ref('g1')))?.state).toBe('queued');
    expect((await h.sluice.cancel(ref('g1'), { by: 'x'.repeat(200) })).cancel).toBe('cancelled');
  });
});

describe('a worker started twice', () => {
  let h: Harness | undefined;
  afterEach(async () => h?.close());

  it('is refused with invalid-argument, started or stopped, naming what to do', async () => {
    h = await harness();
    h.sluice.define('job', { input: z.object({}), run: () => 'done' });
    const worker = h.worker();
    worker.start();
    const twice = (() => {
      try {
        worker.start();
      } catch (error) {
        return error as { code: string; message: string };
      }
    })();
    expect([twice?.code, twice?.message]).toEqual([
      'invalid-argument',
      expect.stringMatching(/sluice\.worker\(\)/),
    ]);
    await worker.stop();
    expect(() => worker.start()).toThrow(/is stopped/);
  });
});

describe('effectKeyNamespace', () => {
  let a: Harness | undefined;
  let b: Harness | undefined;
  afterEach(async () => {
    await a?.close();
    await b?.close();
  });

  it('gives two stores sharing one provider account their own keys; without it, keys are as they were', async () => {
    // Staging and production on one provider account, each with tenant North's operation O1.
    const provider = new ProviderStub();
    const keys: string[] = [];
    const engine = async (namespace: string | undefined) => {
      const h = await harness({ sluice: namespace === undefined ? {} : { effectKeyNamespace: namespace } });
      h.sluice.define('charge', {
        input: z.object({ amount_cents: z.number() }),
        run: ({ amount_cents }, ctx) =>
          ctx.effect('charge', {
            call: ({ key }) => {
              keys.push(key);
              return provider.charge({ key, params: { amount_cents } });
            },
          }),
      });
      h.worker().start();
      return h;
    };
    const charge = async (h: Harness, amount_cents: number) => {
      await h.sluice.submit({ ...ref('O1'), kind: 'charge', input: { amount_cents } });
      return (await h.sluice.wait(ref('O1'))).result as Charge;
    };
    a = await engine('staging');
    b = await engine('production');
    const staging = await charge(a, 100);
    const production = await charge(b, 250);
    // Two charges: the second was not answered with the first's.
    expect([staging.id, production.id, provider.calls]).toEqual(['ch_1', 'ch_2', 2]);
    expect(new Set(keys).size).toBe(2);
    await a.close();
    await b.close();
    // Without a namespace the key is the one every earlier build derived.
    a = await engine(undefined);
    await charge(a, 100);
    expect(keys[2]).toBe(deriveEffectKey('North', 'O1', 'charge'));
    expect(keys.slice(0, 2)).not.toContain(keys[2]);
    b = undefined;
  });
});

describe('the engine and the stores refuse options they do not know', () => {
  let dir: string;
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  const path = () => join(dir, 'sluice.db');

  it('new Sluice: an unknown key, no store, or no options at all', () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-misuse-'));
    const store = sqliteStore({ path: path() });
    try {
      const extra = { store, logger: silent, logLevel: 'debug' } as SluiceOptions;
      const got = refusal(() => new Sluice(extra));
      expect(got?.code).toBe('invalid-argument');
      expect(got?.message).toMatch(/unknown key logLevel\b/);
      for (const options of [{}, { store: undefined }, { store: 'sqlite' }, undefined, null]) {
        const missing = refusal(() => new Sluice(options as unknown as SluiceOptions));
        expect({ options, code: missing?.code }).toEqual({ options, code: 'invalid-argument' });
        expect(missing?.message).toMatch(/store/);
      }
      // Every option a caller may give, even left undefined (as the service passes its config's).
      const all: Required<SluiceOptions> = {
        store,
        logger: silent,
        maxLeaseExpiries: 3,
        retention: {},
        effectKey: (tenant, id, name) => `${tenant}.${id}.${name}`,
        random: Math.random,
        classes: {},
        tenants: {},
        providers: {},
        retryBudget: false,
        effectKeyNamespace: 'staging',
      };
      // The namespace or a derivation of one's own, not both.
      expect(refusal(() => new Sluice(all))?.message).toMatch(/effectKeyNamespace and effectKey/);
      expect(refusal(() => new Sluice({ ...all, effectKeyNamespace: undefined }))).toBeUndefined();
      expect(refusal(() => new Sluice({ ...all, effectKey: undefined }))).toBeUndefined();
      for (const ns of ['', 'x'.repeat(201), 'tab\there', 'é', 7])
        expect(
          refusal(() => new Sluice({ store, logger: silent, effectKeyNamespace: ns as string }))?.code,
        ).toBe('invalid-argument');
      expect(
        refusal(() => new Sluice({ store, logger: silent, effectKeyNamespace: 'x'.repeat(200) })),
      ).toBeUndefined();
      expect(refusal(() => new Sluice({ store, logger: silent, classes: undefined }))).toBeUndefined();
    } finally {
      void store.close();
    }
  });

  it('sqliteStore: no path, a path that is not a string, an unknown key', () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-misuse-'));
    for (const options of [{}, { path: 123 }, { path: undefined }, undefined]) {
      const got = refusal(() => sqliteStore(options as never));
      expect({ options, code: got?.code }).toEqual({ options, code: 'invalid-argument' });
      expect(got?.message).toMatch(/path/);
    }
    const watchh = refusal(() => sqliteStore({ path: path(), watchh: false } as never));
    expect(watchh?.code).toBe('invalid-argument');
    expect(watchh?.message).toMatch(/unknown key watchh\b/);
    // Every key it knows is taken.
    const all: Required<SqliteOptions> = {
      path: path(),
      synchronous: 'NORMAL',
      busyTimeoutMs: 100,
      clock: { now: () => Date.now() },
      watch: false,
    };
    void sqliteStore(all).close();
  });

  it('postgresStore: an unknown key, before a pool is made', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-misuse-'));
    const url = 'postgres://nobody@127.0.0.1:1/none';
    const got = refusal(() => postgresStore({ connectionString: url, poolsize: 2 } as never));
    expect(got?.code).toBe('invalid-argument');
    expect(got?.message).toMatch(/unknown key poolsize\b/);
    expect(refusal(() => postgresStore(undefined as never))?.code).toBe('invalid-argument');
    // Every key it knows is taken (the store connects on first use: nothing is opened here).
    const pool = new pg.Pool({ connectionString: url });
    const all: Required<PostgresOptions> = {
      connectionString: url,
      pool,
      schema: 'misuse',
      poolSize: 2,
      clock: { now: () => Date.now() },
      statementTimeoutMs: 1000,
      connectTimeoutMs: 1000,
      notify: false,
      durableCommits: true,
      listenUrl: url,
      pooler: 'transaction',
    };
    // A transaction pooler takes no statementTimeoutMs: left out here, but still a known key.
    await postgresStore({ ...all, statementTimeoutMs: undefined }).close();
    await postgresStore({ ...all, pooler: undefined }).close();
    // Only false turns durable commits off: a string or a number is refused, not taken as true.
    for (const wrong of ['false', 0, null])
      expect(
        refusal(() => postgresStore({ connectionString: url, durableCommits: wrong as never }))?.message,
      ).toMatch(/durableCommits must be true or false/);
    await pool.end();
  });
});

describe('sluice/testing: ProviderStub.lookupResult', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('answers as ctx.effect’s lookup expects: a lost answer is found committed, charged once', async () => {
    h = await harness();
    const provider = new ProviderStub();
    h.sluice.define('charge', {
      input: z.object({ amount_cents: z.number() }),
      limits: { backoff: { baseMs: 1, capMs: 1 } },
      async run(params, ctx) {
        const charge = await ctx.effect<Charge>('charge', {
          call: ({ key, signal }) => provider.charge({ key, params, signal }),
          lookup: ({ key }) => provider.lookupResult(key),
          reference: (c) => c.id,
        });
        return { charge: charge.id };
      },
    });
    // The charge is made and its answer lost: the next attempt asks the provider.
    provider.failNext(1, 'drop');
    h.worker().start();
    await h.sluice.submit({ ...ref('P1'), kind: 'charge', input: { amount_cents: 500 } });
    const done = await h.sluice.wait(ref('P1'));
    expect([done.state, done.result]).toEqual(['succeeded', { charge: 'ch_1' }]);
    expect([provider.calls, provider.lookups, provider.ledger().length]).toEqual([1, 1, 1]);
    const [effect] = (await h.sluice.get(ref('P1'), { include: ['effects'] }))?.effects ?? [];
    expect(effect?.reference).toBe('ch_1');
    expect(await provider.lookupResult('no-such-key')).toEqual({ status: 'absent' });
  });
});

/**
 * The types of the public signatures, importable by name from the package (checked by
 * `tsc --noEmit -p .`, as `npm run typecheck` runs it: none of them was exported).
 */
describe('the types of public signatures are exported', () => {
  it('ProviderBudgets, AdmissionConfig, RetryBudgetConfig, ResolvedLimits, WorkerEvents', () => {
    const providers: ProviderBudgets = { pay: { perTenant: { limit: 10, windowMs: 1000 } } };
    const admission: AdmissionConfig = { classes: { bulk: { maxQueued: 5 } } };
    const budget: Partial<RetryBudgetConfig> = { ratio: 0.2 };
    const limits: ResolvedLimits = DEFAULT_LIMITS;
    const idle: WorkerEvents['idle'] = [];
    const options: SluiceOptions = {
      store: undefined as never,
      providers,
      classes: admission.classes,
      retryBudget: budget,
    };
    expect([options.providers, limits.maxAttempts, idle]).toEqual([providers, 5, []]);
  });
});

describe('a store used before it is migrated', () => {
  const db = usePostgres();
  afterEach(() => db.closeStores());

  it.each([
    [
      'SQLite',
      () => sqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'sluice-unmigrated-')), 'sluice.db') }),
    ],
    ['PostgreSQL', () => db.store()],
  ] as const)('%s: store-not-migrated, saying what to run, on a submit and a read', async (_name, make) => {
    const store = make();
    const sluice = new Sluice({ store, logger: silent });
    sluice.define('job', { input: z.object({}), run: () => 'done' });
    try {
      for (const call of [
        () => sluice.submit({ tenant: 'North', id: 'a', kind: 'job', input: {} }),
        () => sluice.get({ tenant: 'North', id: 'a' }),
      ]) {
        const error = await call().then(
          () => undefined,
          (e: unknown) => e as { code: string; message: string; retryable: boolean },
        );
        expect([error?.code, error?.retryable]).toEqual(['store-not-migrated', true]);
        expect(error?.message).toContain('sluice migrate');
      }
      // Migrated, the same calls work.
      await sluice.migrate();
      expect((await sluice.submit({ tenant: 'North', id: 'a', kind: 'job', input: {} })).created).toBe(true);
    } finally {
      await sluice.close();
    }
  });
});
