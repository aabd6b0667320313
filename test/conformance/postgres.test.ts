/**
 * The store conformance suite on PostgreSQL: one database for this file (test/helpers/
 * postgres.ts: `DATABASE_URL`'s server, or an embedded one), a fresh schema per case, migrated,
 * its clock a `FakeClock` (passed to the server as each statement's `now`). No case is skipped.
 */
import { FakeClock } from '../../src/testing/fake-clock.js';
import { usePostgres } from '../helpers/postgres.js';
import { describeStoreConformance } from './store-suite.js';

const db = usePostgres();

describeStoreConformance('postgres', async () => {
  const clock = new FakeClock();
  const store = db.store({ clock, poolSize: 3 });
  await store.migrate();
  return { store, clock, cleanup: () => store.close() };
});
