/**
 * @module bench/lib/submitters
 * Concurrent callers of `sluice.submit`, each awaiting its own call before the next, as request
 * handlers of an API process would (the engine's batcher groups what arrives together). The
 * operations are `bench.plain` with the input the other scenarios use; tenants go round robin.
 */
import type { Sluice } from 'sluice';
import { PLAIN_KIND } from './engine.js';

export const inputOf = (i: number) => ({ invoice: i, amount_cents: 100 + (i % 900) });

/** Tenant names of equal length, so that their byte order is their number's order. */
export const tenantName = (i: number, tenants: number) =>
  `t${String(i % tenants).padStart(String(tenants - 1).length, '0')}`;

/**
 * Submits operations `from` … `from + count - 1` (id `<prefix><i>`, tenant `i mod tenants`) with
 * `callers` concurrent callers. With `latenciesMs`, every call's latency is pushed to it.
 */
export async function submitRange(
  sluice: Sluice,
  o: {
    prefix: string;
    from: number;
    count: number;
    tenants: number;
    callers: number;
    latenciesMs?: number[];
  },
): Promise<void> {
  let next = o.from;
  const end = o.from + o.count;
  const caller = async () => {
    while (next < end) {
      const i = next++;
      const t0 = performance.now();
      const r = await sluice.submit({
        tenant: tenantName(i, o.tenants),
        id: `${o.prefix}${i}`,
        kind: PLAIN_KIND,
        input: inputOf(i),
      });
      o.latenciesMs?.push(performance.now() - t0);
      if (!r.created) throw new Error(`operation ${o.prefix}${i} already existed`);
    }
  };
  await Promise.all(Array.from({ length: o.callers }, caller));
}
