/**
 * Admission through the engine: the seed's tenant limits exactly (running 2, waiting 5), input
 * limits at their edges (refused before the schema runs), and the class's global bound.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isCapacityExceeded, isInputTooLarge } from '../../src/index.js';
import { FakeClock } from '../../src/testing/fake-clock.js';
import { type Harness, harness } from '../helpers/engine.js';
import { Gate } from '../helpers/gate.js';

describe('admission', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it("enforces the seed's limits: North runs 2 and waits 5, a third of ten is refused, South still runs", async () => {
    h = await harness({
      sluice: { tenants: { North: { interactive: { maxRunning: 2, maxWaiting: 5 } } } },
    });
    const gate = new Gate();
    const started: string[] = [];
    h.sluice.define('charge', {
      input: z.object({ invoice: z.number() }),
      class: 'interactive',
      async run(input, ctx) {
        started.push(`${ctx.tenant}/${input.invoice}`);
        if (ctx.tenant === 'North') await gate.wait(ctx.signal);
        return { invoice: input.invoice };
      },
    });
    const worker = h.worker({ slots: { interactive: 4 } });
    worker.start();
    const submit = (tenant: string, n: number) =>
      h.sluice.submit({ tenant, id: `inv-${n}`, kind: 'charge', input: { invoice: n } });

    // Workers busy: two of North's run (its maxRunning), though the class has 4 slots.
    await submit('North', 1);
    await submit('North', 2);
    await h.sluice.wait({ tenant: 'North', id: 'inv-2' }, { until: (o) => o.state === 'running' });
    await h.sluice.wait({ tenant: 'North', id: 'inv-1' }, { until: (o) => o.state === 'running' });
    const outcomes: string[] = [];
    let refusal: unknown;
    for (let n = 3; n <= 10; n++) {
      try {
        await submit('North', n);
        outcomes.push('accepted');
      } catch (error) {
        refusal = error;
        outcomes.push(isCapacityExceeded(error) ? error.code : String(error));
      }
    }
    expect(outcomes).toEqual([...Array(5).fill('accepted'), ...Array(3).fill('tenant-queue-full')]);
    expect(isCapacityExceeded(refusal) && refusal.retryAfterMs).toBeGreaterThanOrEqual(1000);
    // 7 accepted: 2 running + 5 waiting; the refused ones were never stored.
    expect(await h.store.queueStats()).toEqual([
      { class: 'interactive', tenant: 'North', waiting: 5, running: 2 },
    ]);
    expect(await h.sluice.get({ tenant: 'North', id: 'inv-8' })).toBeUndefined();
    // Duplicates of accepted operations are answered from their record, capacity or not.
    const dup = await submit('North', 7);
    expect([dup.created, dup.operation.state]).toEqual([false, 'queued']);
    // Tenant South is accepted and served meanwhile.
    await submit('South', 1);
    expect((await h.sluice.wait({ tenant: 'South', id: 'inv-1' })).state).toBe('succeeded');
    expect(started.filter((s) => s.startsWith('North'))).toHaveLength(2);

    gate.open();
    for (const n of [1, 2, 3, 4, 5, 6, 7]) {
      expect((await h.sluice.wait({ tenant: 'North', id: `inv-${n}` })).state).toBe('succeeded');
    }
  });

  it('tells a tenant full of delayed work to come back when the earliest is due, not in a second', async () => {
    // The store's clock stands still: the answers are exact.
    h = await harness({
      clock: new FakeClock(),
      sluice: { tenants: { North: { default: { maxWaiting: 2 } } } },
    });
    h.sluice.define('note', { input: z.object({}), run: async () => 'ok' });
    const submit = (id: string, delayMs?: number) =>
      h.sluice.submit({ tenant: 'North', id, kind: 'note', input: {}, delayMs });
    const refusal = async (id: string) => {
      try {
        await submit(id);
      } catch (error) {
        return isCapacityExceeded(error) ? error.retryAfterMs : error;
      }
      return 'accepted';
    };
    await submit('later', 90_000);
    await submit('much-later', 1_800_000);
    // The class runs nothing and nothing is due for 90 s: no place frees before then.
    expect(await refusal('now')).toBe(90_000);
    await h.sluice.cancel({ tenant: 'North', id: 'later' });
    await submit('later-still', 1_200_000);
    // Twenty minutes off: past the estimate's bound of 5 minutes, it says 5 minutes.
    expect(await refusal('now')).toBe(300_000);
  });

  it('measures input on its canonical bytes: the limit itself is accepted, one byte more refused before the schema', async () => {
    h = await harness();
    let schemaRuns = 0;
    const schema = z.object({ note: z.string() }).refine(() => {
      schemaRuns++;
      return true;
    });
    h.sluice.define('note', { input: schema, limits: { maxInputBytes: 100 }, run: () => null });
    // {"note":"…"} is 11 bytes of framing.
    const atLimit = { note: 'x'.repeat(89) };
    const over = { note: 'x'.repeat(90) };
    expect((await h.sluice.submit({ tenant: 'North', id: 'a', kind: 'note', input: atLimit })).created).toBe(
      true,
    );
    expect(schemaRuns).toBe(1);
    const error = await h.sluice
      .submit({ tenant: 'North', id: 'b', kind: 'note', input: over })
      .catch((e) => e);
    expect(isInputTooLarge(error)).toBe(true);
    expect(error.details).toEqual({ limitBytes: 100, actualBytes: 101 });
    expect(schemaRuns).toBe(1);
    expect(await h.sluice.get({ tenant: 'North', id: 'b' })).toBeUndefined();
  });

  it("refuses with class-queue-full at the class's global bound, whichever tenant submits", async () => {
    h = await harness({ sluice: { classes: { bulk: { maxQueued: 3 } } } });
    h.sluice.define('export', { input: z.object({}), class: 'bulk', run: () => null });
    for (const tenant of ['A', 'B', 'C'])
      await h.sluice.submit({ tenant, id: 'e1', kind: 'export', input: {} });
    const error = await h.sluice.submit({ tenant: 'D', id: 'e1', kind: 'export', input: {} }).catch((e) => e);
    expect([isCapacityExceeded(error), error.code]).toEqual([true, 'class-queue-full']);
    expect(await h.store.classStats()).toEqual([{ class: 'bulk', waiting: 3 }]);
  });
});
