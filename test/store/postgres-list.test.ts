/**
 * PostgreSQL's listing of a tenant's running operations reads the leases' index, not the tenant's
 * history (store/postgres/list.ts): the rows the server reads for it, counted by the server's own
 * statistics, stay near the running operations however long the history is. The listing is sent
 * unprepared and planned with the table's statistics, as autovacuum keeps them on a server; this
 * one's autovacuum may be off, so the test takes them itself with `ANALYZE`.
 */
import { describe, expect, it } from 'vitest';
import { claim, submitParams } from '../conformance/fixtures.js';
import { rowsRead, usePostgres } from '../helpers/postgres.js';

const db = usePostgres();
const HISTORY = 20_000;

describe("PostgreSQL's listing of running operations", () => {
  it("reads the leases' index, not the tenant's settled history", async () => {
    const schema = db.freshSchema();
    const store = db.store({ schema, poolSize: 1 });
    await store.migrate();
    // A long settled history for North, written straight into the table: the listing's plan is
    // what is under test, and the store would take minutes to end this many one claim at a time.
    const client = await db.client();
    try {
      await client.query(
        `INSERT INTO "${schema}".operations (tenant, id, kind, class, digest, input, state, max_attempts,
                run_after, created_at, updated_at, finished_at, result)
         SELECT 'North', 'old-' || i, 'charge', 'default', 'd', '{}', 'succeeded', 5, 0, 0, 0, 0, '1'
           FROM generate_series(1, ${HISTORY}) AS i`,
      );
      await store.operationSubmitMany([
        submitParams({ id: 'a' }),
        submitParams({ id: 'b' }),
        submitParams({ id: 'c', delayMs: 3_600_000 }),
        submitParams({ tenant: 'South', id: 's' }),
      ]);
      const running = await claim(store, { limit: 10 });
      expect(running.map((r) => `${r.tenant}/${r.id}`).sort()).toEqual(['North/a', 'North/b', 'South/s']);
      await client.query(`ANALYZE "${schema}".operations`);
    } finally {
      await client.end();
    }

    const read = async (p: Parameters<typeof store.operationList>[0]) => {
      const before = await rowsRead(store, schema, ['operations']);
      const rows = await store.operationList(p);
      return { ids: rows.map((r) => r.id), read: (await rowsRead(store, schema, ['operations'])) - before };
    };
    const north = await read({ tenant: 'North', state: 'running', limit: 100 });
    expect(north.ids).toEqual(['a', 'b']);
    expect(north.read).toBeLessThan(100);
    const every = await read({ state: 'running', limit: 100 });
    expect(every.ids).toEqual(['a', 'b', 's']);
    expect(every.read).toBeLessThan(100);
    // What the same listing of a settled state reads, for scale: the history it pages through.
    const settled = await read({ tenant: 'North', state: 'succeeded', limit: 100 });
    expect(settled.ids).toHaveLength(100);
  });
});
