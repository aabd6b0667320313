/**
 * The store calls of a worker's hot loop: attempts' ends are written together, and the claim
 * that fills their slots again rides in the same call (one transaction, one commit), so a
 * backlog costs one call per round of slots, not two.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sqliteStore } from '../../src/index.js';
import type { Store } from '../../src/store/store.js';
import { type Harness, harness } from '../helpers/engine.js';

/** A store that counts the calls of the hot loop by method. */
function counting(store: Store): { store: Store; calls: Record<string, number> } {
  const calls: Record<string, number> = {};
  for (const method of ['operationClaimMany', 'attemptFinishMany', 'attemptFinishAndClaim'] as const) {
    const real = store[method].bind(store) as (...args: unknown[]) => Promise<unknown>;
    (store as unknown as Record<string, unknown>)[method] = (...args: unknown[]) => {
      calls[method] = (calls[method] ?? 0) + 1;
      return real(...args);
    };
  }
  return { store, calls };
}

describe('a worker draining a backlog', () => {
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
});
