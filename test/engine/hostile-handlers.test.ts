/**
 * Handlers that misbehave on purpose, on a real SQLite store and worker: errors that carry the
 * engine's own codes, thrown values nothing can read (revoked proxies, a proxy whose every trap
 * throws another such proxy), `record` and `reference` that throw them, an effect that asks for
 * itself from inside its own callbacks, late calls of a finished attempt that no one awaits, and
 * codes that are not codes. Each once hijacked its operation's outcome, left it without an end
 * (a crash loop), or took the whole process down.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import {
  Ambiguous,
  BudgetExhausted,
  CancelRequested,
  isAttemptEnded,
  type KindLimits,
  type Operation,
  type OperationContext,
  Permanent,
  Retryable,
} from '../../src/index.js';
import { type Harness, harness } from '../helpers/engine.js';
import { Gate } from '../helpers/gate.js';
import { captureLog } from '../helpers/log-capture.js';

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const ref = (id: string) => ({ tenant: 'North', id });

/**
 * A Proxy whose every trap throws another such Proxy: nothing about it can be read. Of an object
 * (`typeof` says `object`, and a guard goes on to read it) or of a function.
 */
const abyss = (target: object = {}): object =>
  new Proxy(
    target,
    new Proxy(
      {},
      {
        get: () => () => {
          throw abyss(target);
        },
      },
    ),
  );
const abyssOfFunction = () => abyss(() => {});

/** A Proxy revoked before it is thrown (an Immer draft once its producer has returned). */
function revoked(): object {
  const { proxy, revoke } = Proxy.revocable({}, {});
  revoke();
  return proxy;
}

/** An object whose every read throws, `Symbol.toStringTag` included, and that has no string form. */
function gettersThrow(): object {
  const value = {};
  for (const key of ['message', 'name', 'stack', 'code', 'details', Symbol.toStringTag, Symbol.toPrimitive])
    Object.defineProperty(value, key, {
      get() {
        throw new Error(`getter ${String(key)}`);
      },
    });
  return Object.defineProperty(value, 'toString', { value: null });
}

/**
 * The lease is ten minutes and no rescue runs (the harness): an attempt that writes no end leaves
 * its operation running past the wait's 10 s, and the wait fails.
 */
const ended = (id: string) => h!.sluice.wait(ref(id), { timeoutMs: 10_000 });

/** The last failure an operation `dead` for exhausted attempts keeps. */
const lastError = (op: Operation) =>
  (op.error?.details as { lastError?: { code: string; message: string } } | undefined)?.lastError;

describe("a handler's error that carries one of the engine's own codes", () => {
  it('fails at once, after a charge, when it is a Permanent with the code of a cancel: not given back for ever', async () => {
    h = await harness();
    let runs = 0;
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      // Bounds the loop this once was: the attempt given back uncounted until the deadline.
      limits: { deadlineMs: 5000 },
      async run(_input, ctx) {
        runs++;
        await ctx.effect('charge', { call: async () => ({ id: `ch_${++calls}` }) });
        // The provider said the customer cancelled the order; the application kept its own code.
        throw new Permanent('the customer cancelled the order', { code: 'cancel-requested' });
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('livelock'), kind: 'job', input: {} });
    const done = await ended('livelock');
    // It failed after its charge: the record says so (core/decisions.ts notingEffectsHappened).
    expect([done.state, done.error?.code, done.error?.message, done.error?.details, runs, calls]).toEqual([
      'failed',
      'cancel-requested',
      'the customer cancelled the order (after an effect that happened: charge)',
      { effectsHappened: ['charge'] },
      1,
      1,
    ]);
    expect((await h.store.effectList(ref('livelock')))[0]?.state).toBe('committed');
  });

  const once: KindLimits = { maxAttempts: 1, deadlineMs: 5000 };
  it.each([
    [
      'a Permanent with the code of a cancel, before any effect',
      () => new Permanent('the order was cancelled', { code: 'cancel-requested' }),
      ['failed', 'cancel-requested', 'the order was cancelled'],
    ],
    [
      'a Retryable with the code of an effect whose outcome is unknown',
      () => new Retryable('mine', { code: 'effect-outcome-unknown' }),
      ['dead', 'effect-outcome-unknown', 'mine'],
    ],
    [
      'a Retryable with the code of the deadline',
      () => new Retryable('my own deadline', { code: 'deadline-exceeded' }),
      ['dead', 'deadline-exceeded', 'my own deadline'],
    ],
    [
      'a Permanent with the code of the deadline',
      () => new Permanent('my own deadline', { code: 'deadline-exceeded' }),
      ['failed', 'deadline-exceeded', 'my own deadline'],
    ],
    [
      'a Retryable with the code of a temp limit',
      () => new Retryable('disk', { code: 'temp-limit-exceeded' }),
      ['dead', 'temp-limit-exceeded', 'disk'],
    ],
    [
      'a Retryable with the code of an invalid input',
      () => new Retryable('upstream said so', { code: 'input-invalid' }),
      ['dead', 'input-invalid', 'upstream said so'],
    ],
    [
      'an Ambiguous with the code of a spent budget',
      () => new Ambiguous('quota', { code: 'budget-exhausted' }),
      ['dead', 'budget-exhausted', 'quota'],
    ],
    [
      'a CancelRequested the handler made',
      () => new CancelRequested('mine'),
      ['dead', 'cancel-requested', 'operation mine was cancelled'],
    ],
    [
      'a BudgetExhausted the handler made',
      () => new BudgetExhausted('spend:mine', 0),
      ['dead', 'budget-exhausted', expect.stringContaining('spend:mine')],
    ],
    [
      'an object carrying the mark of a Sluice error and the code of a cancel',
      () =>
        Object.defineProperty({ code: 'cancel-requested', message: 'forged' }, Symbol.for('sluice.error'), {
          value: true,
        }),
      // Not an Error: its message is its string form, as any thrown object's.
      ['dead', 'cancel-requested', '[object Object]'],
    ],
  ])('classifies %s as its class says, its code kept', async (_what, thrown, [state, code, message]) => {
    h = await harness();
    let runs = 0;
    h.sluice.define('job', {
      input: z.object({}),
      limits: once,
      run: () => {
        runs++;
        throw thrown();
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('own'), kind: 'job', input: {} });
    const done = await ended('own');
    const error = state === 'dead' ? lastError(done) : done.error;
    expect([done.state, runs, error]).toEqual([state, 1, expect.objectContaining({ code, message })]);
    if (state === 'dead') expect(done.error?.code).toBe('attempts-exhausted');
  });

  it('retries a Retryable with the code of a lost lease, and the journal keeps its committed charge', async () => {
    h = await harness();
    let runs = 0;
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 2, backoff: { baseMs: 1, capMs: 1 } },
      async run(_input, ctx) {
        runs++;
        await ctx.effect('charge', { call: async () => ({ id: `ch_${++calls}` }) });
        throw new Retryable('the session was lost', { code: 'lease-lost' });
      },
    });
    h.worker({ leaseMs: 600_000 }).start();
    await h.sluice.submit({ ...ref('lease'), kind: 'job', input: {} });
    const done = await ended('lease');
    expect([done.state, done.error?.code, runs, calls]).toEqual(['dead', 'attempts-exhausted', 2, 1]);
    expect(lastError(done)?.code).toBe('lease-lost');
    expect((await h.store.effectList(ref('lease')))[0]?.state).toBe('committed');
  });

  it('keeps the meaning of an error the engine gave the handler and the handler threw again', async () => {
    h = await harness();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({ wrong: z.boolean() }),
      limits: { maxProviderCalls: 1 },
      async run({ wrong }, ctx) {
        await ctx.effect('first', { call: async () => ++calls });
        // Caught, kept a while, and thrown again as it was.
        const refused = await ctx.effect(wrong ? 'not a name' : 'second', { call: async () => ++calls }).then(
          () => undefined,
          (error: unknown) => error,
        );
        throw refused;
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('limit'), kind: 'job', input: { wrong: false } });
    await h.sluice.submit({ ...ref('wrong'), kind: 'job', input: { wrong: true } });
    // The store's refusal of a second request, over the operation's cap: failed at once.
    expect(await ended('limit')).toMatchObject({
      state: 'failed',
      attempt: 1,
      error: { code: 'provider-call-limit-exceeded' },
    });
    // Sluice's refusal of a wrong call: dead at once.
    expect(await ended('wrong')).toMatchObject({
      state: 'dead',
      attempt: 1,
      error: { code: 'invalid-argument' },
    });
    expect(calls).toBe(2);
  });
});

describe('a thrown value the engine cannot read', () => {
  it.each([
    ['a revoked Proxy', revoked],
    ['a Proxy whose every trap throws another such Proxy', abyss],
    ['such a Proxy of a function', abyssOfFunction],
    ['an object whose getters throw, Symbol.toStringTag included', gettersThrow],
  ])(
    'ends the operation when the handler throws %s after a charge, and the worker runs on',
    async (_what, make) => {
      h = await harness();
      let calls = 0;
      h.sluice.define('bad', {
        input: z.object({}),
        limits: { maxAttempts: 1 },
        async run(_input, ctx) {
          await ctx.effect('charge', { call: async () => ({ id: `ch_${++calls}` }) });
          throw make();
        },
      });
      h.sluice.define('good', { input: z.object({}), run: () => 'ran' });
      h.worker({ leaseMs: 600_000, slots: { default: 1 } }).start();
      await h.sluice.submit({ ...ref('bad'), kind: 'bad', input: {} });
      await h.sluice.submit({ ...ref('good'), kind: 'good', input: {} });
      const done = await ended('bad');
      expect([done.state, done.error?.code, calls]).toEqual(['dead', 'attempts-exhausted', 1]);
      expect(lastError(done)).toMatchObject({
        code: 'unclassified-error',
        message: expect.stringMatching(/^the handler threw a value that cannot be read/),
      });
      expect((await ended('good')).result).toBe('ran');
    },
  );

  it("ends needs_reconciliation, nothing sent again, when an effect's record throws one", async () => {
    h = await harness();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        return ctx.effect('charge', {
          call: async () => ({ id: `ch_${++calls}` }),
          record: () => {
            throw abyss();
          },
        });
      },
    });
    h.worker({ leaseMs: 600_000 }).start();
    await h.sluice.submit({ ...ref('record'), kind: 'job', input: {} });
    const done = await ended('record');
    expect([done.state, done.error?.code, calls]).toEqual([
      'needs_reconciliation',
      'effect-result-not-json',
      1,
    ]);
    expect(done.error?.message).toMatch(/record\(\) threw: .*cannot be read/);
  });

  it("retries, its effect pending, when an effect's call throws one after the provider acted", async () => {
    h = await harness();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 1 },
      async run(_input, ctx) {
        return ctx.effect('charge', {
          call: async () => {
            calls++;
            throw abyss();
          },
        });
      },
    });
    h.worker({ leaseMs: 600_000 }).start();
    await h.sluice.submit({ ...ref('call'), kind: 'job', input: {} });
    const done = await ended('call');
    expect([done.state, done.error?.code, calls]).toEqual(['dead', 'attempts-exhausted', 1]);
    expect(lastError(done)?.message).toMatch(/^effect charge's call threw a value that cannot be read/);
    expect((await h.store.effectList(ref('call')))[0]?.state).toBe('pending');
  });

  it("asks again, and ends, when an effect's lookup throws one", async () => {
    h = await harness();
    let calls = 0;
    let lookups = 0;
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 2, backoff: { baseMs: 1, capMs: 1 } },
      async run(_input, ctx) {
        return ctx.effect('charge', {
          call: async () => {
            calls++;
            throw new Ambiguous('timed out after sending');
          },
          lookup: async () => {
            lookups++;
            throw abyss();
          },
        });
      },
    });
    h.worker({ leaseMs: 600_000 }).start();
    await h.sluice.submit({ ...ref('lookup'), kind: 'job', input: {} });
    const done = await ended('lookup');
    expect([done.state, done.error?.code, calls, lookups]).toEqual(['dead', 'attempts-exhausted', 1, 1]);
    expect(lastError(done)?.message).toMatch(/^effect charge's lookup threw a value that cannot be read/);
  });

  it.each([
    [
      'a getter that throws such a value',
      () => ({
        get x() {
          throw abyss();
        },
      }),
    ],
    [
      'a Proxy read as no promise, whose other traps throw such values',
      () =>
        new Proxy(
          {},
          {
            get: (_target, key) => {
              if (key === 'then') return undefined;
              throw abyss();
            },
            ownKeys: () => {
              throw abyss();
            },
            getPrototypeOf: () => {
              throw abyss();
            },
          },
        ),
    ],
    ['an object holding a revoked Proxy', () => ({ draft: revoked() })],
  ])('refuses a result holding %s: result-not-json, dead, its charge kept', async (_what, make) => {
    h = await harness();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        await ctx.effect('charge', { call: async () => ({ id: `ch_${++calls}` }) });
        return make();
      },
    });
    h.worker({ leaseMs: 600_000 }).start();
    await h.sluice.submit({ ...ref('result'), kind: 'job', input: {} });
    const done = await ended('result');
    expect([done.state, done.error?.code, calls]).toEqual(['dead', 'result-not-json', 1]);
    expect((await h.store.effectList(ref('result')))[0]?.state).toBe('committed');
  });
});

describe('an effect whose record or reference throws a value with no string form', () => {
  it.each([
    ['an object without a prototype', () => Object.create(null)],
    ['a Proxy whose every trap throws', abyss],
  ])('asks a person when record throws %s: nothing sent again', async (_what, make) => {
    h = await harness();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        return ctx.effect('charge', {
          call: async () => ({ id: `ch_${++calls}` }),
          record: () => {
            throw make();
          },
        });
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('record'), kind: 'job', input: {} });
    const done = await ended('record');
    expect([done.state, done.error?.code, calls]).toEqual([
      'needs_reconciliation',
      'effect-result-not-json',
      1,
    ]);
    expect((await h.store.effectList(ref('record')))[0]?.state).toBe('pending');
  });

  it.each([
    ['an object without a prototype', () => Object.create(null)],
    ['a Proxy whose every trap throws', abyss],
  ])('records the effect without a reference when reference throws %s', async (_what, make) => {
    const { logger, lines } = captureLog('warn');
    h = await harness({ sluice: { logger } });
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        return ctx.effect('charge', {
          call: async () => ({ id: `ch_${++calls}` }),
          reference: () => {
            throw make();
          },
        });
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('reference'), kind: 'job', input: {} });
    const done = await ended('reference');
    expect([done.state, done.result, calls]).toEqual(['succeeded', { id: 'ch_1' }, 1]);
    const [effect] = await h.store.effectList(ref('reference'));
    expect([effect?.state, effect?.reference]).toEqual(['committed', null]);
    expect(lines.map((l) => [l.msg, l.why])).toContainEqual([
      expect.stringMatching(/^an effect's reference cannot be kept/),
      expect.stringMatching(/^reference\(\) threw: /),
    ]);
  });
});

describe('an effect that asks for itself from inside its own callbacks', () => {
  /** Runs kind `job`, whose effect `charge` is given `options(ctx)`; returns the end and the calls. */
  async function selfCall(options: (ctx: OperationContext, count: () => number) => object) {
    h = await harness();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      // This once waited on itself until the attempt's timeout, every attempt.
      limits: { maxAttempts: 2, attemptTimeoutMs: 5000, backoff: { baseMs: 1, capMs: 1 } },
      async run(_input, ctx) {
        return ctx.effect('charge', options(ctx, () => ++calls) as never);
      },
    });
    h.worker({ leaseMs: 600_000 }).start();
    await h.sluice.submit({ ...ref('self'), kind: 'job', input: {} });
    return { done: await ended('self'), calls: () => calls };
  }

  it('is refused inside record: invalid-argument, dead at once', async () => {
    const { done, calls } = await selfCall((ctx, count) => ({
      call: async () => ({ id: `ch_${count()}` }),
      record: async () => ctx.effect('charge', { call: async () => ({ id: 'inner' }) }),
    }));
    expect([done.state, done.error?.code, done.attempt, calls()]).toEqual(['dead', 'invalid-argument', 1, 1]);
    expect(done.error?.message).toMatch(/effect charge .* its own/);
  });

  it('is refused inside lookup: invalid-argument, dead at once', async () => {
    const { done, calls } = await selfCall((ctx, count) => ({
      call: async () => {
        count();
        throw new Ambiguous('timed out after sending');
      },
      lookup: async () => {
        await ctx.effect('charge', { call: async () => ({ id: 'inner' }) });
        return { status: 'unknown' };
      },
    }));
    expect([done.state, done.error?.code, done.attempt, calls()]).toEqual(['dead', 'invalid-argument', 2, 1]);
  });

  it('is refused inside call: invalid-argument, dead at once', async () => {
    const { done, calls } = await selfCall((ctx, count) => ({
      call: async () => {
        count();
        return ctx.effect('charge', { call: async () => ({ id: 'inner' }) });
      },
    }));
    expect([done.state, done.error?.code, done.attempt, calls()]).toEqual(['dead', 'invalid-argument', 1, 1]);
  });

  it('still joins a second call of the same name from the handler itself', async () => {
    h = await harness();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        const options = {
          call: async () => ({ id: `ch_${++calls}` }),
          record: async (c: { id: string }) => ({ id: c.id }),
        };
        const [a, b] = await Promise.all([ctx.effect('charge', options), ctx.effect('charge', options)]);
        return [a.id, b.id];
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('joined'), kind: 'job', input: {} });
    const done = await ended('joined');
    expect([done.state, done.result, calls]).toEqual(['succeeded', ['ch_1', 'ch_1'], 1]);
  });
});

describe('a late call of a finished attempt that no one awaits', () => {
  type Late = (ctx: OperationContext) => Promise<unknown>;
  const calls: Array<[string, Late, RegExp]> = [
    ['ctx.effect', (ctx) => ctx.effect('late', { call: async () => 1 }), /^ctx\.effect was called after/],
    ['ctx.tempDir', (ctx) => ctx.tempDir(), /^ctx\.tempDir was called after/],
    ['ctx.exec', (ctx) => ctx.exec('true', [], { cwd: 'temp' }), /^a helper call was still running/],
    ['ctx.fetch', (ctx) => ctx.fetch('http://127.0.0.1:9/'), /^a helper call was still running/],
  ];
  it.each(
    calls.flatMap(([what, late, said]) => [
      [what, 'returned', late, said] as const,
      [what, 'timed out', late, said] as const,
    ]),
  )(
    '%s, once the attempt %s, is refused and logged, not left to take the process down',
    async (what, how, late, said) => {
      const { logger, lines } = captureLog('warn');
      h = await harness({ sluice: { logger } });
      const unhandled: unknown[] = [];
      const onUnhandled = (reason: unknown) => unhandled.push(reason);
      process.on('unhandledRejection', onUnhandled);
      try {
        const over = new Gate();
        let refused: Promise<unknown> | undefined;
        h.sluice.define('job', {
          input: z.object({}),
          limits: { maxAttempts: 1, attemptTimeoutMs: 50 },
          run: (_input, ctx) => {
            // A callback the handler left behind, run once its attempt is over, awaited by no one.
            void over.opens.then(() => {
              refused = late(ctx);
            });
            // Or a handler that ignores its signal, past its timeout and its grace.
            return how === 'returned' ? 'returned' : new Promise(() => {});
          },
        });
        h.worker({ abortGraceMs: 10 }).start();
        await h.sluice.submit({ ...ref('late'), kind: 'job', input: {} });
        expect((await ended('late')).state).toBe(how === 'returned' ? 'succeeded' : 'dead');
        over.open();
        await vi.waitFor(() => expect(lines.map((l) => l.msg)).toContainEqual(expect.stringMatching(said)));
        // Node reports an unhandled rejection once the turn that made it is over: a few turns on.
        for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve));
        expect(unhandled).toEqual([]);
        // Whoever does await it still hears of the refusal.
        const error = await refused!.then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeDefined();
        if (what === 'ctx.effect' || what === 'ctx.tempDir') expect(isAttemptEnded(error)).toBe(true);
      } finally {
        process.off('unhandledRejection', onUnhandled);
      }
    },
  );
});

describe('an error code that is not a code', () => {
  it.each([
    ['a number', 42],
    ['an object', { a: 1 }],
    ['5 MB of text', 'c'.repeat(5_000_000)],
    ['a NUL', 'nul\u0000code'],
    ['an empty string', ''],
    ['a space', 'card declined'],
  ])('is stored as the class’s own code when it is %s, and said in the message', async (_what, code) => {
    h = await harness();
    h.sluice.define('job', {
      input: z.object({ permanent: z.boolean() }),
      limits: { maxAttempts: 1 },
      run: ({ permanent }) => {
        throw permanent
          ? new Permanent('declined', { code: code as string })
          : new Retryable('unavailable', { code: code as string });
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('p'), kind: 'job', input: { permanent: true } });
    await h.sluice.submit({ ...ref('r'), kind: 'job', input: { permanent: false } });
    const failed = await ended('p');
    expect([failed.state, failed.error?.code]).toEqual(['failed', 'permanent-failure']);
    expect(failed.error?.message).toMatch(/^declined \(its code .* is not a code/);
    expect(failed.error!.message.length).toBeLessThanOrEqual(2000);
    const dead = await ended('r');
    expect([dead.state, lastError(dead)?.code]).toEqual(['dead', 'retryable-failure']);
    expect(lastError(dead)?.message).toMatch(/^unavailable \(its code .* is not a code/);
  });

  it('keeps a code that is one', async () => {
    h = await harness();
    const codes = ['card_declined', 'Card.Declined-2', 'x'.repeat(100), '402'];
    h.sluice.define('job', {
      input: z.object({ code: z.string() }),
      run: ({ code }) => {
        throw new Permanent('declined', { code });
      },
    });
    h.worker().start();
    for (const [i, code] of codes.entries())
      await h.sluice.submit({ ...ref(`k${i}`), kind: 'job', input: { code } });
    for (const [i, code] of codes.entries())
      expect((await ended(`k${i}`)).error).toMatchObject({ code, message: 'declined' });
  });
});
