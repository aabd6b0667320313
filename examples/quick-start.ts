/**
 * The README's quick start, runnable: a charge kind with one journaled effect, a worker, one
 * operation submitted twice (the second is the same operation), then its result.
 * Run it with `npx vitest run test/examples.test.ts`; it is also type-checked in CI.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import { Permanent, Sluice, sqliteStore } from '../src/index.js';
import { ProviderStub } from '../src/testing/index.js';

export async function quickStart(path = join(mkdtempSync(join(tmpdir(), 'sluice-example-')), 'sluice.db')) {
  const provider = new ProviderStub(); // stands in for your payment provider's SDK

  const sluice = new Sluice({ store: sqliteStore({ path }) });
  await sluice.migrate();

  const charge = sluice.define('charge', {
    input: z.object({ invoice: z.number().int(), amount_cents: z.number().int().positive() }),
    class: 'interactive',
    limits: { maxAttempts: 5, attemptTimeoutMs: 10_000, deadlineMs: 3_600_000 },
    async run(input, ctx) {
      if (input.amount_cents > 1_000_000) throw new Permanent('amount over the single-charge limit');
      // At most one charge per operation, whatever crashes and retries happen: the provider sees
      // the same idempotency key on every attempt, and the journal remembers the answer.
      const charge = await ctx.effect('charge', {
        call: ({ key, signal }) => provider.charge({ key, params: { tenant: ctx.tenant, ...input }, signal }),
        retentionMs: 24 * 3_600_000, // how long the provider honours a key
        reference: (c) => c.id,
      });
      return { charge: charge.id };
    },
  });

  const worker = sluice.worker({ slots: { interactive: 4 } });
  worker.start();

  const request = { tenant: 'north', id: 'O7', kind: charge, input: { invoice: 7, amount_cents: 5000 } };
  const first = await sluice.submit(request); // durable once this resolves
  const again = await sluice.submit(request); // a client retry: the same operation
  const done = await sluice.wait(first.operation); // done.result is { charge: string } | null

  await sluice.close();
  return {
    created: [first.created, again.created],
    state: done.state,
    result: done.result,
    charges: provider.ledger().length,
  };
}
