/**
 * `record`: what the journal keeps of a provider's answer, and what `ctx.effect` returns on every
 * attempt. An SDK that answers with `Date`s no longer strands a charge made in
 * `needs_reconciliation`; the handler sees the same value live and replayed. And the options a
 * handler passes are checked before anything is journaled.
 */
import { afterEach, describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import { Ambiguous, Retryable } from '../../src/index.js';
import { type Harness, harness } from '../helpers/engine.js';

const ref = (id: string) => ({ tenant: 'north', id });
const fast = { maxAttempts: 3, backoff: { baseMs: 1, capMs: 1 } };

/** A provider SDK's answer: a class instance holding a `Date`, as many SDKs return. */
class Charge {
  constructor(
    readonly id: string,
    readonly created: Date,
  ) {}
}

describe('an effect with record', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('keeps the projection, and returns it live and replayed alike', async () => {
    h = await harness();
    let calls = 0;
    const seen: unknown[] = [];
    h.sluice.define('job', {
      input: z.object({}),
      limits: fast,
      async run(_input, ctx) {
        const charge = await ctx.effect('charge', {
          call: async () => new Charge(`ch_${++calls}`, new Date(Date.UTC(2026, 11, 6))),
          record: (c) => ({ id: c.id, created: c.created.toISOString() }),
          reference: (c) => c.id,
        });
        expectTypeOf(charge).toEqualTypeOf<{ id: string; created: string }>();
        seen.push(charge);
        // The first attempt fails after the charge: the second must get it from the journal.
        if (ctx.attempt === 1) throw new Retryable('after the charge');
        return charge;
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('dated'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('dated'));
    const kept = { id: 'ch_1', created: '2026-12-06T00:00:00.000Z' };
    expect([done.state, calls, done.result]).toEqual(['succeeded', 1, kept]);
    expect(seen).toEqual([kept, kept]);
    const [effect] = await h.store.effectList(ref('dated'));
    expect([effect?.state, effect?.result, effect?.reference]).toEqual(['committed', kept, 'ch_1']);
  });

  it('awaits an async record, and gives null for undefined live as replayed', async () => {
    h = await harness();
    const seen: unknown[][] = [];
    h.sluice.define('job', {
      input: z.object({}),
      limits: fast,
      async run(_input, ctx) {
        const kept = await ctx.effect('charge', {
          call: async () => new Charge('ch_1', new Date(0)),
          record: async (c) => ({ id: c.id }),
        });
        expectTypeOf(kept).toEqualTypeOf<{ id: string }>();
        const nothing = await ctx.effect('notify', { call: async () => 'sent', record: () => undefined });
        seen.push([kept, nothing]);
        if (ctx.attempt === 1) throw new Retryable('after both');
        return kept;
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('async'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('async'));
    expect([done.state, done.result]).toEqual(['succeeded', { id: 'ch_1' }]);
    expect(seen).toEqual([
      [{ id: 'ch_1' }, null],
      [{ id: 'ch_1' }, null],
    ]);
  });

  it('records a lookup’s answer through it too', async () => {
    h = await harness();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      limits: fast,
      async run(_input, ctx) {
        return ctx.effect('charge', {
          // The answer's type is what `call` returns, which here only throws: said outright.
          call: async (): Promise<Charge> => {
            calls++;
            throw new Ambiguous('timed out after sending');
          },
          lookup: async ({ key }) => ({ status: 'committed', result: new Charge(key, new Date(0)) }),
          record: (c) => ({ id: c.id, created: c.created.toISOString() }),
        });
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('looked-up'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('looked-up'));
    const [effect] = await h.store.effectList(ref('looked-up'));
    expect([done.state, calls]).toEqual(['succeeded', 1]);
    expect(done.result).toEqual({ id: effect?.key, created: '1970-01-01T00:00:00.000Z' });
    expect(effect?.state).toBe('committed');
  });

  it('infers the answer from call alone: a lookup written as a conditional leaves it whole', async () => {
    h = await harness();
    const found = new Map<string, Charge>();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      limits: fast,
      async run(_input, ctx) {
        const kept = await ctx.effect('charge', {
          call: async ({ key }) => {
            found.set(key, new Charge(`ch_${++calls}`, new Date(0)));
            if (calls === 1) throw new Ambiguous('timed out after sending');
            return found.get(key)!;
          },
          lookup: async ({ key }) => {
            const charge = found.get(key);
            return charge
              ? { status: 'committed', result: charge, reference: charge.id }
              : { status: 'absent' };
          },
          // `c` is a Charge, not `Charge | undefined`, though the lookup's branches differ.
          reference: (c) => c.id,
          record: (c) => ({ id: c.id }),
        });
        expectTypeOf(kept).toEqualTypeOf<{ id: string }>();
        return kept;
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('conditional'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('conditional'));
    expect([done.state, done.result, calls]).toEqual(['succeeded', { id: 'ch_1' }, 1]);
  });

  it('asks a person, and calls no more, when record throws: the provider has acted', async () => {
    h = await harness();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      limits: fast,
      async run(_input, ctx) {
        return ctx.effect('charge', {
          call: async () => ({ id: `ch_${++calls}` }),
          record: (): { id: string } => {
            throw new Error('no created field');
          },
        });
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('unrecorded'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('unrecorded'));
    expect([done.state, done.error?.code, calls]).toEqual([
      'needs_reconciliation',
      'effect-result-not-json',
      1,
    ]);
    expect(done.error?.message).toContain('record() threw: no created field');
    const [effect] = await h.store.effectList(ref('unrecorded'));
    expect(effect?.state).toBe('pending');
  });

  it('without it, says how to keep an answer that is not JSON', async () => {
    h = await harness();
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        return ctx.effect('charge', { call: async () => new Charge('ch_1', new Date(0)) });
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('raw'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('raw'));
    expect([done.state, done.error?.code]).toEqual(['needs_reconciliation', 'effect-result-not-json']);
    expect(done.error?.message).toContain('record: (answer) =>');
  });
});

describe('an effect’s options, checked before anything is journaled', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  const call = async () => ({ id: 'ch_1' });
  it.each([
    ['a misspelt key', { call, refrence: () => 'x' }, 'unknown key refrence'],
    ['no call', {}, 'call is required'],
    ['a call that is not a function', { call: 'charge' }, 'call must be a function'],
    ['a record that is not a function', { call, record: { id: true } }, 'record must be a function'],
    ['a retentionMs of NaN', { call, retentionMs: Number.NaN }, 'retentionMs'],
    ['a retentionMs of 0', { call, retentionMs: 0 }, 'retentionMs'],
    ['a retentionMs past 100 years', { call, retentionMs: 100 * 365 * 86_400_000 + 1 }, 'retentionMs'],
    ['a provider that is not a name', { call, provider: 'pay ments' }, 'provider "pay ments"'],
    ['a provider that is a number', { call, provider: 7 }, 'provider 7'],
  ])('refuses %s: the operation is dead, nothing sent, no journal row', async (_what, options, message) => {
    h = await harness();
    let sent = 0;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        const counted = { ...options } as { call?: unknown };
        if (typeof counted.call === 'function') {
          const inner = counted.call as () => Promise<unknown>;
          counted.call = () => {
            sent++;
            return inner();
          };
        }
        return ctx.effect('charge', counted as never);
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('wrong'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('wrong'));
    expect([done.state, done.error?.code, sent]).toEqual(['dead', 'invalid-argument', 0]);
    expect(done.error?.message).toContain(message);
    expect(await h.store.effectList(ref('wrong'))).toEqual([]);
  });

  it('takes options made by a class of the caller’s, and a retentionMs that is not whole', async () => {
    h = await harness();
    class ChargeCall {
      constructor(
        private readonly amount: number,
        readonly retentionMs = 1.1 * 3_600_000, // 3960000.0000000005
      ) {}
      async call() {
        return { id: `ch_${this.amount}` };
      }
    }
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        return ctx.effect('charge', new ChargeCall(5));
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('instance'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('instance'));
    expect([done.state, done.result]).toEqual(['succeeded', { id: 'ch_5' }]);
  });

  it('refuses a wrong call that would have joined one of the same name under way', async () => {
    h = await harness();
    let calls = 0;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        const first = ctx.effect('charge', { call: async () => ({ id: `ch_${++calls}` }) });
        const second = ctx.effect('charge', { refrence: () => 'x' } as never);
        const [a, b] = await Promise.allSettled([first, second]);
        return { a: a.status, b: b.status === 'rejected' ? (b.reason as { code: string }).code : 'answered' };
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('joined'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('joined'));
    expect([done.state, done.result, calls]).toEqual([
      'succeeded',
      { a: 'fulfilled', b: 'invalid-argument' },
      1,
    ]);
  });

  it('takes the longest retentionMs and every documented key', async () => {
    h = await harness();
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        return ctx.effect('charge', {
          call,
          record: (c) => c,
          lookup: async () => ({ status: 'absent' }),
          retentionMs: 100 * 365 * 86_400_000,
          reference: (c) => c.id,
          provider: 'pay.ments-1',
          cost: 0,
        });
      },
    });
    h.worker().start();
    await h.sluice.submit({ ...ref('right'), kind: 'job', input: {} });
    const done = await h.sluice.wait(ref('right'));
    expect([done.state, done.result]).toEqual(['succeeded', { id: 'ch_1' }]);
  });
});
