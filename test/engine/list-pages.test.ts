/**
 * A listing's page is bounded by what it carries as well as by its `limit`: it ends at the first
 * operation that brings the page's inputs, results and errors to LIST_PAGE_BYTES, and its cursor
 * leads on to the rest, so paging still covers every operation once.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { canonicalJson } from '../../src/core/digest.js';
import { Sluice, sqliteStore } from '../../src/index.js';
import { LIST_PAGE_BYTES } from '../../src/sluice.js';
import { type Harness, harness, silent } from '../helpers/engine.js';

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

  it("carry cursors another process reads, and that tell nothing of other tenants' submits", async () => {
    h = await harness();
    h.sluice.define('noop', { input: z.object({}), run: () => null });
    const submit = (tenant: string, from: number, n: number) =>
      h.sluice.submitMany(
        Array.from({ length: n }, (_, i) => ({
          tenant,
          id: `${tenant}-${from + i}`,
          kind: 'noop',
          input: {},
        })),
      );
    await submit('North', 0, 2);
    const first = await h.sluice.list({ tenant: 'North', limit: 1 });
    // South submits a thousand between North's cursors; North's cursors show nothing of them.
    await submit('South', 0, 1000);
    await submit('North', 2, 2);
    const second = await h.sluice.list({ tenant: 'North', limit: 2, cursor: first.nextCursor! });
    expect(second.operations.map((o) => o.id)).toEqual(['North-1', 'North-2']);
    for (const cursor of [first.nextCursor!, second.nextCursor!])
      expect(Buffer.from(cursor, 'base64url').toString('latin1')).not.toMatch(/^\d+$/);
    // Another engine on the same store (another API process) reads them: the key is the store's.
    const other = new Sluice({ store: sqliteStore({ path: h.dbPath }), logger: silent });
    try {
      const third = await other.list({ tenant: 'North', limit: 10, cursor: second.nextCursor! });
      expect(third.operations.map((o) => o.id)).toEqual(['North-3']);
      // A cursor of the earlier form (the position in base64url) is refused: anyone could forge
      // one for any position and read the service's volume off the answers.
      const firstRow = await h.store.operationGet({ tenant: 'North', id: 'North-0' });
      const earlier = Buffer.from(String(firstRow!.seq)).toString('base64url');
      await expect(other.list({ tenant: 'North', cursor: earlier })).rejects.toMatchObject({
        code: 'invalid-argument',
      });
      await expect(
        other.list({ tenant: 'North', cursor: `${second.nextCursor!.slice(0, 21)}_` }),
      ).rejects.toMatchObject({
        code: 'invalid-argument',
      });
    } finally {
      await other.close();
    }
  });
});
