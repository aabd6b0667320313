/**
 * The effect protocol at the edges of how handlers use it: the same effect twice at once, an
 * effect still under way when the handler fails, a stop that comes between `pending` and the
 * call, results and errors that are not JSON, a lookup that fails past the retention window,
 * and what a handler's leftovers may still do once its attempt has ended.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { StoreError } from '../../src/core/errors/index.js';
import {
  Ambiguous,
  isAttemptEnded,
  isLeaseLost,
  type KindLimits,
  MAX_ERROR_DETAILS_BYTES,
  Permanent,
  Retryable,
} from '../../src/index.js';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import type { Store } from '../../src/store/store.js';
import { FakeClock, failpoints } from '../../src/testing/index.js';
import { type Harness, harness } from '../helpers/engine.js';
import { Gate } from '../helpers/gate.js';
import { captureLog } from '../helpers/log-capture.js';

const ref = (id: string) => ({ tenant: 'North', id });

/** Defines kind `job`, one effect `charge` whose call is `call`; counts the calls made. */
function chargeJob(
  h: Harness,
  call: () => Promise<unknown>,
  extra: { lookup?: () => Promise<never>; limits?: KindLimits } = {},
): { calls: number } {
  const counted = { calls: 0 };
  h.sluice.define('job', {
    input: z.object({}),
    ...(extra.limits ? { limits: extra.limits } : {}),
    async run(_input, ctx) {
      return ctx.effect('charge', {
        call: async () => {
          counted.calls++;
          return call();
        },
        ...(extra.lookup ? { lookup: extra.lookup } : {}),
      });
    },
  });
  return counted;
}

/** Resolves after `n` turns of the event loop. */
async function turns(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((resolve) => setImmediate(resolve));
}

describe('effects at the edges of a handler', () => {
  let h: Harness;
  afterEach(async () => {
    failpoints.reset();
    await h?.close();
  });

  it('runs one effect for two concurrent calls of the same name, and keeps the lease', async () => {
    h = await harness();
    let calls = 0;
    const working = new Gate();
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        const call = async () => ({ charge: `ch_${++calls}` });
        const [a, b] = await Promise.all([ctx.effect('charge', { call }), ctx.effect('charge', { call })]);
        // Work on, so the mark is written alone while the attempt still runs.
        await working.wait(ctx.signal);
        return { a, b };
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('twice'), kind: 'job', input: {} });
    await working.arrived;
    // The mark's batch left while the handler waits; a refused mark would have stopped it.
    await h.store.effectList(ref('twice')).then((rows) => expect(rows[0]?.state).toBeDefined());
    working.open();
    const done = await h.sluice.wait(ref('twice'));
    expect([done.state, done.attempt]).toEqual(['succeeded', 1]);
    expect(done.result).toEqual({ a: { charge: 'ch_1' }, b: { charge: 'ch_1' } });
    expect(calls).toBe(1);
    const [effect] = await h.store.effectList(ref('twice'));
    expect([effect?.state, effect?.sends]).toEqual(['committed', 1]);
  });

  it('waits for an effect still under way when the handler fails on another', async () => {
    h = await harness();
    const slow = new Gate();
    const failed = new Gate();
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 1 },
      async run(_input, ctx) {
        await Promise.all([
          ctx.effect('slow', {
            call: async ({ signal }) => {
              await slow.wait(signal);
              return { done: true };
            },
          }),
          ctx.effect('refused', {
            call: async () => {
              await slow.arrived;
              throw new Permanent('card declined');
            },
          }),
        ]).catch((error) => {
          failed.open();
          throw error;
        });
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('both'), kind: 'job', input: {} });
    await failed.opens;
    // SQLite writes in the event loop's thread: an end not held back would be written within
    // these turns, and the operation would be over.
    const ended = await Promise.race([
      h.sluice.wait(ref('both')).then(() => true),
      turns(50).then(() => false),
    ]);
    expect(ended).toBe(false);
    expect((await h.sluice.get(ref('both')))?.state).toBe('running');
    slow.open();
    const done = await h.sluice.wait(ref('both'));
    // The slow effect's answer was kept: the journal knows it happened, nothing is left unknown.
    expect([done.state, done.error?.code]).toEqual(['failed', 'permanent-failure']);
    const effects = Object.fromEntries((await h.store.effectList(ref('both'))).map((e) => [e.name, e.state]));
    expect(effects).toEqual({ slow: 'committed', refused: 'failed' });
  });

  it('does not complete an attempt whose effect call outlives the grace: the next attempt recovers the effect', async () => {
    const { logger, lines } = captureLog('warn');
    h = await harness({ sluice: { logger } });
    const outlives = new Gate();
    const signals: AbortSignal[] = [];
    const sends: number[] = [];
    let late: Promise<unknown> | undefined;
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 2, attemptTimeoutMs: 50, backoff: { baseMs: 1, capMs: 1 } },
      async run(_input, ctx) {
        const effect = ctx.effect('ignores', {
          call: async (args) => {
            signals.push(args.signal);
            sends.push(args.send);
            // The first request ignores its signal and answers once the attempt is over.
            if (args.send === 1) await outlives.wait();
            return { charge: 'ch_1' };
          },
        });
        if (ctx.attempt === 1) late = effect;
        void effect.catch(() => {});
        return 'returned';
      },
    });
    h.worker({ abortGraceMs: 10 }).start();
    await h.sluice.submit({ ...ref('late'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('late'));
    // Not `succeeded` over a request still out: retried, and the retry sent under the same key.
    expect([done.state, done.attempt, sends]).toEqual(['succeeded', 2, [1, 2]]);
    expect(signals[0]?.aborted).toBe(true);
    const [first] = (await h.sluice.get(ref('late'), { include: ['attempts'] }))?.attempts ?? [];
    expect(first?.error).toMatchObject({
      code: 'attempt-timeout',
      message: expect.stringContaining('effect ignores was still under way: its outcome is unknown'),
    });
    expect((await h.store.effectList(ref('late')))[0]).toMatchObject({ state: 'committed', sends: 2 });
    // The first request answers at last: its mark is refused, and the worker says so.
    outlives.open();
    await late;
    await vi.waitFor(() =>
      expect(lines.map((l) => [l.msg, l.effect])).toContainEqual([
        expect.stringMatching(/^an effect's call answered after its attempt had ended/),
        'ignores',
      ]),
    );
  });

  it('sends nothing when the attempt is stopped between `pending` and the call', async () => {
    h = await harness();
    let calls = 0;
    let signal: AbortSignal | undefined;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        signal = ctx.signal;
        return ctx.effect('charge', { call: async () => ({ charge: `ch_${++calls}` }) });
      },
    });
    const first = h.worker();
    const stopped = new Gate();
    failpoints.enable('effect.before-call', async () => {
      // The worker shuts down after the `pending` row is written, before the request leaves.
      void first.stop({ graceMs: 0 }).then(() => stopped.open());
      await new Promise((resolve) => signal?.addEventListener('abort', resolve, { once: true }));
    });
    first.start();
    await h.sluice.submit({ ...ref('stopped'), kind: 'job', input: {} });
    await stopped.opens;
    expect(calls).toBe(0);
    const [effect] = await h.store.effectList(ref('stopped'));
    expect(effect?.state).toBe('absent');
    expect((await h.sluice.get(ref('stopped')))?.state).toBe('queued');
    failpoints.reset();
    h.worker().start();
    const done = await h.sluice.wait(ref('stopped'));
    expect([done.state, done.result, calls]).toEqual(['succeeded', { charge: 'ch_1' }, 1]);
  });

  it('refuses a temporary folder to a handler whose attempt has ended', async () => {
    h = await harness();
    const ended = new Gate();
    let late: unknown;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        void ended.opens.then(() =>
          ctx.tempDir().then(
            (path) => {
              late = path;
            },
            (error) => {
              late = error;
            },
          ),
        );
        return null;
      },
    });
    const worker = h.worker();
    worker.start();
    await h.sluice.submit({ ...ref('left'), kind: 'job', input: {} });
    expect((await h.sluice.wait(ref('left'))).state).toBe('succeeded');
    ended.open();
    await turns(2);
    expect(isAttemptEnded(late)).toBe(true);
    expect(worker.tempBytes()).toBe(0);
  });

  it("ends other operations whatever one handler's error carries", async () => {
    h = await harness();
    const circular: Record<string, unknown> = { a: 1 };
    circular.self = circular;
    const big = { blob: 'x'.repeat(MAX_ERROR_DETAILS_BYTES) };
    const thrown: Record<string, unknown> = {
      circular: Object.assign(new Error('boom'), { details: circular }),
      bigint: new Permanent('declined', { details: { amount: 10n } }),
      big: new Permanent('too much', { details: big }),
      nullProto: Object.create(null),
    };
    h.sluice.define('bad', {
      input: z.object({ what: z.string() }),
      limits: { maxAttempts: 1 },
      run: ({ what }) => {
        throw thrown[what];
      },
    });
    h.sluice.define('good', { input: z.object({ n: z.number() }), run: ({ n }) => n });
    for (const what of Object.keys(thrown))
      await h.sluice.submit({ ...ref(what), kind: 'bad', input: { what } });
    for (let n = 0; n < 5; n++) await h.sluice.submit({ ...ref(`g${n}`), kind: 'good', input: { n } });
    h.worker().start();
    for (let n = 0; n < 5; n++) expect((await h.sluice.wait(ref(`g${n}`))).result).toBe(n);
    const ends = Object.fromEntries(
      await Promise.all(
        Object.keys(thrown).map(async (what) => {
          const op = await h.sluice.wait(ref(what));
          return [what, [op.state, op.error?.details]];
        }),
      ),
    );
    expect(ends.circular).toEqual([
      'dead',
      {
        lastError: expect.objectContaining({
          details: { omitted: expect.stringContaining('not JSON') },
        }),
      },
    ]);
    expect(ends.bigint).toEqual(['failed', { omitted: expect.stringContaining('not JSON') }]);
    expect(ends.big).toEqual(['failed', { omitted: expect.stringContaining(`${MAX_ERROR_DETAILS_BYTES}`) }]);
    expect(ends.nullProto?.[0]).toBe('dead');
  });

  it('fails a provider refusal at once even when its details are not JSON', async () => {
    h = await harness();
    const made = chargeJob(h, async () => {
      throw new Permanent('declined', { details: { amount: 10n } });
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('declined'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('declined'));
    expect([done.state, done.attempt, made.calls]).toEqual(['failed', 1, 1]);
    const [effect] = await h.store.effectList(ref('declined'));
    expect(effect?.state).toBe('failed');
  });

  it('fails a provider refusal at once when the write of its answer fails: the answer rides with the end', async () => {
    const store = sqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'sluice-mark-')), 'sluice.db') });
    // The first batch of marks fails before anything is written, as an outage would fail it.
    let failed = 0;
    const flaky: Store = Object.create(store, {
      effectMarkMany: {
        value: async (items: Parameters<Store['effectMarkMany']>[0]) => {
          if (failed++ === 0) throw new StoreError('unavailable', 'the store went away for a moment');
          return store.effectMarkMany(items);
        },
      },
    });
    h = await harness({ store: flaky });
    const made = chargeJob(h, async () => {
      throw new Permanent('declined');
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('declined-once'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('declined-once'));
    // Not retried as a store outage would be, and so not sent again: the refusal is the answer.
    expect([failed, done.state, done.attempt, made.calls, done.error?.code]).toEqual([
      1,
      'failed',
      1,
      1,
      'permanent-failure',
    ]);
    const [effect] = await h.store.effectList(ref('declined-once'));
    expect(effect?.state).toBe('failed');
  });

  describe('a refusal whose mark could not be written, then the same effect again in the attempt', () => {
    /** A store whose first two batches of marks fail before anything is written. */
    function flakyMarks(): { store: Store; failed: () => number } {
      const store = sqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'sluice-mark-')), 'sluice.db') });
      let failed = 0;
      const flaky: Store = Object.create(store, {
        effectMarkMany: {
          value: async (items: Parameters<Store['effectMarkMany']>[0]) => {
            if (failed < 2) {
              failed++;
              throw new StoreError('unavailable', 'the store went away for a moment');
            }
            return store.effectMarkMany(items);
          },
        },
      });
      return { store: flaky, failed: () => failed };
    }

    it('never records `absent` over a second send whose outcome is unknown', async () => {
      const { store, failed } = flakyMarks();
      h = await harness({ store });
      let calls = 0;
      h.sluice.define('job', {
        input: z.object({}),
        limits: { maxAttempts: 1 },
        async run(_input, ctx) {
          const charge = () =>
            ctx.effect('charge', {
              call: async () => {
                calls++;
                // A 503 first (nothing done); then the provider charges and the answer is lost.
                if (calls === 1) throw new Retryable('provider answered 503');
                throw new Ambiguous('the connection dropped after the request was sent');
              },
            });
          try {
            return await charge();
          } catch (error) {
            if (error instanceof Retryable) return await charge();
            throw error;
          }
        },
      });
      h.worker().start();
      await h.sluice.submit({ ...ref('resent'), kind: 'job', input: {} });
      const done = await h.sluice.wait(ref('resent'));
      expect([failed(), calls]).toEqual([2, 2]);
      // The second request may have charged: the journal must not say it did not happen. Its
      // last attempt used, the operation is dead, and a redrive recovers under the same key.
      const [effect] = await h.store.effectList(ref('resent'));
      expect([effect?.state, done.state]).toEqual(['pending', 'dead']);
    });

    it('answers a second call of a refused effect with the refusal, sending nothing', async () => {
      const { store, failed } = flakyMarks();
      h = await harness({ store });
      let calls = 0;
      const seen: string[] = [];
      h.sluice.define('job', {
        input: z.object({}),
        async run(_input, ctx) {
          const charge = () =>
            ctx.effect('charge', {
              call: async () => {
                calls++;
                throw new Permanent('declined', { code: 'card-declined' });
              },
            });
          try {
            return await charge();
          } catch (error) {
            seen.push((error as Permanent).code);
            return await charge();
          }
        },
      });
      h.worker().start();
      await h.sluice.submit({ ...ref('declined-twice'), kind: 'job', input: {} });
      const done = await h.sluice.wait(ref('declined-twice'));
      expect(failed()).toBeGreaterThan(0);
      expect([calls, seen, done.state, done.error?.code]).toEqual([
        1,
        ['card-declined'],
        'failed',
        'card-declined',
      ]);
      const [effect] = await h.store.effectList(ref('declined-twice'));
      expect(effect?.state).toBe('failed');
    });
  });

  it('asks a person, and calls no more, when an effect answers with something not JSON', async () => {
    h = await harness();
    const made = chargeJob(h, async () => ({ amount: 10n }));
    h.worker().start();
    await h.sluice.submit({ ...ref('bigint'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('bigint'));
    expect([done.state, done.error?.code, made.calls]).toEqual([
      'needs_reconciliation',
      'effect-result-not-json',
      1,
    ]);
    // Says what is not JSON in the result, not that an input must be.
    expect(done.error?.message).toMatch(
      /^the result of effect charge is not plain JSON: amount is a bigint; record: /,
    );
    const [effect] = await h.store.effectList(ref('bigint'));
    expect(effect?.state).toBe('pending');
  });

  it('takes a lookup answer of the wrong shape for no answer, and asks a person', async () => {
    h = await harness();
    const made = chargeJob(
      h,
      async () => {
        throw new Ambiguous('timed out after sending');
      },
      {
        limits: { backoff: { baseMs: 1, capMs: 1 } },
        // `committed` without its result: read as one, the operation would succeed on null.
        lookup: async () => ({ status: 'committed' }) as never,
      },
    );
    h.worker().start();
    await h.sluice.submit({ ...ref('shape'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('shape'));
    expect([done.state, done.error?.code, made.calls]).toEqual([
      'needs_reconciliation',
      'lookup-answer-invalid',
      1,
    ]);
    expect((await h.store.effectList(ref('shape')))[0]?.state).toBe('pending');
  });

  describe('a lookup that fails past the retention window', () => {
    const RETENTION = 60_000;

    async function run(maxAttempts: number, lookupFails: number) {
      const clock = new FakeClock();
      h = await harness({ clock });
      let calls = 0;
      let lookups = 0;
      h.sluice.define('job', {
        input: z.object({}),
        limits: { maxAttempts, attemptTimeoutMs: 1000, backoff: { baseMs: 1, capMs: 1 } },
        async run(_input, ctx) {
          // The answer's type is what `call` returns, which here only throws: said outright.
          return ctx.effect<{ charge: string }>('charge', {
            retentionMs: RETENTION,
            call: async () => {
              calls++;
              throw new Ambiguous('timed out after sending');
            },
            lookup: async () => {
              lookups++;
              if (lookups <= lookupFails) throw new Retryable('lookup: 503');
              return { status: 'committed', result: { charge: 'ch_1' } };
            },
          });
        },
      });
      // Every attempt after the first begins past the window.
      failpoints.enable('effect.before-pending', {
        action: () => clock.advance(2 * RETENTION),
        nth: 2,
        times: Number.POSITIVE_INFINITY,
      });
      const outcomes: string[] = [];
      h.sluice.events.on('effect', (e) => outcomes.push(e.outcome));
      h.worker().start();
      await h.sluice.submit({ ...ref('late'), kind: 'job', input: {} });
      return {
        done: await h.sluice.wait(ref('late')),
        calls: () => calls,
        lookups: () => lookups,
        outcomes,
      };
    }

    it('is asked again while attempts remain', async () => {
      const { done, calls, lookups, outcomes } = await run(3, 1);
      expect([done.state, done.result, calls(), lookups()]).toEqual(['succeeded', { charge: 'ch_1' }, 1, 2]);
      // Every request is counted, the lookup that failed too.
      expect(outcomes).toEqual(['ambiguous', 'lookup-failed', 'lookup-committed']);
    });

    it('leaves the operation to a person on the last attempt, not in the dead letters', async () => {
      const { done, calls, lookups } = await run(2, 1);
      expect([done.state, done.error?.code, calls(), lookups()]).toEqual([
        'needs_reconciliation',
        'effect-outcome-unknown',
        1,
        1,
      ]);
      expect(done.error?.message).toContain('lookup: 503');
    });
  });

  it('stops a handler at once when the journal says its lease is gone', async () => {
    const clock = new FakeClock();
    h = await harness({ clock });
    const reasons: unknown[] = [];
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        // A handler that swallows the journal's refusal must still find its signal fired.
        await ctx.effect('charge', { call: async () => 1 }).catch(() => {});
        reasons.push(ctx.signal.aborted ? ctx.signal.reason : 'running');
        return 'went on';
      },
    });
    failpoints.enable('effect.before-pending', async () => {
      // The lease runs out and is rescued before the `pending` row is written.
      clock.advance(60_000);
      await h.store.leaseRescue({ maxLeaseExpiries: 3, limit: 10 });
    });
    h.worker({ leaseMs: 30_000, heartbeatMs: 29_999 }).start();
    await h.sluice.submit({ ...ref('taken'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('taken'));
    expect([done.state, done.attempt]).toEqual(['succeeded', 2]);
    expect(isLeaseLost(reasons[0])).toBe(true);
    expect(reasons[1]).toBe('running');
  });
});
