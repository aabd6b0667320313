/**
 * The PostgreSQL store as a team deploys it, on a real server: a migrator role and an app role
 * with only DML rights.
 */
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { ProviderStub } from '../../src/testing/index.js';
import { defineCharge, O7 } from '../helpers/charge-kind.js';
import { harness } from '../helpers/engine.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();

/** The file's database URL, logged in as `user`. */
function as(user: string, password: string): string {
  const u = new URL(db.url);
  u.username = user;
  u.password = password;
  return u.toString();
}

describe('least privilege', () => {
  it('migrates as the owner of a schema made for it, and runs as a role with only DML rights', async () => {
    const suffix = randomBytes(4).toString('hex');
    const migrator = `sluice_t_migrator_${suffix}`;
    const app = `sluice_t_app_${suffix}`;
    const password = randomBytes(8).toString('hex');
    const schema = db.freshSchema();
    const admin = await db.client();
    try {
      // Neither role may create anything in the database (no CREATE on it, nor on `public`).
      for (const role of [migrator, app])
        await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
      await admin.query(`CREATE SCHEMA "${schema}" AUTHORIZATION ${migrator}`);
      const owner = db.store({ schema, connectionString: as(migrator, password) });
      await owner.migrate();
      expect(await owner.migrationStatus()).toEqual({ applied: 24, latest: 24 });
      await admin.query(`GRANT USAGE ON SCHEMA "${schema}" TO ${app}`);
      await admin.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "${schema}" TO ${app}`);
      await admin.query(`GRANT USAGE ON ALL SEQUENCES IN SCHEMA "${schema}" TO ${app}`);

      // The service's start (`migrate: 'auto'`) migrates: with nothing pending, a no-op.
      const h = await harness({ store: db.store({ schema, connectionString: as(app, password) }) });
      try {
        const provider = new ProviderStub();
        defineCharge(h.sluice, provider);
        h.worker({ pollIntervalMs: 60_000 }).start();
        await h.sluice.submit({ tenant: 'North', id: 'O7', kind: 'charge', input: O7 });
        const done = await h.sluice.wait({ tenant: 'North', id: 'O7' });
        expect([done.state, provider.calls]).toEqual(['succeeded', 1]);
        expect(await h.sluice.purgeExpired()).toBe(0);
      } finally {
        await h.close();
      }
    } finally {
      await db.closeStores();
      for (const role of [migrator, app]) {
        await admin.query(`DROP OWNED BY ${role} CASCADE`);
        await admin.query(`DROP ROLE ${role}`);
      }
      await admin.end();
    }
  });
});
