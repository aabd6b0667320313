/**
 * A kind `define` returned, given as a submit's `kind`: the input is checked against its schema
 * when the code compiles (`tsc` runs over this file in CI: every `@ts-expect-error` below fails
 * the type check if the mistake it marks compiles), and `wait` on the operation answered carries
 * the handler's result type. At run time it is the same submit as by name.
 */
import { afterEach, describe, expect, expectTypeOf, it } from 'vitest';
import { z } from 'zod';
import {
  defineConfig,
  type InputOf,
  isUnknownKind,
  type Kind,
  type Operation,
  type ResultOf,
  Sluice,
  sqliteStore,
} from '../../src/index.js';
import { type Harness, harness, silent } from '../helpers/engine.js';

const chargeInput = z.object({
  invoice: z.number().int(),
  amount_cents: z.number().int().positive(),
  // The schema's input and output differ: the submit takes the input.
  currency: z.string().default('EUR'),
});

describe('a kind define returned, as a submit’s kind', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  const defineCharge = (sluice: Sluice) =>
    sluice.define('charge', {
      input: chargeInput,
      async run(input) {
        expectTypeOf(input).toEqualTypeOf<{ invoice: number; amount_cents: number; currency: string }>();
        return { charged: input.amount_cents, currency: input.currency };
      },
    });

  it('types the input by the schema and the result by the handler', async () => {
    h = await harness();
    const charge = defineCharge(h.sluice);
    expectTypeOf(charge).toEqualTypeOf<
      Kind<
        { invoice: number; amount_cents: number; currency?: string | undefined },
        { charged: number; currency: string }
      >
    >();
    expectTypeOf<InputOf<typeof charge>>().toEqualTypeOf<{
      invoice: number;
      amount_cents: number;
      currency?: string | undefined;
    }>();
    expectTypeOf<ResultOf<typeof charge>>().toEqualTypeOf<{ charged: number; currency: string }>();
    h.worker().start();

    const { operation, created } = await h.sluice.submit({
      tenant: 'north',
      id: 'O7',
      kind: charge,
      input: { invoice: 7, amount_cents: 5000 },
    });
    expect(created).toBe(true);
    expect(operation.kind).toBe('charge');
    expectTypeOf(operation.input).toEqualTypeOf<InputOf<typeof charge>>();

    const done = await h.sluice.wait(operation);
    expectTypeOf(done).toEqualTypeOf<
      Operation<InputOf<typeof charge>, { charged: number; currency: string }>
    >();
    expect(done.state).toBe('succeeded');
    expect(done.result?.charged).toBe(5000);
    expect(done.result?.currency).toBe('EUR');
    const again = await h.sluice.get(done);
    expectTypeOf(again?.result).toEqualTypeOf<{ charged: number; currency: string } | null | undefined>();

    // A bare reference says nothing of the kind: nothing is claimed of its types.
    const bare = await h.sluice.wait({ tenant: 'north', id: 'O7' });
    expectTypeOf(bare.result).toBeUnknown();
    expect(bare.result).toEqual(done.result);
  });

  it('types a stored reference given its kind, and refuses one of another kind', async () => {
    h = await harness();
    const charge = defineCharge(h.sluice);
    const note = h.sluice.define('note', {
      input: z.object({ text: z.string() }),
      run: (input) => input.text.length,
    });
    h.worker().start();
    await h.sluice.submit({
      tenant: 'north',
      id: 'O7',
      kind: charge,
      input: { invoice: 7, amount_cents: 5000 },
    });
    await h.sluice.submit({ tenant: 'north', id: 'N1', kind: note, input: { text: 'hello' } });

    // Only the tenant and id were kept (a column of the caller's own table, say): the kind types them.
    const done = await h.sluice.wait({ tenant: 'north', id: 'O7', kind: charge });
    expectTypeOf(done).toEqualTypeOf<Operation<InputOf<typeof charge>, ResultOf<typeof charge>>>();
    expect(done.result).toEqual({ charged: 5000, currency: 'EUR' });
    const read = await h.sluice.get({ tenant: 'north', id: 'O7', kind: charge });
    expectTypeOf(read?.result).toEqualTypeOf<ResultOf<typeof charge> | null | undefined>();
    expect(read?.id).toBe('O7');
    // By name it is checked too, and types nothing.
    expect((await h.sluice.get({ tenant: 'north', id: 'O7', kind: 'charge' }))?.kind).toBe('charge');

    // The operation is a note: handed back as a charge, its types would lie.
    await expect(h.sluice.get({ tenant: 'north', id: 'N1', kind: charge })).rejects.toMatchObject({
      code: 'invalid-argument',
      message: 'operation N1 of tenant north is of kind note, not charge',
    });
    await expect(h.sluice.wait({ tenant: 'north', id: 'N1', kind: 'charge' })).rejects.toMatchObject({
      code: 'invalid-argument',
    });
    expect(await h.sluice.get({ tenant: 'north', id: 'nothing', kind: charge })).toBeUndefined();
  });

  it('refuses a wrong input at compile time, and the engine refuses it at run time', async () => {
    h = await harness();
    const charge = defineCharge(h.sluice);
    const refused = h.sluice.submit({
      tenant: 'north',
      id: 'O8',
      kind: charge,
      // @ts-expect-error amount_cents is a number
      input: { invoice: 8, amount_cents: '5000' },
    });
    await expect(refused).rejects.toMatchObject({ code: 'input-invalid' });
    await expect(
      // @ts-expect-error invoice is missing
      h.sluice.submit({ tenant: 'north', id: 'O9', kind: charge, input: { amount_cents: 1 } }),
    ).rejects.toMatchObject({ code: 'input-invalid' });
    // By name, the input is not typed: the engine's check is the only one, as before.
    await expect(
      h.sluice.submit({ tenant: 'north', id: 'O10', kind: 'charge', input: { amount_cents: 1 } }),
    ).rejects.toMatchObject({ code: 'input-invalid' });
  });

  it('is the same submit as by name: one operation, one digest, and the same answer again', async () => {
    h = await harness();
    const charge = defineCharge(h.sluice);
    const input = { invoice: 7, amount_cents: 5000 };
    const typed = await h.sluice.submit({ tenant: 'north', id: 'O7', kind: charge, input });
    const named = await h.sluice.submit({ tenant: 'north', id: 'O7', kind: 'charge', input });
    expect(named.created).toBe(false);
    expect(named.operation.digest).toBe(typed.operation.digest);
    const many = await h.sluice.submitMany([
      { tenant: 'north', id: 'O7', kind: charge, input },
      { tenant: 'north', id: 'O11', kind: charge, input },
      { tenant: 'north', id: 'O12', kind: 'charge', input },
    ]);
    expect(many.map((r) => r.ok && r.created)).toEqual([false, true, true]);
    // Each request typed as submit types it, a map's alike: a wrong input does not compile.
    const wrong = await h.sluice.submitMany(
      // @ts-expect-error amount_cents is a number
      [1, 2].map((n) => ({
        tenant: 'north',
        id: `W${n}`,
        kind: charge,
        input: { invoice: n, amount_cents: 'x' },
      })),
    );
    expect(wrong.map((r) => !r.ok && r.error.code)).toEqual(['input-invalid', 'input-invalid']);
    // The answers of a map's requests carry the kind's types, as submit's answer does.
    const mapped = await h.sluice.submitMany(
      [13, 14].map((n) => ({
        tenant: 'north',
        id: `M${n}`,
        kind: charge,
        input: { invoice: n, amount_cents: 1 },
      })),
    );
    for (const answer of mapped)
      if (answer.ok)
        expectTypeOf(answer.operation.result).toEqualTypeOf<{ charged: number; currency: string } | null>();
    expect(mapped.map((r) => r.ok && r.created)).toEqual([true, true]);
  });

  it('is looked up by name, so a kind of another engine works where that name is defined', async () => {
    h = await harness();
    defineCharge(h.sluice);
    const other = new Sluice({ store: sqliteStore({ path: `${h.dir}/other.db` }), logger: silent });
    try {
      const theirs = defineCharge(other);
      const { operation } = await h.sluice.submit({
        tenant: 'north',
        id: 'O7',
        kind: theirs,
        input: { invoice: 7, amount_cents: 5000 },
      });
      expect(operation.kind).toBe('charge');
      // A kind this engine never defined is refused by its name, as a name would be.
      const refund = other.define('refund', { input: z.object({ charge: z.string() }), run: () => null });
      const error = await h.sluice
        .submit({ tenant: 'north', id: 'R1', kind: refund, input: { charge: 'ch_1' } })
        .catch((e: unknown) => e);
      expect(isUnknownKind(error)).toBe(true);
      expect((error as Error).message).toContain('"refund"');
    } finally {
      await other.close();
    }
  });

  it('answers a request whose kind is neither a name nor a kind with kind-unknown, and counts it', async () => {
    h = await harness();
    defineCharge(h.sluice);
    const rejected: Array<{ kind: string; reason: string }> = [];
    h.sluice.events.on('rejected', (e) => rejected.push({ kind: e.kind, reason: e.reason }));
    const missing = await h.sluice
      .submit({ tenant: 'north', id: 'O7', input: {} } as never)
      .catch((e: unknown) => e);
    expect(isUnknownKind(missing)).toBe(true);
    const object = await h.sluice
      .submit({ tenant: 'north', id: 'O7', kind: { name: 7 }, input: {} } as never)
      .catch((e: unknown) => e);
    expect(isUnknownKind(object)).toBe(true);
    expect(rejected).toEqual([
      { kind: '', reason: 'kind-unknown' },
      { kind: '', reason: 'kind-unknown' },
    ]);
  });
});

describe("a config file's kinds", () => {
  it('type each handler’s input by its own schema, as define does', () => {
    const config = defineConfig({
      db: ':memory:',
      kinds: {
        charge: {
          input: chargeInput,
          run: async (input) => {
            expectTypeOf(input).toEqualTypeOf<{ invoice: number; amount_cents: number; currency: string }>();
            // @ts-expect-error a misspelt field is a compile error, not `undefined` at run time
            return { charged: input.amount_centz };
          },
        },
        note: {
          input: z.object({ text: z.string() }),
          class: 'bulk',
          run: (input) => {
            expectTypeOf(input).toEqualTypeOf<{ text: string }>();
            return input.text.length;
          },
        },
      },
    });
    // What it returns is the config as given: the service reads the same kinds.
    expect(Object.keys(config.kinds ?? {})).toEqual(['charge', 'note']);
  });
});
