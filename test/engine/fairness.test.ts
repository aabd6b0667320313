/**
 * Starvation and fairness: a tenant with 2,000 waiting operations does not delay another
 * tenant's handful — across classes (a bulk flood never takes an interactive slot) and inside
 * one class (claims rotate across tenants). Asserted on order and position, never on time.
 */
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { harness } from '../helpers/engine.js';

const BULK = 2000;
const NORTH = 20;

async function run(sameClass: boolean) {
  const h = await harness();
  const starts: string[] = [];
  const job = {
    input: z.object({}),
    run: (_i: unknown, ctx: { tenant: string }) => void starts.push(ctx.tenant),
  };
  h.sluice.define('export', { ...job, class: 'bulk' });
  h.sluice.define('charge', { ...job, class: sameClass ? 'bulk' : 'interactive' });
  for (let i = 0; i < BULK; i += 200) {
    await Promise.all(
      Array.from({ length: 200 }, (_, j) =>
        h.sluice.submit({ tenant: 'Bulk', id: `e${i + j}`, kind: 'export', input: {} }),
      ),
    );
  }
  const worker = h.worker({ slots: { bulk: 2, interactive: 2 } });
  worker.start();
  // Bulk is well under way before North arrives.
  await h.sluice.wait({ tenant: 'Bulk', id: 'e99' });
  const before = starts.length;
  await Promise.all(
    Array.from({ length: NORTH }, (_, i) =>
      h.sluice.submit({ tenant: 'North', id: `c${i}`, kind: 'charge', input: {} }),
    ),
  );
  for (let i = 0; i < NORTH; i++) await h.sluice.wait({ tenant: 'North', id: `c${i}` });
  // Positions (0-based) of North's starts among all starts after North submitted.
  const after = starts.slice(before);
  const positions = after.flatMap((t, i) => (t === 'North' ? [i] : []));
  const bulkLeft = (await h.store.queueStats()).find((s) => s.tenant === 'Bulk')?.waiting ?? 0;
  await h.close();
  return { positions, bulkLeft };
}

describe('starvation and fairness', () => {
  it('separate classes: the bulk flood never delays interactive work', async () => {
    const { positions, bulkLeft } = await run(false);
    console.log(
      `classes apart: North's ${NORTH} starts at positions ${positions.join(',')}; Bulk still waiting ${bulkLeft}`,
    );
    expect(positions).toHaveLength(NORTH);
    // Interactive has its own 2 slots: North's k-th start comes after at most 2 + 2k bulk starts
    // (bulk's 2 slots keep running in parallel), never after the bulk backlog.
    for (const [k, p] of positions.entries()) expect(p).toBeLessThanOrEqual(2 * k + 4);
    expect(bulkLeft).toBeGreaterThan(BULK / 2);
  });

  it('one class: claims rotate across tenants, so North is served between Bulk operations', async () => {
    const { positions, bulkLeft } = await run(true);
    console.log(
      `one class: North's ${NORTH} starts at positions ${positions.join(',')}; Bulk still waiting ${bulkLeft}`,
    );
    expect(positions).toHaveLength(NORTH);
    // Round-robin: North gets every other start while it has work.
    for (const [k, p] of positions.entries()) expect(p).toBeLessThanOrEqual(2 * k + 3);
    expect(bulkLeft).toBeGreaterThan(BULK / 2);
  });
});
