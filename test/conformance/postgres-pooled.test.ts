/**
 * The store conformance suite on PostgreSQL behind a real PgBouncer in transaction mode
 * (`pooler: 'transaction'`): a pool of 3 clients on 2 server connections, so consecutive calls,
 * and the transactions of one, run on whichever server connection the pooler hands out. The
 * listening connection goes to the server directly (`listenUrl`). No case is skipped.
 */
import { describe } from 'vitest';
import { FakeClock } from '../../src/testing/fake-clock.js';
import { usePgBouncer } from '../helpers/pgbouncer.js';
import { usePostgres } from '../helpers/postgres.js';
import { describeStoreConformance } from './store-suite.js';

const db = usePostgres();
const bouncer = usePgBouncer(db, { mode: 'transaction', poolSize: 2 });

// Without the binary (outside CI; in CI the helper fails instead) the suite is reported skipped.
describe.skipIf(!bouncer.available)('behind PgBouncer', () => {
  describeStoreConformance('postgres behind PgBouncer (transaction mode)', async () => {
    const clock = new FakeClock();
    // Migrated directly (a third of the file's time, through the pooler); migrating through it is
    // test/store/postgres-pooler.test.ts's.
    const schema = db.freshSchema();
    const direct = db.store({ schema, poolSize: 1 });
    await direct.migrate();
    await direct.close();
    const store = db.store({
      schema,
      clock,
      poolSize: 3,
      connectionString: bouncer.url(),
      pooler: 'transaction',
      listenUrl: db.url,
    });
    return { store, clock, cleanup: () => store.close() };
  });
});
