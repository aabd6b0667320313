/**
 * The seed's charge operation as a Sluice kind: one journaled effect at the provider stub,
 * keyed by the operation's effect key.
 */
import { z } from 'zod';
import type { KindLimits, Operation, Sluice } from '../../src/index.js';
import type { Charge, ProviderStub } from '../../src/testing/index.js';

export const O7 = { invoice: 7, amount_cents: 5000 } as const;

export const chargeInput = z.object({
  invoice: z.number().int().nonnegative(),
  amount_cents: z.number().int().positive(),
});

export function defineCharge(
  sluice: Sluice,
  provider: ProviderStub,
  options: { limits?: KindLimits; withLookup?: boolean; retentionMs?: number; name?: string } = {},
) {
  return sluice.define(options.name ?? 'charge', {
    input: chargeInput,
    limits: { backoff: { baseMs: 200, capMs: 10_000 }, ...options.limits },
    async run(input, ctx) {
      const charge = await ctx.effect<Charge>('charge', {
        call: ({ key, signal }) => provider.charge({ key, params: { tenant: ctx.tenant, ...input }, signal }),
        lookup: options.withLookup
          ? async ({ key }) => {
              const found = await provider.lookup(key);
              return found.status === 'committed' ? { status: 'committed', result: found.charge } : found;
            }
          : undefined,
        retentionMs: options.retentionMs ?? provider.windowMs,
        reference: (c) => c.id,
      });
      return { charge: charge.id };
    },
  });
}

/**
 * `n` charge operations (`inv-0`…, over `tenants` tenants `T0`…) submitted at once, taking turns
 * between the engines that share a store, then waited for through the first: the operations as
 * they ended, in submit order.
 */
export async function chargeAcross(engines: Sluice[], n: number, tenants: number): Promise<Operation[]> {
  const refs = Array.from({ length: n }, (_, i) => ({ tenant: `T${i % tenants}`, id: `inv-${i}` }));
  await Promise.all(
    refs.map((ref, i) =>
      engines[i % engines.length]!.submit({
        ...ref,
        kind: 'charge',
        input: { invoice: i, amount_cents: 100 + i },
      }),
    ),
  );
  return Promise.all(refs.map((ref) => engines[0]!.wait(ref)));
}
