/**
 * `submitMany` answers a list of requests as `submit` answers them one after the other, on both
 * stores: for random lists of requests over a few ids (repeats with the same input and with
 * another, invalid inputs, an unknown kind) and a tenant with a small waiting cap, each answer
 * and the operations stored are the same either way.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import type { SluiceOptions, SubmitRequest } from '../../src/index.js';
import { isSluiceError } from '../../src/index.js';
import { type Harness, harness } from '../helpers/engine.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();

const options: Partial<SluiceOptions> = { tenants: { A: { '*': { maxWaiting: 3 } } } };

const engines = {
  sqlite: () => harness({ sluice: options }),
  postgres: () => harness({ store: db.store({ schema: db.freshSchema(), poolSize: 2 }), sluice: options }),
};

async function engine(store: keyof typeof engines): Promise<Harness> {
  const h = await engines[store]();
  h.sluice.define('charge', { input: z.object({ amount: z.number().int().positive() }), run: () => 'ok' });
  return h;
}

const request: fc.Arbitrary<SubmitRequest> = fc.record({
  tenant: fc.constantFrom('A', 'B'),
  id: fc.constantFrom('o1', 'o2', 'o3', 'o4', 'o5'),
  kind: fc.constantFrom('charge', 'charge', 'charge', 'refund'),
  input: fc.constantFrom({ amount: 1 }, { amount: 2 }, { amount: -1 }),
});

/** What a request was answered, as a comparable string. */
async function answer(run: () => Promise<{ created: boolean }>): Promise<string> {
  try {
    return (await run()).created ? 'created' : 'existing';
  } catch (error) {
    if (isSluiceError(error)) return error.code;
    throw error;
  }
}

async function stored(h: Harness): Promise<string[]> {
  const { operations } = await h.sluice.list({ limit: 100 });
  return operations.map((o) => `${o.tenant}/${o.id} ${JSON.stringify(o.input)}`).sort();
}

describe.each(['sqlite', 'postgres'] as const)('submitMany on %s', (store) => {
  it('answers as submit does, one request after the other', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(request, { minLength: 1, maxLength: 14 }), async (requests) => {
        const [batch, single] = [await engine(store), await engine(store)];
        try {
          const many = (await batch.sluice.submitMany(requests)).map((r) =>
            r.ok ? (r.created ? 'created' : 'existing') : r.error.code,
          );
          const one: string[] = [];
          for (const r of requests) one.push(await answer(() => single.sluice.submit(r)));
          expect(many).toEqual(one);
          expect(await stored(batch)).toEqual(await stored(single));
        } finally {
          await Promise.all([batch.close(), single.close()]);
          await db.closeStores();
        }
      }),
      { numRuns: store === 'sqlite' ? 40 : 12 },
    );
  });
});
