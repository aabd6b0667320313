/**
 * The store calls of a worker's hot loop: attempts' ends are written together, and the claim
 * that fills their slots again rides in the same call (one transaction, one commit), so a
 * backlog costs one call per round of slots, not two. An effect's `committed` mark rides with
 * the end when the handler ends first, and is written on its own when the handler works on.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sqliteStore } from '../../src/index.js';
import type { Store } from '../../src/store/store.js';
import type { FinishParams } from '../../src/store/types.js';
import { type Harness, harness } from '../helpers/engine.js';

const HOT = [
  'operationClaimMany',
  'attemptFinishMany',
  'attemptFinishAndClaim',
  'effectBeginMany',
  'effectMarkMany',
  'effectMarkCommitted',
] as const;

/** A store that counts the calls of the hot loop by method; `after` hears each one return. */
function counting(
  store: Store,
  after: (method: string, args: unknown[]) => void = () => {},
): { store: Store; calls: Record<string, number> } {
  const calls: Record<string, number> = {};
  for (const method of HOT) {
    const real = store[method].bind(store) as (...args: unknown[]) => Promise<unknown>;
    (store as unknown as Record<string, unknown>)[method] = async (...args: unknown[]) => {
      calls[method] = (calls[method] ?? 0) + 1;
      const out = await real(...args);
      after(method, args);
      return out;
    };
  }
  return { store, calls };
}

const fileStore = () => sqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'sluice-test-')), 'sluice.db') });

describe('a worker’s store calls', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('writes each round of ends with the claim for their slots, in one call', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-test-'));
    const { store, calls } = counting(sqliteStore({ path: join(dir, 'sluice.db') }));
    h = await harness({ store, dir });
    h.sluice.define('noop', { input: z.object({ n: z.number() }), run: ({ n }) => n });
    const n = 64;
    const slots = 8;
    const refs = Array.from({ length: n }, (_, i) => ({ tenant: `T${i % 4}`, id: `b${i}` }));
    await Promise.all(refs.map((r, i) => h.sluice.submit({ ...r, kind: 'noop', input: { n: i } })));
    // No poll during the test: every claim after the first is one the ends asked for.
    h.worker({ slots: { default: slots }, pollIntervalMs: 600_000 }).start();
    const done = await Promise.all(refs.map((r) => h.sluice.wait(r, { timeoutMs: 10_000 })));
    expect(done.map((o) => o.state)).toEqual(refs.map(() => 'succeeded'));
    expect(done.map((o) => o.result)).toEqual(refs.map((_, i) => i));
    // The loop's first claim, then ends and claims together until the backlog is gone.
    expect(calls.operationClaimMany).toBe(1);
    expect(calls.attemptFinishMany ?? 0).toBe(0);
    expect(calls.attemptFinishAndClaim).toBeGreaterThanOrEqual(n / slots);
  });

  it('with one effect a round is two calls: the marks ride with the ends', async () => {
    const { store, calls } = counting(fileStore());
    const ends: FinishParams[] = [];
    const withClaim = store.attemptFinishAndClaim.bind(store);
    store.attemptFinishAndClaim = (items, p) => {
      ends.push(...items);
      return withClaim(items, p);
    };
    const alone = store.attemptFinishMany.bind(store);
    store.attemptFinishMany = (items) => {
      ends.push(...items);
      return alone(items);
    };
    h = await harness({ store });
    h.sluice.define('charge', {
      input: z.object({ n: z.number() }),
      // Returns as soon as the effect has its answer: the mark has not been written yet.
      run: async ({ n }, ctx) => ctx.effect('charge', { call: async ({ key }) => ({ key, n }) }),
    });
    const n = 48;
    const refs = Array.from({ length: n }, (_, i) => ({ tenant: `T${i % 3}`, id: `e${i}` }));
    await Promise.all(refs.map((r, i) => h.sluice.submit({ ...r, kind: 'charge', input: { n: i } })));
    h.worker({ slots: { default: 8 }, pollIntervalMs: 600_000 }).start();
    const done = await Promise.all(refs.map((r) => h.sluice.wait(r, { timeoutMs: 10_000 })));
    expect(done.map((o) => o.state)).toEqual(refs.map(() => 'succeeded'));
    expect(calls.effectMarkMany ?? 0).toBe(0);
    expect(calls.effectMarkCommitted ?? 0).toBe(0);
    expect(calls.effectBeginMany).toBeGreaterThanOrEqual(n / 8);
    // Every end carried its operation's mark, and the journal kept the provider's answer.
    expect(ends.map((e) => [e.lease.id, e.marks?.map((m) => m.name)]).sort()).toEqual(
      refs.map((r) => [r.id, ['charge']]).sort(),
    );
    for (const [i, r] of refs.entries()) {
      const [effect] = await store.effectList(r);
      expect(effect).toMatchObject({ state: 'committed', result: { key: effect!.key, n: i } });
    }
  });

  it('a handler that works on after its effect: the mark is written before the end', async () => {
    let markWritten!: () => void;
    const written = new Promise<void>((resolve) => {
      markWritten = resolve;
    });
    const { store, calls } = counting(fileStore(), (method) => {
      if (method === 'effectMarkMany') markWritten();
    });
    h = await harness({ store });
    h.sluice.define('charge', {
      input: z.object({}),
      run: async (_input, ctx) => {
        await ctx.effect('charge', { call: async () => 'ch_1' });
        // Still running: the mark goes with the journal's next batch, not with the end.
        await written;
        const [effect] = await store.effectList({ tenant: ctx.tenant, id: ctx.id });
        return effect?.state ?? null;
      },
    });
    const ref = { tenant: 'North', id: 'slow' };
    await h.sluice.submit({ ...ref, kind: 'charge', input: {} });
    h.worker({ pollIntervalMs: 600_000 }).start();
    const done = await h.sluice.wait(ref, { timeoutMs: 10_000 });
    expect(done).toMatchObject({ state: 'succeeded', result: 'committed' });
    expect(calls.effectMarkMany).toBe(1);
  });

  it('the same effect twice in one attempt: the second returns the first’s result, no call', async () => {
    const store = fileStore();
    // The first mark's write is held until the handler has asked again: the journal still says
    // `pending` when the second `ctx.effect` looks.
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    const marks = store.effectMarkMany.bind(store);
    store.effectMarkMany = async (items) => {
      await held;
      return marks(items);
    };
    h = await harness({ store });
    let calls = 0;
    h.sluice.define('charge', {
      input: z.object({}),
      run: async (_input, ctx) => {
        const call = async () => ({ id: `ch_${++calls}` });
        const first = await ctx.effect('charge', { call });
        await new Promise((resolve) => setImmediate(resolve));
        const second = await ctx.effect('charge', { call });
        release();
        return { first, second };
      },
    });
    const ref = { tenant: 'North', id: 'twice' };
    await h.sluice.submit({ ...ref, kind: 'charge', input: {} });
    h.worker({ pollIntervalMs: 600_000 }).start();
    const done = await h.sluice.wait(ref, { timeoutMs: 10_000 });
    expect(done).toMatchObject({
      state: 'succeeded',
      result: { first: { id: 'ch_1' }, second: { id: 'ch_1' } },
    });
    expect(calls).toBe(1);
    expect((await store.effectList(ref)).map((e) => [e.state, e.result])).toEqual([
      ['committed', { id: 'ch_1' }],
    ]);
  });
});
