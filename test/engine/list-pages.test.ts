/**
 * A listing's page is bounded by what it carries as well as by its `limit`: it ends at the first
 * operation that brings the page's inputs, results and errors to LIST_PAGE_BYTES, and its cursor
 * leads on to the rest, so paging still covers every operation once.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { canonicalJson } from '../../src/core/digest.js';
import { LIST_PAGE_BYTES } from '../../src/sluice.js';
import { type Harness, harness } from '../helpers/engine.js';

describe('list pages', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('end at the page byte bound, and their cursors cover every operation once', async () => {
    h = await harness();
    h.sluice.define('upload', { input: z.object({ blob: z.string() }), run: () => null });
    // 60,000 bytes an input: the page reaches 1 MiB at its 18th operation (1,080,000 bytes).
    const input = (i: number) => ({ blob: String(i).padStart(60_000 - 11, '.') });
    expect(canonicalJson(input(1)).length).toBe(60_000);
    const ids = Array.from({ length: 20 }, (_, i) => `u${String(i).padStart(2, '0')}`);
    await h.sluice.submitMany(ids.map((id, i) => ({ tenant: 'North', id, kind: 'upload', input: input(i) })));

    const first = await h.sluice.list({ tenant: 'North', limit: 500 });
    const reached = Math.ceil(LIST_PAGE_BYTES / 60_000);
    expect(reached).toBe(18);
    expect(first.operations.map((o) => o.id)).toEqual(ids.slice(0, reached));
    expect(first.nextCursor).not.toBeNull();
    const second = await h.sluice.list({ tenant: 'North', limit: 500, cursor: first.nextCursor! });
    expect(second.operations.map((o) => o.id)).toEqual(ids.slice(reached));
    expect(second.nextCursor).toBeNull();

    // Small operations: only the limit bounds the page, as before.
    const small = await h.sluice.list({ tenant: 'North', limit: 3 });
    expect([small.operations.length, small.nextCursor !== null]).toEqual([3, true]);
  });
});
