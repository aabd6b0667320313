/**
 * Schema version 28 deletes, once, the queue rows of tenants left with no operation by the purges
 * of earlier builds (which kept them), on both stores: a row holding work, or of a tenant with any
 * operation left, stays. The version is applied again here on a store at the latest version whose
 * queues hold such rows, as an upgraded store would.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import type { Store } from '../../src/store/store.js';
import { claimOne, leaseOf, submitParams } from '../conformance/fixtures.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();

/** Leaves a store as an earlier build's purge did, then applies version 28 again. */
async function upgrade(
  store: Store,
  run: (sql: string) => Promise<void>,
  migrations: string,
): Promise<string[]> {
  await store.migrate();
  // Busy: an operation waiting. Finished: one that succeeded, not yet purged.
  await store.operationSubmitMany([
    submitParams({ tenant: 'Finished', id: 'f' }),
    submitParams({ tenant: 'Busy', id: 'b', class: 'bulk' }),
  ]);
  await store.attemptFinishMany([{ lease: leaseOf(await claimOne(store)), outcome: 'succeeded', result: 1 }]);
  // Gone and Gone2: rows an earlier build's purge left behind, their operations purged.
  await run(`INSERT INTO queues (class, tenant, vtime) VALUES ('default', 'Gone', 5), ('bulk', 'Gone', 5),
                                                             ('default', 'Gone2', 1)`);
  await run(`DELETE FROM ${migrations} WHERE version = 28`);
  await store.migrate();
  // Version 28 ran again (what the rows say below), and the store is at this build's latest.
  const status = await store.migrationStatus();
  expect(status.applied).toBe(status.latest);
  return (await store.queueStats()).map((q) => `${q.class}/${q.tenant}`);
}

const KEPT = ['bulk/Busy', 'default/Finished'];

describe('schema version 28', () => {
  it('forgets the queue rows of tenants left with no operation, on SQLite', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-v28-'));
    const store = sqliteStore({ path: join(dir, 'sluice.db') });
    try {
      const left = await upgrade(
        store,
        async (sql) => {
          store.context.db.exec(sql);
        },
        'sluice_migrations',
      );
      expect(left).toEqual(KEPT);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('forgets the queue rows of tenants left with no operation, on PostgreSQL', async () => {
    const schema = db.freshSchema();
    const store = db.store({ schema });
    const left = await upgrade(
      store,
      async (sql) => {
        await store.context.query(sql.replaceAll(/\b(queues|migrations)\b/g, '{s}.$1'));
      },
      'migrations',
    );
    expect(left).toEqual(KEPT);
  });
});
