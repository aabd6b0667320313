import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ProviderStub } from '../../src/testing/index.js';
import { type Harness, harness } from '../helpers/engine.js';

describe('an operation from submit to success', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('runs the handler once, journals the effect and stores the result', async () => {
    h = await harness();
    const provider = new ProviderStub();
    h.sluice.define('charge', {
      input: z.object({ invoice: z.number().int(), amount_cents: z.number().int().positive() }),
      async run(input, ctx) {
        const charge = await ctx.effect('charge', {
          call: ({ key, signal }) =>
            provider.charge({ key, params: { tenant: ctx.tenant, ...input }, signal }),
          reference: (c) => c.id,
        });
        return { charge: charge.id };
      },
    });
    const worker = h.worker();
    worker.start();
    const { operation, created } = await h.sluice.submit({
      tenant: 'North',
      id: 'O7',
      kind: 'charge',
      input: { invoice: 7, amount_cents: 5000 },
    });
    expect(created).toBe(true);
    expect(operation.state).toBe('queued');
    const done = await h.sluice.wait({ tenant: 'North', id: 'O7' });
    expect(done.state).toBe('succeeded');
    expect(done.result).toEqual({ charge: 'ch_1' });
    const full = await h.sluice.get({ tenant: 'North', id: 'O7' }, { include: ['attempts', 'effects'] });
    expect(full?.attempts?.map((a) => a.outcome)).toEqual(['succeeded']);
    expect(full?.effects?.map((e) => [e.name, e.state, e.reference])).toEqual([
      ['charge', 'committed', 'ch_1'],
    ]);
    expect(provider.calls).toBe(1);
    const stats = await h.store.queueStats();
    expect(stats).toEqual([{ class: 'default', tenant: 'North', waiting: 0, running: 0 }]);
  });
});
