/**
 * A handler that charged and then returned a result the store cannot keep (a `Date`, as an SDK's
 * object carries): the charge is journaled, the result refused. The operation is dead, not
 * failed: a client reading `failed` would take the money for not taken. Fixed and redriven, the
 * handler runs again, its effect replayed from the journal, and the provider is not called twice.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Sluice, sqliteStore } from '../../src/index.js';
import { ProviderStub } from '../../src/testing/index.js';
import { type Harness, harness, silent } from '../helpers/engine.js';

const ref = { tenant: 'north', id: 'O7' };

describe('a result the store cannot keep, after a charge', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('is dead with its effect committed, and a redrive of the fixed handler charges nothing more', async () => {
    h = await harness();
    const provider = new ProviderStub();
    const charge = (sluice: Sluice, fixed: boolean) =>
      sluice.define('charge', {
        input: z.object({ amount: z.number() }),
        limits: { maxAttempts: 3 },
        async run(input, ctx) {
          const made = await ctx.effect('charge', {
            call: ({ key, signal }) =>
              provider.charge({
                key,
                params: { tenant: ctx.tenant, invoice: 7, amount_cents: input.amount },
                signal,
              }),
          });
          // The bug: a Date in the result. The fix: its ISO text.
          const at = new Date(0);
          return { charge: made.id, at: fixed ? at.toISOString() : at };
        },
      });
    charge(h.sluice, false);
    h.worker().start();
    await h.sluice.submit({ ...ref, kind: 'charge', input: { amount: 500 } });
    const dead = await h.sluice.wait(ref);
    expect([dead.state, dead.error?.code, dead.attempt, provider.calls]).toEqual([
      'dead',
      'result-not-json',
      1,
      1,
    ]);
    const [effect] = await h.store.effectList(ref);
    expect(effect?.state).toBe('committed');

    // The fix deployed: another engine on the same store, the kind's handler corrected.
    const fixed = new Sluice({ store: sqliteStore({ path: h.dbPath }), logger: silent });
    try {
      charge(fixed, true);
      const worker = fixed.worker({ pollIntervalMs: 20, rescueIntervalMs: false, purgeIntervalMs: false });
      worker.start();
      await h.sluice.close();
      await fixed.redrive(ref, { by: 'ops@example.com', reason: 'result fixed to ISO text' });
      const done = await fixed.wait(ref);
      expect([done.state, done.result, provider.calls, provider.ledger().length]).toEqual([
        'succeeded',
        { charge: 'ch_1', at: '1970-01-01T00:00:00.000Z' },
        1,
        1,
      ]);
    } finally {
      await fixed.close();
    }
  });
});
