/**
 * Every number an engine, a worker, a kind and the service are given is checked where it is
 * given: one outside its range throws `invalid-argument` naming it, before anything starts. The
 * durations that become timers stop at the longest wait a timer holds (2^31 − 1 ms): past it,
 * Node fires the timer after 1 ms, and an attempt timeout of a month ended every attempt at once.
 */
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MAX_DURATION_MS, MAX_REQUEST_MS, MAX_TIMER_MS } from '../../src/core/bounds.js';
import { postgresStore, sqliteStore } from '../../src/index.js';
import { startService } from '../../src/service/index.js';
import { type Harness, harness, silent } from '../helpers/engine.js';

const codeOf = (fn: () => unknown): string | undefined => {
  try {
    fn();
    return undefined;
  } catch (error) {
    return (error as { code?: string }).code;
  }
};

describe('options out of range', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it("a kind's attempt timeout: the longest a timer holds runs the handler; one more is refused", async () => {
    h = await harness();
    const define = (name: string, attemptTimeoutMs: number) =>
      h.sluice.define(name, {
        input: z.object({}),
        limits: { attemptTimeoutMs, deadlineMs: null },
        run: async () => {
          // Long enough for a timer set to 1 ms to have fired.
          await new Promise((resolve) => setTimeout(resolve, 30));
          return 'done';
        },
      });
    expect(codeOf(() => define('too.long', MAX_TIMER_MS + 1))).toBe('invalid-argument');
    expect(codeOf(() => define('too.short', 0))).toBe('invalid-argument');
    expect(codeOf(() => define('fraction', 1.5))).toBe('invalid-argument');
    define('longest', MAX_TIMER_MS);
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'L1', kind: 'longest', input: {} });
    const done = await h.sluice.wait({ tenant: 'North', id: 'L1' });
    expect([done.state, done.result]).toEqual(['succeeded', 'done']);
  });

  it("a kind's other limits: what the stores can keep, at the edge and one step past it", async () => {
    h = await harness();
    let n = 0;
    const define = (limits: Record<string, unknown>) => () =>
      h.sluice.define(`k${n++}`, { input: z.object({}), limits, run: () => null });
    const cases: Array<[Record<string, unknown>, boolean]> = [
      [{ deadlineMs: MAX_DURATION_MS }, true],
      [{ deadlineMs: MAX_DURATION_MS + 1 }, false],
      [{ deadlineMs: null }, true],
      [{ maxAttempts: 1000 }, true],
      [{ maxAttempts: 1001 }, false],
      [{ backoff: { baseMs: 0, capMs: MAX_DURATION_MS } }, true],
      [{ backoff: { capMs: MAX_DURATION_MS + 1 } }, false],
      [{ effectRetentionMs: MAX_DURATION_MS + 1 }, false],
      [{ maxProviderCalls: 1_000_000 }, true],
      [{ maxProviderCalls: 1_000_001 }, false],
      [{ maxResultBytes: 16 * 1024 ** 2 }, true],
      [{ maxResultBytes: 16 * 1024 ** 2 + 1 }, false],
      [{ maxResultBytes: 0 }, false],
      // Whole numbers: the stores keep them as integers (SQLite kept a fraction, PostgreSQL rounded).
      [{ deadlineMs: 1000.5 }, false],
      [{ maxAttempts: 2.5 }, false],
      [{ backoff: { baseMs: 0.5 } }, false],
    ];
    for (const [limits, ok] of cases)
      expect({ limits, code: codeOf(define(limits)) }).toEqual({
        limits,
        code: ok ? undefined : 'invalid-argument',
      });
  });

  it("a submit's delay and deadline, bounded as the HTTP API bounds them; a refused one stores nothing", async () => {
    h = await harness();
    h.sluice.define('noop', { input: z.object({}), limits: { deadlineMs: null }, run: () => null });
    const submit = (id: string, options: { delayMs?: number; deadlineMs?: number }) =>
      h.sluice.submit({ tenant: 'North', id, kind: 'noop', input: {}, ...options });
    for (const [i, options] of [
      { delayMs: MAX_REQUEST_MS + 1 },
      { delayMs: -1 },
      { delayMs: Number.POSITIVE_INFINITY },
      { deadlineMs: 0 },
      { deadlineMs: MAX_REQUEST_MS + 1 },
      // Started at or after its deadline, it would hold a waiting place only to fail unstarted.
      { delayMs: 1000, deadlineMs: 1000 },
      // Whole milliseconds, as the HTTP API takes them.
      { delayMs: 1000.4 },
      { deadlineMs: 5000.5 },
    ].entries()) {
      await expect(submit(`bad${i}`, options)).rejects.toMatchObject({ code: 'invalid-argument' });
      expect(await h.sluice.get({ tenant: 'North', id: `bad${i}` })).toBeUndefined();
    }
    const edge = await submit('edge', { delayMs: MAX_REQUEST_MS - 1, deadlineMs: MAX_REQUEST_MS });
    expect(Date.parse(edge.operation.runAfter) - Date.parse(edge.operation.createdAt)).toBe(
      MAX_REQUEST_MS - 1,
    );
    expect(Date.parse(edge.operation.deadlineAt ?? '') - Date.parse(edge.operation.createdAt)).toBe(
      MAX_REQUEST_MS,
    );
  });

  it("a wait's timeout and poll period", async () => {
    h = await harness();
    h.sluice.define('noop', { input: z.object({}), run: () => null });
    await h.sluice.submit({ tenant: 'North', id: 'W1', kind: 'noop', input: {} });
    const ref = { tenant: 'North', id: 'W1' };
    for (const options of [
      { timeoutMs: Number.NaN },
      { timeoutMs: -1 },
      { pollMs: 0 },
      { pollMs: MAX_TIMER_MS + 1 },
    ])
      await expect(h.sluice.wait(ref, options)).rejects.toMatchObject({ code: 'invalid-argument' });
    // At the edges: no time at all, and the longest poll a timer holds, with nobody working.
    await expect(h.sluice.wait(ref, { timeoutMs: 0, pollMs: MAX_TIMER_MS })).rejects.toMatchObject({
      code: 'wait-timeout',
    });
  });

  it("a worker's slots and periods, each at its edge and one step past it", async () => {
    h = await harness();
    h.sluice.define('noop', { input: z.object({}), run: () => null });
    const cases: Array<[Record<string, unknown>, boolean]> = [
      [{ defaultSlots: 0 }, true],
      [{ defaultSlots: 10_000 }, true],
      [{ defaultSlots: 10_001 }, false],
      [{ defaultSlots: 1.5 }, false],
      [{ slots: { default: -1 } }, false],
      [{ slots: { default: 10_000 } }, true],
      [{ leaseMs: 1 }, true],
      [{ leaseMs: 0 }, false],
      [{ leaseMs: MAX_TIMER_MS, heartbeatMs: MAX_TIMER_MS - 1 }, true],
      [{ heartbeatMs: MAX_TIMER_MS + 1 }, false],
      // A beat must come before the lease runs out: shorter than the lease given, or the default.
      [{ leaseMs: 1000, heartbeatMs: 999 }, true],
      [{ leaseMs: 1000, heartbeatMs: 1000 }, false],
      [{ heartbeatMs: 29_999 }, true],
      [{ heartbeatMs: 30_000 }, false],
      [{ pollIntervalMs: Number.NaN }, false],
      [{ pollIntervalMs: 1 }, true],
      [{ rescueIntervalMs: false, purgeIntervalMs: false }, true],
      [{ rescueIntervalMs: 0 }, false],
      [{ purgeIntervalMs: MAX_TIMER_MS + 1 }, false],
      [{ abortGraceMs: 0 }, true],
      [{ abortGraceMs: -1 }, false],
      [{ tempCheckMs: 0 }, false],
      [{ id: '' }, false],
      [{ id: 'w'.repeat(200) }, true],
    ];
    for (const [options, ok] of cases) {
      const code = codeOf(() => h.sluice.worker(options));
      expect({ options, code }).toEqual({ options, code: ok ? undefined : 'invalid-argument' });
    }
    const worker = h.worker();
    await expect(worker.stop({ graceMs: MAX_TIMER_MS + 1 })).rejects.toMatchObject({
      code: 'invalid-argument',
    });
  });

  it("an engine's retention, poison threshold and retry budget", async () => {
    h = await harness();
    const engine = (options: Record<string, unknown>) => () =>
      new (h.sluice.constructor as new (o: unknown) => unknown)({ store: h.store, ...options });
    expect(codeOf(engine({ retention: { terminalMs: 10, tombstoneMs: 10 } }))).toBeUndefined();
    expect(codeOf(engine({ retention: { terminalMs: 10, tombstoneMs: 9 } }))).toBe('invalid-argument');
    expect(codeOf(engine({ retention: { terminalMs: -1 } }))).toBe('invalid-argument');
    // Every duration the stores add to a time: at most 100 years.
    const most = { terminalMs: MAX_DURATION_MS, tombstoneMs: MAX_DURATION_MS };
    expect(codeOf(engine({ retention: most }))).toBeUndefined();
    expect(codeOf(engine({ retention: { ...most, tombstoneMs: MAX_DURATION_MS + 1 } }))).toBe(
      'invalid-argument',
    );
    // The stores keep a day of the budget's buckets: a longer window would be cut short.
    expect(codeOf(engine({ retryBudget: { windowMs: 86_400_000 } }))).toBeUndefined();
    expect(codeOf(engine({ retryBudget: { windowMs: 86_400_001 } }))).toBe('invalid-argument');
    expect(codeOf(engine({ retryBudget: { deferMaxMs: MAX_DURATION_MS + 1 } }))).toBe('invalid-argument');
    // A denied retry waits at least a little: at 0 it asked again hundreds of times a second.
    expect(codeOf(engine({ retryBudget: { deferMaxMs: 100 } }))).toBeUndefined();
    expect(codeOf(engine({ retryBudget: { deferMaxMs: 99 } }))).toBe('invalid-argument');
    // Misspelt, or not an object: refused, not read as the defaults.
    for (const retryBudget of [{ windowMS: 1000 }, 'off', null, true])
      expect([retryBudget, codeOf(engine({ retryBudget }))]).toEqual([retryBudget, 'invalid-argument']);
    expect(codeOf(engine({ retryBudget: { ratio: 1_000_000, floor: 2 ** 31 - 1 } }))).toBeUndefined();
    expect(codeOf(engine({ retryBudget: { ratio: 1_000_001 } }))).toBe('invalid-argument');
    expect(codeOf(engine({ retryBudget: { floor: 2 ** 31 } }))).toBe('invalid-argument');
    expect(codeOf(engine({ maxLeaseExpiries: 1 }))).toBeUndefined();
    expect(codeOf(engine({ maxLeaseExpiries: 0 }))).toBe('invalid-argument');
    expect(codeOf(engine({ maxLeaseExpiries: 2.5 }))).toBe('invalid-argument');
    expect(codeOf(engine({ retryBudget: { windowMs: 1000, bucketMs: 1000 } }))).toBeUndefined();
    expect(codeOf(engine({ retryBudget: { windowMs: 1000, bucketMs: 1001 } }))).toBe('invalid-argument');
    expect(codeOf(engine({ retryBudget: { ratio: -0.1 } }))).toBe('invalid-argument');
    expect(codeOf(engine({ retryBudget: { windowMs: 1000, bucketMs: 500.5 } }))).toBe('invalid-argument');
    expect(codeOf(engine({ retryBudget: false }))).toBeUndefined();
    expect(codeOf(engine({ classes: { default: { maxQueued: 2 ** 31 - 1 } } }))).toBeUndefined();
    expect(codeOf(engine({ classes: { default: { maxQueued: 2 ** 31 } } }))).toBe('invalid-argument');
    const budget = (limit: number, windowMs: number) => ({
      providers: { pay: { global: { limit, windowMs } } },
    });
    expect(codeOf(engine(budget(Number.MAX_SAFE_INTEGER, MAX_DURATION_MS)))).toBeUndefined();
    expect(codeOf(engine(budget(Number.MAX_SAFE_INTEGER + 1, 1000)))).toBe('invalid-argument');
    expect(codeOf(engine(budget(10, MAX_DURATION_MS + 1)))).toBe('invalid-argument');
    const override = (limit: number) => ({
      providers: { pay: { perTenant: { limit: 10, windowMs: 1000, tenants: { North: limit } } } },
    });
    expect(codeOf(engine(override(Number.MAX_SAFE_INTEGER)))).toBeUndefined();
    expect(codeOf(engine(override(Number.MAX_SAFE_INTEGER + 1)))).toBe('invalid-argument');
    expect(codeOf(engine(override(-1)))).toBe('invalid-argument');
    // A provider name with the tenant mark would make a budget key read two ways.
    const named = (provider: string) => ({
      providers: { [provider]: { perTenant: { limit: 10, windowMs: 1000 } } },
    });
    expect(codeOf(engine(named('pay.v2')))).toBeUndefined();
    expect(codeOf(engine(named('pay:tenant:x')))).toBe('invalid-argument');
    // Nor any `:`: provider `pay:tenant`'s all-tenants key would be `pay`'s for a tenant `*`.
    expect(codeOf(engine(named('pay:tenant')))).toBe('invalid-argument');
    expect(codeOf(engine(named('pay:v2')))).toBe('invalid-argument');
    expect(codeOf(engine(named('p'.repeat(100))))).toBeUndefined();
    expect(codeOf(engine(named('p'.repeat(101))))).toBe('invalid-argument');
  });

  it('a budget or a cap spelled wrong is refused, not left unread', async () => {
    h = await harness();
    const engine = (options: Record<string, unknown>) => () =>
      new (h.sluice.constructor as new (o: unknown) => unknown)({ store: h.store, ...options });
    const message = (options: Record<string, unknown>) => {
      try {
        engine(options)();
        return undefined;
      } catch (error) {
        return [(error as { code?: string }).code, (error as Error).message];
      }
    };
    const window = { limit: 10, windowMs: 1000 };
    expect(message({ providers: { pay: { perTenant: window, onExhausted: 'fail' } } })).toBeUndefined();
    expect(message({ providers: { pay: { perTennant: window } } })).toEqual([
      'invalid-argument',
      'providers.pay: unknown key perTennant (known: perTenant, global, rate, ratePerTenant, onExhausted)',
    ]);
    expect(message({ providers: { pay: { global: { ...window, tenants: {} } } } })?.[1]).toBe(
      'providers.pay.global: unknown key tenants (known: limit, windowMs)',
    );
    expect(
      message({ providers: { pay: { perTenant: { ...window, tenants: { North: 5 } } } } }),
    ).toBeUndefined();
    expect(message({ providers: { pay: { rate: { ...window, windowMS: 5 } } } })?.[0]).toBe(
      'invalid-argument',
    );
    expect(message({ providers: { pay: { perTenant: window, onExhausted: 'fial' } } })?.[1]).toBe(
      `providers.pay.onExhausted must be 'wait' or 'fail', not "fial"`,
    );
    expect(message({ providers: { pay: 5 } })?.[1]).toBe('providers.pay must be an object, not 5');
    expect(message({ tenants: { North: { default: { maxRunning: 2 } } } })).toBeUndefined();
    expect(message({ tenants: { North: { default: { maxRuning: 2 } } } })?.[1]).toBe(
      'tenants.North.default: unknown key maxRuning (known: maxRunning, maxWaiting, weight)',
    );
    expect(message({ classes: { bulk: { maxQueue: 5 } } })?.[1]).toBe(
      'classes.bulk: unknown key maxQueue (known: maxQueued, tenant)',
    );
    expect(message({ classes: { bulk: { tenant: { wieght: 2 } } } })?.[0]).toBe('invalid-argument');
  });

  it("the service's shutdown grace, port, body limit and worker options are checked before it opens anything", async () => {
    const db = '/nonexistent/never-opened.db';
    const configs = [
      ...[-1, Number.NaN, MAX_TIMER_MS + 1].map((shutdownGraceMs) => ({ db, shutdownGraceMs })),
      ...[-1, 65_536, 80.5].map((port) => ({ db, http: { port } })),
      { db, http: { bodyLimitBytes: 0 } },
      ...[-1, Number.NaN, MAX_TIMER_MS + 1].map((drainMs) => ({ db, http: { drainMs } })),
      { db, worker: { pollIntervalMs: 0 } },
      { db, classes: { default: { maxQueued: -1 } } },
      { db, classes: { default: { tenant: { maxRunning: 2 ** 31 } } } },
      { db, providers: { pay: { rate: { limit: -1, windowMs: 1000 } } } },
      { db, providers: { pay: { global: { limit: 2 ** 53, windowMs: 1000 } } } },
      { db, providers: { pay: { perTenant: { limit: 10, windowMs: 101 * 365 * 86_400_000 } } } },
      { db, providers: { pay: { perTenant: { windowMs: 1000 } as { limit: number; windowMs: number } } } },
      { db, providers: { pay: { ratePerTenant: { limit: 1.5, windowMs: 1000 } } } },
      { db, providers: { pay: { ratePerTenant: { limit: 5, windowMs: 1000, tenants: { North: -1 } } } } },
    ];
    for (const config of configs)
      await expect(startService(config)).rejects.toMatchObject({ code: 'invalid-argument' });
    // The drain's edges are taken: 0, and the longest a timer waits (bounded by the grace at stop).
    const dir = mkdtempSync(join(tmpdir(), 'sluice-drain-edge-'));
    try {
      for (const drainMs of [0, MAX_TIMER_MS]) {
        const service = await startService(
          { db: join(dir, 'sluice.db'), http: { drainMs } },
          { role: 'api', port: 0, logger: silent },
        );
        await service.stop({ graceMs: 0 });
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("a SQLite file's folder is made when missing; one that cannot be made is refused", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-folder-'));
    try {
      // As the README's quick start names it, in a folder that does not exist yet.
      const store = sqliteStore({ path: join(dir, 'data', 'deeper', 'sluice.db') });
      await store.migrate();
      await store.close();
      expect(statSync(join(dir, 'data', 'deeper', 'sluice.db')).isFile()).toBe(true);
      // A file where the folder should be.
      writeFileSync(join(dir, 'plain'), '');
      let refused: unknown;
      try {
        sqliteStore({ path: join(dir, 'plain', 'sluice.db') });
      } catch (error) {
        refused = error;
      }
      expect(refused).toMatchObject({ code: 'invalid-argument' });
      expect(String((refused as Error).message)).toContain(`cannot create ${join(dir, 'plain')}`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the stores' options, checked before a file or a connection is opened", () => {
    const path = '/nonexistent/never-opened.db';
    expect(codeOf(() => sqliteStore({ path, synchronous: 'OFF' as 'FULL' }))).toBe('invalid-argument');
    expect(codeOf(() => sqliteStore({ path, busyTimeoutMs: -1 }))).toBe('invalid-argument');
    expect(codeOf(() => sqliteStore({ path, busyTimeoutMs: 2.5 }))).toBe('invalid-argument');
    const url = 'postgres://nobody@127.0.0.1:1/none';
    for (const options of [
      { poolSize: 0 },
      { poolSize: 1001 },
      { connectTimeoutMs: MAX_TIMER_MS + 1 },
      { statementTimeoutMs: -1 },
    ])
      expect(codeOf(() => postgresStore({ connectionString: url, ...options }))).toBe('invalid-argument');
    // At the edges, the factories build their stores without connecting.
    expect(
      codeOf(() => postgresStore({ connectionString: url, poolSize: 1000, statementTimeoutMs: 0 })),
    ).toBeUndefined();
  });
});
