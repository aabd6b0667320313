/**
 * The engine's event stream: what metrics are built on. Each event carries what an observer
 * needs without reading the store.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ambiguous, Permanent, type SluiceEventMap } from '../../src/index.js';
import { FakeClock, ProviderStub } from '../../src/testing/index.js';
import { type Harness, harness } from '../helpers/engine.js';

describe('sluice.events', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('reports submits, refusals, attempts with their waits and ends, and effects', async () => {
    const clock = new FakeClock();
    h = await harness({ clock });
    const provider = new ProviderStub();
    provider.failNext(1, 'unavailable');
    h.sluice.define('charge', {
      input: z.object({ amount: z.number() }),
      class: 'interactive',
      limits: { backoff: { baseMs: 0, capMs: 0 } },
      run: async (input, ctx) =>
        ctx.effect('charge', {
          provider: 'pay',
          call: ({ key }) => provider.charge({ key, params: { amount_cents: input.amount } }),
        }),
    });
    const seen: Array<[keyof SluiceEventMap, unknown]> = [];
    for (const name of ['submitted', 'rejected', 'attempt-started', 'attempt-ended', 'effect'] as const) {
      h.sluice.events.on(name, (e: unknown) => seen.push([name, e]));
    }
    await h.sluice.submit({ tenant: 'North', id: 'a', kind: 'charge', input: { amount: 5 } });
    await h.sluice.submit({ tenant: 'North', id: 'a', kind: 'charge', input: { amount: 5 } });
    await h.sluice
      .submit({ tenant: 'North', id: 'b', kind: 'charge', input: { amount: 'x' } })
      .catch(() => {});
    clock.advance(1500); // the first attempt waited 1.5 s in the queue
    h.worker().start();
    await h.sluice.wait({ tenant: 'North', id: 'a' });
    const ref = { tenant: 'North', id: 'a', kind: 'charge', class: 'interactive' };
    expect(seen.filter(([n]) => n !== 'attempt-ended').map(([n, e]) => [n, e])).toEqual([
      ['submitted', { ...ref, created: true }],
      ['submitted', { ...ref, created: false }],
      ['rejected', { tenant: 'North', kind: 'charge', class: 'interactive', reason: 'input-invalid' }],
      ['attempt-started', { ...ref, attempt: 1, firstAttemptAgeMs: 1500 }],
      ['effect', { ...ref, effect: 'charge', provider: 'pay', outcome: 'retryable' }],
      ['attempt-started', { ...ref, attempt: 2, firstAttemptAgeMs: null }],
      ['effect', { ...ref, effect: 'charge', provider: 'pay', outcome: 'committed' }],
    ]);
    const ends = seen
      .filter(([n]) => n === 'attempt-ended')
      .map(([, e]) => e as SluiceEventMap['attempt-ended'][0]);
    expect(ends.map((e) => [e.attempt, e.outcome, e.state, e.errorCode, e.endToEndMs === null])).toEqual([
      [1, 'retry', null, 'provider-unavailable', true],
      [2, 'succeeded', 'succeeded', null, false],
    ]);
    expect(ends[1]!.endToEndMs).toBeGreaterThanOrEqual(1500);
  });

  it('counts the wait for a first attempt from when it was due, not from a delayed submit', async () => {
    const clock = new FakeClock();
    h = await harness({ clock });
    h.sluice.define('job', { input: z.object({}), run: () => null });
    const ages: Array<number | null> = [];
    h.sluice.events.on('attempt-started', (e) => ages.push(e.firstAttemptAgeMs));
    await h.sluice.submit({ tenant: 'North', id: 'later', kind: 'job', input: {}, delayMs: 3000 });
    clock.advance(3500); // due after 3 s, started half a second late
    h.worker().start();
    await h.sluice.wait({ tenant: 'North', id: 'later' });
    expect(ages).toEqual([500]);
  });

  it('reports the state the store ended the operation in, not the one the attempt asked for', async () => {
    h = await harness();
    h.sluice.define('unsure', {
      input: z.object({}),
      run: async (_input, ctx) => {
        // The request may have left: the journal keeps the effect pending.
        await ctx
          .effect('charge', {
            call: async () => {
              throw new Ambiguous('timed out after sending');
            },
          })
          .catch(() => {});
        throw new Permanent('gave up');
      },
    });
    const ends: Array<SluiceEventMap['attempt-ended'][0]> = [];
    h.sluice.events.on('attempt-ended', (e) => ends.push(e));
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'u', kind: 'unsure', input: {} });
    expect((await h.sluice.wait({ tenant: 'North', id: 'u' })).state).toBe('needs_reconciliation');
    // A failure with an effect pending is parked, not failed: observers must see where it went.
    expect(ends.map((e) => [e.outcome, e.state, e.endToEndMs === null])).toEqual([
      ['failed', 'needs_reconciliation', false],
    ]);
  });
});
