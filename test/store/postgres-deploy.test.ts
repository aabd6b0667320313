/**
 * The PostgreSQL store as a team deploys it, on a real server: a migrator role and an app role
 * with only DML rights, a role's connection limit below the pool's size, server settings a managed
 * database may impose on a role or database, and a pooler that drops notifications.
 */
import { randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { canonicalJson, digestOfCanonical } from '../../src/core/digest.js';
import type { PostgresStore } from '../../src/store/postgres/index.js';
import type { SubmitParams } from '../../src/store/types.js';
import { FakeClock } from '../../src/testing/fake-clock.js';
import { ProviderStub } from '../../src/testing/index.js';
import { defineCharge, O7 } from '../helpers/charge-kind.js';
import { harness } from '../helpers/engine.js';
import { usePostgres } from '../helpers/postgres.js';
import { tcpRelay } from '../helpers/tcp-relay.js';

const db = usePostgres();
/** The schema version of this code: its last migration file's number. */
const LATEST = Math.max(
  ...readdirSync(new URL('../../src/store/postgres/migrations/', import.meta.url)).map((f) =>
    Number.parseInt(f, 10),
  ),
);

function item(tenant: string, id: string): SubmitParams {
  const inputJson = canonicalJson({ n: 1 });
  return {
    tenant,
    id,
    class: 'default',
    maxAttempts: 5,
    deadlineMs: null,
    kind: 'charge',
    digest: digestOfCanonical('charge', inputJson),
    inputJson,
  };
}

/** The file's database URL with `-c name=value` options for every connection opened with it. */
function withSettings(settings: Record<string, string>): string {
  const u = new URL(db.url);
  const options = Object.entries(settings).map(([k, v]) => `-c ${k}=${v.replaceAll(' ', '\\ ')}`);
  u.searchParams.set('options', options.join(' '));
  return u.toString();
}

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
      expect(await owner.migrationStatus()).toEqual({ applied: LATEST, latest: LATEST, breakingAhead: null });
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
        // LISTEN and NOTIFY need no privilege: the listener hears the proof its pool sends.
        const stop = await db.store({ schema, connectionString: as(app, password) }).subscribe(() => {});
        await stop();
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

describe('a pool larger than the server gives', () => {
  it('waits for a connection the server has no room for, instead of failing the call', async () => {
    const suffix = randomBytes(4).toString('hex');
    const role = `sluice_t_limited_${suffix}`;
    const password = randomBytes(8).toString('hex');
    const schema = db.freshSchema();
    const admin = await db.client();
    try {
      await db.store({ schema }).migrate();
      // The role may hold two connections; its store's pool asks for up to six.
      await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}' CONNECTION LIMIT 2`);
      await admin.query(`GRANT USAGE ON SCHEMA "${schema}" TO ${role}`);
      await admin.query(
        `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "${schema}" TO ${role}`,
      );
      await admin.query(`GRANT USAGE ON ALL SEQUENCES IN SCHEMA "${schema}" TO ${role}`);
      const store = db.store({ schema, poolSize: 6, connectionString: as(role, password) });
      // Forty calls at once: the pool opens six connections, and the server refuses four (53300).
      const outcomes = await Promise.all(
        Array.from({ length: 40 }, (_, i) => store.operationSubmitMany([item('North', `c${i}`)])),
      );
      expect(outcomes.map(([o]) => o?.status)).toEqual(outcomes.map(() => 'created'));
      expect(store.context.pool.totalCount).toBeLessThanOrEqual(2);
    } finally {
      await db.closeStores();
      await admin.query(`DROP OWNED BY ${role} CASCADE`);
      await admin.query(`DROP ROLE ${role}`);
      await admin.end();
    }
  });
});

describe('server settings', () => {
  it('runs every statement and transaction at read committed, whatever the default', async () => {
    for (const level of ['repeatable read', 'serializable']) {
      const url = withSettings({ default_transaction_isolation: level });
      const store = db.store({ connectionString: url, poolSize: 1 });
      const isolation = `SELECT current_setting('transaction_isolation') AS v`;
      expect(await store.context.query(isolation)).toEqual([{ v: 'read committed' }]);
      expect(await store.context.tx((q) => q(isolation))).toEqual([{ v: 'read committed' }]);
    }
  });

  it('applies each migration once when several processes migrate at once under repeatable read', async () => {
    const schema = db.freshSchema();
    const url = withSettings({ default_transaction_isolation: 'repeatable read' });
    const stores = Array.from({ length: 4 }, () => db.store({ schema, poolSize: 1, connectionString: url }));
    await Promise.all(stores.map((s) => s.migrate()));
    expect(await stores[0]!.migrationStatus()).toEqual({
      applied: LATEST,
      latest: LATEST,
      breakingAhead: null,
    });
  });

  it('refuses to migrate on a read-only connection, even with nothing to apply', async () => {
    const schema = db.freshSchema();
    await db.store({ schema }).migrate();
    const replica = db.store({
      schema,
      connectionString: withSettings({ default_transaction_read_only: 'on' }),
    });
    const refused = await replica.migrate().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refused).toMatchObject({ code: 'store-unknown', retryable: false });
    expect(String((refused as Error).message)).toMatch(/read-only/);
  });

  it('names a migration that fails, rather than calling the store not migrated', async () => {
    const schema = db.freshSchema();
    await db.store({ schema }).migrate();
    // A schema damaged by hand: a table the last migration's SQL function reads is gone, and that
    // migration is struck off, so the next migrate applies it again and it fails.
    const c = await db.client();
    try {
      await c.query(`DROP TABLE "${schema}".queues CASCADE`);
      await c.query(`DROP FUNCTION "${schema}".queue_take_back, "${schema}".queues_forget_made`);
      await c.query(`DELETE FROM "${schema}".migrations WHERE version = 32`);
    } finally {
      await c.end();
    }
    const refused = await db
      .store({ schema })
      .migrate()
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(refused).toMatchObject({ code: 'store-unknown', retryable: false });
    expect(String((refused as Error).message)).toMatch(
      /^migration 32 \(refusals_write_nothing\) failed: .*queues/,
    );
  });

  it('answers writes on a read-only server, and calls to a database not there, as store-unavailable', async () => {
    const schema = db.freshSchema();
    await db.store({ schema }).migrate();
    // A standby after a switchover takes no writes: retry later (503), not a failure of Sluice (500).
    const standby = db.store({
      schema,
      connectionString: withSettings({ default_transaction_read_only: 'on' }),
    });
    const write = await standby.operationSubmitMany([item('North', 'ro-1')]).catch((e: unknown) => e);
    expect(write).toMatchObject({ code: 'store-unavailable', retryable: true });
    expect(String((write as Error).message)).toMatch(/PostgreSQL 25006/);
    // Reads still answer there.
    expect(await standby.operationGet({ tenant: 'North', id: 'ro-1' })).toBeUndefined();
    const gone = new URL(db.url);
    gone.pathname = `/sluice_absent_${randomBytes(4).toString('hex')}`;
    const absent = db.store({ schema, connectionString: gone.toString() });
    const read = await absent.operationGet({ tenant: 'North', id: 'x' }).catch((e: unknown) => e);
    expect(read).toMatchObject({ code: 'store-unavailable', retryable: true });
    expect(String((read as Error).message)).toMatch(/PostgreSQL 3D000/);
    await db.closeStores();
  });

  it('never lets concurrent retry takes exceed the budget under default_transaction_isolation = repeatable read', async () => {
    const clock = new FakeClock();
    const schema = db.freshSchema();
    const url = withSettings({ default_transaction_isolation: 'repeatable read' });
    const stores: PostgresStore[] = Array.from({ length: 3 }, () =>
      db.store({ schema, clock, poolSize: 4, connectionString: url }),
    );
    await stores[0]!.migrate();
    await stores[0]!.operationSubmitMany(Array.from({ length: 30 }, (_, i) => item(`T${i % 5}`, `op-${i}`)));
    let claimed = 0;
    while (claimed < 30) {
      const { rows } = await stores[0]!.operationClaimMany({
        class: 'default',
        owner: 'w',
        limit: 30,
        leaseMs: 30_000,
        retryBudget: { bucketMs: 1000, shard: 0 },
      });
      claimed += rows.length;
    }
    const budget = { windowMs: 60_000, bucketMs: 1000, ratio: 0.1, floor: 2 };
    const takes = await Promise.all(
      Array.from({ length: 40 }, (_, i) => stores[i % 3]!.retryBudgetTake({ ...budget, shard: i % 3 })),
    );
    // 2 + 10% of 30 = 5.
    expect(takes.filter((t) => t.allowed)).toHaveLength(5);
  });
});

/**
 * Whole messages from the server (a type byte, then a length that counts itself), less every
 * notification (NotificationResponse, 'A') while `dropping()` says so, as a connection pooler in
 * transaction mode drops them once the server connection that ran LISTEN went back to its pool.
 * Everything else passes.
 */
function withoutNotifications(
  dropping: () => boolean,
): (chunk: Buffer, toClient: (bytes: Buffer) => void) => void {
  let pending = Buffer.alloc(0);
  return (chunk, toClient) => {
    pending = Buffer.concat([pending, chunk]);
    while (pending.length >= 5) {
      const size = 1 + pending.readInt32BE(1);
      if (pending.length < size) break;
      if (pending[0] !== 0x41 || !dropping()) toClient(pending.subarray(0, size));
      pending = pending.subarray(size);
    }
  };
}

describe('wake-ups behind a pooler that drops notifications', () => {
  it('does not count on a LISTEN that hears nothing, and listens once notifications pass again', async () => {
    const schema = db.freshSchema();
    const direct = db.store({ schema });
    await direct.migrate();
    let dropping = true;
    const relay = await tcpRelay(new URL(db.url), { fromServer: () => withoutNotifications(() => dropping) });
    try {
      const store = db.store({ schema, connectionString: relay.url });
      const lost: unknown[] = [];
      let reconnected = () => {};
      const back = new Promise<void>((resolve) => {
        reconnected = resolve;
      });
      let woken = (_cls: string) => {};
      const wake = new Promise<string>((resolve) => {
        woken = resolve;
      });
      // Resolves, polling meanwhile: the lost wake-ups are told, not thrown.
      const stop = await store.subscribe((cls) => woken(cls), {
        onLost: (error) => lost.push(error),
        onReconnect: () => reconnected(),
        deafRetryMs: 100,
      });
      expect(lost).toHaveLength(1);
      expect(lost[0]).toMatchObject({ code: 'store-unknown', retryable: false });
      expect(String((lost[0] as Error).message)).toMatch(/hears no notifications/);
      // Its statements pass the relay: only the wake-ups are lost.
      expect(await store.migrationStatus()).toEqual({ applied: LATEST, latest: LATEST, breakingAhead: null });

      // The pooler put right: a later try hears its proof, and the wake-ups come again.
      dropping = false;
      await back;
      expect(lost).toHaveLength(1);
      await direct.operationSubmitMany([item('North', 'after-fix')]);
      expect(await wake).toBe('default');
      await stop();
    } finally {
      await db.closeStores();
      await relay.cut();
    }
  });
});
