/**
 * Budgets are enforced, not alerted: over a spend budget the provider is never called (its
 * ledger proves it), a call-rate cap defers requests to the next window, and the service-wide
 * retry budget keeps retries under 10% of first attempts plus a floor while a dependency is down.
 */
import { once } from 'node:events';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isTerminal, Sluice, sqliteStore } from '../../src/index.js';
import { FakeClock, ProviderStub } from '../../src/testing/index.js';
import { type Harness, harness, silent } from '../helpers/engine.js';
import { captureLog } from '../helpers/log-capture.js';

const HOUR = 3_600_000;

function defineCharge(sluice: Sluice, provider: ProviderStub, maxAttempts = 5) {
  sluice.define('charge', {
    input: z.object({ amount_cents: z.number().int().positive() }),
    limits: { maxAttempts, deadlineMs: null, backoff: { baseMs: 0, capMs: 0 } },
    async run(input, ctx) {
      const charge = await ctx.effect('charge', {
        provider: 'payments',
        cost: input.amount_cents,
        call: ({ key, signal }) => provider.charge({ key, params: { tenant: ctx.tenant, ...input }, signal }),
      });
      return { charge: charge.id };
    },
  });
}

/** Waits until every listed operation is terminal or waiting for a time the fake clock has not reached. */
async function quiescent(h: Harness, clock: FakeClock, ids: string[], tenant = 'North') {
  for (const id of ids) {
    await h.sluice.wait(
      { tenant, id },
      {
        timeoutMs: 20_000,
        until: (o) => isTerminal(o.state) || (o.state === 'queued' && Date.parse(o.runAfter) > clock.now()),
      },
    );
  }
}

describe('spend budgets', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it("refuses an effect's cost out of range before sending, budgeted provider or not", async () => {
    const { logger, lines } = captureLog('warn');
    h = await harness({
      sluice: { logger, providers: { payments: { perTenant: { limit: 5000, windowMs: HOUR } } } },
    });
    const provider = new ProviderStub();
    h.sluice.define('priced', {
      input: z.object({ provider: z.string(), cost: z.number() }),
      limits: { maxAttempts: 1 },
      run: (input, ctx) =>
        ctx.effect('charge', {
          provider: input.provider,
          cost: input.cost,
          call: ({ key, signal }) =>
            provider.charge({ key, params: { tenant: ctx.tenant, amount_cents: 1 }, signal }),
        }),
    });
    h.worker().start();
    // A handler's bug, as an effect name out of range is: dead at once (retried, the same code
    // would make the same call), waiting for a fixed deploy and a redrive.
    const cases: Array<[string, number, string]> = [
      ['payments', -1, 'dead'],
      ['unbudgeted', -1, 'dead'],
      ['unbudgeted', 2 ** 53, 'dead'],
      ['unbudgeted', 1.5, 'dead'],
      ['constructor', 5, 'succeeded'], // not a budget: a name Object.prototype has
      ['unbudgeted', Number.MAX_SAFE_INTEGER, 'succeeded'],
    ];
    const ends: Array<[string, number, string, string | undefined, number]> = [];
    for (const [i, [name, cost]] of cases.entries()) {
      await h.sluice.submit({
        tenant: 'North',
        id: `c${i}`,
        kind: 'priced',
        input: { provider: name, cost },
      });
      const done = await h.sluice.wait({ tenant: 'North', id: `c${i}` });
      ends.push([name, cost, done.state, done.error?.code, done.attempt]);
    }
    expect(ends).toEqual(
      cases.map(([name, cost, state]) => [
        name,
        cost,
        state,
        state === 'dead' ? 'invalid-argument' : undefined,
        1,
      ]),
    );
    // Only the two in range were sent.
    expect(provider.calls).toBe(2);
    // A provider with no budgets, where another has some (a typo, most likely), is told once per
    // name, however many effects name it; the budgeted one, never.
    const told = lines.filter((l) => String(l.msg).startsWith('an effect names a provider with no budgets'));
    expect(told.map((l) => [l.provider, l.budgeted])).toEqual([
      ['unbudgeted', ['payments']],
      ['constructor', ['payments']],
    ]);
  });

  it('fails at once a charge over the whole limit, even where exhaustion waits', async () => {
    h = await harness({
      sluice: {
        providers: { payments: { perTenant: { limit: 5000, windowMs: HOUR }, onExhausted: 'wait' } },
      },
    });
    const provider = new ProviderStub();
    defineCharge(h.sluice, provider);
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'huge', kind: 'charge', input: { amount_cents: 6000 } });
    const done = await h.sluice.wait({ tenant: 'North', id: 'huge' });
    // Waiting for the next window would wait for ever: no window holds 6,000 of 5,000.
    expect([done.state, done.error?.code, done.attempt, provider.calls]).toEqual([
      'failed',
      'budget-exhausted',
      1,
      0,
    ]);
    expect(done.error?.message).toMatch(/can never be spent/);
  });

  it('never calls the provider beyond the budget: the ledger stays within it (onExhausted: fail)', async () => {
    const clock = new FakeClock();
    h = await harness({
      clock,
      sluice: {
        providers: { payments: { perTenant: { limit: 10_000, windowMs: HOUR }, onExhausted: 'fail' } },
      },
    });
    const provider = new ProviderStub({ clock });
    defineCharge(h.sluice, provider);
    h.worker({ slots: { default: 4 } }).start();
    const ids = Array.from({ length: 6 }, (_, i) => `c${i}`);
    for (const id of ids)
      await h.sluice.submit({ tenant: 'North', id, kind: 'charge', input: { amount_cents: 3000 } });
    const ops = await Promise.all(ids.map((id) => h.sluice.wait({ tenant: 'North', id })));
    const states = ops.map((o) => o.state).sort();
    expect(states).toEqual(['failed', 'failed', 'failed', 'succeeded', 'succeeded', 'succeeded']);
    expect(ops.filter((o) => o.state === 'failed').every((o) => o.error?.code === 'budget-exhausted')).toBe(
      true,
    );
    const spent = provider.ledger().reduce((sum, c) => sum + c.amount_cents, 0);
    expect(spent).toBe(9000);
    expect(provider.calls).toBe(3);
    const usage = await h.store.budgetUsage({ prefix: 'spend:payments:tenant:North', since: clock.now() });
    expect(usage.map((u) => [u.reserved, u.committed])).toEqual([[0, 9000]]);
  });

  it('waits for the next window instead (onExhausted: wait), without using attempts', async () => {
    const clock = new FakeClock('2026-01-01T12:00:00Z');
    h = await harness({
      clock,
      sluice: { providers: { payments: { perTenant: { limit: 5000, windowMs: HOUR } } } },
    });
    const provider = new ProviderStub({ clock });
    defineCharge(h.sluice, provider, 1);
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'a', kind: 'charge', input: { amount_cents: 4000 } });
    await h.sluice.wait({ tenant: 'North', id: 'a' });
    await h.sluice.submit({ tenant: 'North', id: 'b', kind: 'charge', input: { amount_cents: 4000 } });
    await quiescent(h, clock, ['b']);
    const waiting = await h.sluice.get({ tenant: 'North', id: 'b' });
    expect([waiting?.state, waiting?.attempt, waiting?.error?.code]).toEqual([
      'queued',
      0,
      'budget-exhausted',
    ]);
    expect(Date.parse(waiting!.runAfter)).toBeGreaterThanOrEqual(Date.parse('2026-01-01T13:00:00Z'));
    expect(provider.calls).toBe(1);
    clock.set(Date.parse(waiting!.runAfter));
    const done = await h.sluice.wait({ tenant: 'North', id: 'b' });
    expect([done.state, done.attempt]).toEqual(['succeeded', 1]);
    expect(provider.ledger()).toHaveLength(2);
  });

  it('a call-rate cap defers requests to the next window', async () => {
    const clock = new FakeClock();
    h = await harness({ clock, sluice: { providers: { payments: { rate: { limit: 2, windowMs: 1000 } } } } });
    const provider = new ProviderStub({ clock });
    defineCharge(h.sluice, provider);
    h.worker().start();
    const ids = ['r1', 'r2', 'r3', 'r4', 'r5'];
    for (const id of ids)
      await h.sluice.submit({ tenant: 'North', id, kind: 'charge', input: { amount_cents: 1 } });
    for (let window = 0; window < 5; window++) {
      await quiescent(h, clock, ids);
      // Never more than 2 requests in any 1 s window.
      expect(provider.calls).toBeLessThanOrEqual(2 * (window + 1));
      clock.advance(1000);
    }
    for (const id of ids) expect((await h.sluice.wait({ tenant: 'North', id })).state).toBe('succeeded');
    expect(provider.calls).toBe(5);
  });

  it("a tenant's call rate leaves the provider's rate to the others", async () => {
    const clock = new FakeClock();
    h = await harness({
      clock,
      sluice: {
        providers: {
          payments: { rate: { limit: 100, windowMs: 1000 }, ratePerTenant: { limit: 1, windowMs: 1000 } },
        },
      },
    });
    const provider = new ProviderStub({ clock });
    defineCharge(h.sluice, provider);
    h.worker().start();
    for (const id of ['n1', 'n2', 'n3'])
      await h.sluice.submit({ tenant: 'North', id, kind: 'charge', input: { amount_cents: 1 } });
    await h.sluice.submit({ tenant: 'South', id: 's1', kind: 'charge', input: { amount_cents: 1 } });
    await quiescent(h, clock, ['n1', 'n2', 'n3']);
    await quiescent(h, clock, ['s1'], 'South');
    // In this window North sent one request, and South's was not held up behind North's.
    expect((await h.sluice.get({ tenant: 'South', id: 's1' }))?.state).toBe('succeeded');
    expect(provider.calls).toBe(2);
    for (let window = 0; window < 4; window++) {
      clock.advance(1000);
      await quiescent(h, clock, ['n1', 'n2', 'n3']);
    }
    for (const id of ['n1', 'n2', 'n3'])
      expect((await h.sluice.wait({ tenant: 'North', id })).state).toBe('succeeded');
    expect(provider.calls).toBe(4);
  });

  it('an attempt the cap deferred is not a first attempt when it runs', async () => {
    const clock = new FakeClock();
    h = await harness({ clock, sluice: { providers: { payments: { rate: { limit: 1, windowMs: 1000 } } } } });
    const provider = new ProviderStub({ clock });
    defineCharge(h.sluice, provider);
    const firsts: Array<[string, number | null]> = [];
    h.sluice.events.on('attempt-started', (e) => firsts.push([e.id, e.firstAttemptAgeMs]));
    h.worker().start();
    for (const id of ['d1', 'd2'])
      await h.sluice.submit({ tenant: 'North', id, kind: 'charge', input: { amount_cents: 1 } });
    for (let window = 0; window < 4; window++) {
      await quiescent(h, clock, ['d1', 'd2']);
      clock.advance(1000);
    }
    for (const id of ['d1', 'd2'])
      expect((await h.sluice.wait({ tenant: 'North', id })).state).toBe('succeeded');
    // More starts at attempt 1 than operations (the cap deferred one), and two first attempts.
    expect(firsts.length).toBeGreaterThan(2);
    expect(
      firsts
        .filter(([, age]) => age !== null)
        .map(([id]) => id)
        .sort(),
    ).toEqual(['d1', 'd2']);
  });
});

describe('the service-wide retry budget', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('counts the retries of a worker that does not know the kind too', async () => {
    const budget = { ratio: 0, floor: 0 };
    h = await harness({ sluice: { retryBudget: budget } });
    h.sluice.define('known', { input: z.object({}), run: () => 1 });
    await h.sluice.submit({ tenant: 'North', id: 'k1', kind: 'known', input: {} });
    // A worker of a rolling deploy, on the same file, without the kind.
    const older = new Sluice({ store: sqliteStore({ path: h.dbPath }), logger: silent, retryBudget: budget });
    older.define('other', { input: z.object({}), run: () => 1 });
    const worker = older.worker({
      tempRoot: join(h.dir, 'older'),
      pollIntervalMs: 20,
      rescueIntervalMs: false,
    });
    const ended = once(worker, 'attempt');
    worker.start();
    await ended;
    await older.close({ graceMs: 100 });
    // Its retry asked the budget, which had nothing to give: deferred, and counted as denied.
    expect((await h.sluice.get({ tenant: 'North', id: 'k1' }))?.error?.code).toBe('retry-budget-exhausted');
    const stats = await h.store.retryBudgetStats({ windowMs: 60_000 });
    expect([stats.retries, stats.denials]).toEqual([0, 1]);
  });

  it('keeps retries within 10% of first attempts plus the floor while the provider fails every call', async () => {
    const clock = new FakeClock();
    h = await harness({ clock, sluice: { retryBudget: { ratio: 0.1, floor: 10, windowMs: 60_000 } } });
    const provider = new ProviderStub({ clock });
    provider.failNext(1_000_000, 'unavailable');
    defineCharge(h.sluice, provider);
    h.worker({ slots: { default: 8 } }).start();
    const ids = Array.from({ length: 200 }, (_, i) => `op-${i}`);
    for (const id of ids)
      await h.sluice.submit({ tenant: 'North', id, kind: 'charge', input: { amount_cents: 100 } });
    await quiescent(h, clock, ids);
    const stats = await h.store.retryBudgetStats({ windowMs: 60_000 });
    expect(stats.firstAttempts).toBe(200);
    expect(stats.retries).toBeLessThanOrEqual(10 + 0.1 * 200);
    expect(stats.retries).toBeGreaterThanOrEqual(29); // the budget was used, not just refused
    expect(stats.denials).toBeGreaterThan(0);
    // What the provider saw: first attempts plus the retries the budget allowed, nothing more.
    expect(provider.calls).toBe(stats.firstAttempts + stats.retries);
    console.log(
      `retry budget: first=${stats.firstAttempts} retries=${stats.retries} denials=${stats.denials} calls=${provider.calls}`,
    );
  });
});

describe('a retry denied again and again', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('waits on a ceiling that doubles with each denial, up to the window', async () => {
    const clock = new FakeClock();
    h = await harness({
      clock,
      sluice: {
        random: () => 0.999,
        retryBudget: { ratio: 0, floor: 0, windowMs: 600_000, deferMaxMs: 1000 },
      },
    });
    const provider = new ProviderStub({ clock });
    provider.failNext(1_000_000, 'unavailable');
    defineCharge(h.sluice, provider);
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'r1', kind: 'charge', input: { amount_cents: 1 } });
    const delays: number[] = [];
    for (let denial = 1; denial <= 4; denial++) {
      const op = await h.sluice.wait(
        { tenant: 'North', id: 'r1' },
        { until: (o) => (o.error?.details as { denials?: number } | undefined)?.denials === denial },
      );
      expect(op.error?.code).toBe('retry-budget-exhausted');
      delays.push(Date.parse(op.runAfter) - clock.now());
      clock.set(Date.parse(op.runAfter));
    }
    // 0.999 of 1 s, 2 s, 4 s, 8 s: never a query every few seconds for ever.
    expect(delays).toEqual([999, 1998, 3996, 7992]);
    expect(provider.calls).toBe(1);
  });
});

describe('the per-operation cap on provider requests', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('stops the operation before the request that would go over maxProviderCalls', async () => {
    h = await harness();
    const provider = new ProviderStub();
    h.sluice.define('fan-out', {
      input: z.object({ parts: z.number().int() }),
      limits: { maxProviderCalls: 2 },
      async run(input, ctx) {
        for (let i = 0; i < input.parts; i++) {
          await ctx.effect(`part-${i}`, {
            call: ({ key }) => provider.charge({ key, params: { amount_cents: 1 } }),
          });
        }
        return { parts: input.parts };
      },
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'two', kind: 'fan-out', input: { parts: 2 } });
    await h.sluice.submit({ tenant: 'North', id: 'three', kind: 'fan-out', input: { parts: 3 } });
    expect((await h.sluice.wait({ tenant: 'North', id: 'two' })).state).toBe('succeeded');
    const three = await h.sluice.wait({ tenant: 'North', id: 'three' });
    expect([three.state, three.error?.code]).toEqual(['failed', 'provider-call-limit-exceeded']);
    // Two requests for each operation, none for the third part.
    expect(provider.calls).toBe(4);
  });
});
