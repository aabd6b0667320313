/**
 * @module test/conformance/sqlite-fixture
 * The SQLite store factory for the conformance suite and the state-machine property: a fresh
 * database file in its own temp folder, migrated, its clock a `FakeClock`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type SqliteStore, sqliteStore } from '../../src/store/sqlite/index.js';
import { FakeClock } from '../../src/testing/fake-clock.js';
import type { StoreFixture } from './fixtures.js';

/** The fixture with the store's own type, for tests that read the file's tables. */
export interface SqliteFixture extends StoreFixture {
  store: SqliteStore;
}

/** A migrated SQLite store on a new temp file; `cleanup` closes it and removes the folder. */
export async function sqliteFixture(): Promise<SqliteFixture> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-conformance-'));
  const clock = new FakeClock();
  const store = sqliteStore({ path: join(dir, 'sluice.db'), clock });
  await store.migrate();
  return {
    store,
    clock,
    async cleanup() {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
