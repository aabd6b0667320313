/**
 * The store behind a real PgBouncer in transaction mode (`pooler: 'transaction'`), where one
 * client's consecutive transactions run on whichever server connection is free: two engines of
 * 6 connections each on 2 server connections. Their workers charge every operation exactly once,
 * and hear wake-ups through `listenUrl` (a poll interval longer than the test). Without
 * `listenUrl` a worker is told at once that it cannot listen, and polls. The settings the store
 * no longer makes on its connections are checked where a service starts, with the fix named.
 * (The conformance suite runs whole behind the pooler: test/conformance/postgres-pooled.test.ts.)
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isInvalidArgument, isSluiceError } from '../../src/index.js';
import { startService } from '../../src/service/index.js';
import { ProviderStub } from '../../src/testing/index.js';
import { chargeAcross, defineCharge } from '../helpers/charge-kind.js';
import { type Harness, harness, silent } from '../helpers/engine.js';
import { usePgBouncer } from '../helpers/pgbouncer.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();
const bouncer = usePgBouncer(db, { mode: 'transaction', poolSize: 2 });
const open: Harness[] = [];
afterEach(async () => {
  await Promise.all(open.splice(0).map((h) => h.close()));
});

async function engine(schema: string, listen: boolean): Promise<Harness> {
  const store = db.store({
    schema,
    poolSize: 6,
    connectionString: bouncer.url(),
    pooler: 'transaction',
    ...(listen ? { listenUrl: db.url } : {}),
  });
  const h = await harness({ store });
  open.push(h);
  return h;
}

describe.skipIf(!bouncer.available)('behind PgBouncer in transaction mode', () => {
  it('two engines charge every operation once, woken through listenUrl, not by polling', async () => {
    const schema = db.freshSchema();
    const [a, b] = [await engine(schema, true), await engine(schema, true)];
    const provider = new ProviderStub();
    for (const h of [a, b]) {
      defineCharge(h.sluice, provider);
      // Longer than the test: work is found by wake-ups and freed slots only.
      h.worker({ slots: { default: 4 }, pollIntervalMs: 3_600_000 }).start();
    }
    const done = await chargeAcross([a.sluice, b.sluice], 60, 3);
    expect(done.filter((op) => op.state !== 'succeeded')).toEqual([]);
    expect([provider.ledger().length, provider.doubleCharges()]).toEqual([60, []]);
    // After a pause, one more: only a wake-up can start it.
    const late = { tenant: 'T0', id: 'late' };
    await b.sluice.submit({ ...late, kind: 'charge', input: { invoice: 99, amount_cents: 1 } });
    expect((await a.sluice.wait(late)).state).toBe('succeeded');
  });

  it('a service configured for the pooler takes a submit over HTTP and runs it', async () => {
    const service = await startService(
      {
        db: bouncer.url(),
        postgres: { schema: db.freshSchema(), poolSize: 3, pooler: 'transaction', listenUrl: db.url },
        auth: { tenants: { north: ['north-pooled-key'] } },
        kinds: { note: { input: z.object({ text: z.string() }), run: (input) => input.text.length } },
        worker: { pollIntervalMs: 3_600_000 },
      },
      { port: 0, host: '127.0.0.1', logger: silent },
    );
    try {
      const headers = { authorization: 'Bearer north-pooled-key', 'content-type': 'application/json' };
      const accepted = await fetch(`${service.url}/v1/operations`, {
        method: 'POST',
        headers: { ...headers, 'idempotency-key': 'n1' },
        body: JSON.stringify({ kind: 'note', input: { text: 'pooled' } }),
      });
      expect(accepted.status).toBe(202);
      const done = await service.sluice.wait({ tenant: 'north', id: 'n1' });
      expect([done.state, done.result]).toEqual(['succeeded', 6]);
    } finally {
      await service.stop({ graceMs: 1000 });
    }
  });

  it('without listenUrl a worker is told at once it cannot listen, and polls', async () => {
    const h = await engine(db.freshSchema(), false);
    const refused = await h.store.subscribe?.(() => {}).catch((e) => e);
    expect([isSluiceError(refused) && refused.code, refused?.message]).toEqual([
      'store-unknown',
      expect.stringMatching(/^behind a transaction pooler LISTEN .* give listenUrl/),
    ]);
    const provider = new ProviderStub();
    defineCharge(h.sluice, provider);
    h.worker({ pollIntervalMs: 20 }).start();
    await h.sluice.submit({
      tenant: 'North',
      id: 'O7',
      kind: 'charge',
      input: { invoice: 7, amount_cents: 5 },
    });
    expect((await h.sluice.wait({ tenant: 'North', id: 'O7' })).state).toBe('succeeded');
  });
});

describe("the sessions a transaction pooler's store needs", () => {
  it('refuses sessions that do not start read committed or that lose commits, naming the fix', async () => {
    const admin = await db.client();
    const database = (await admin.query('SELECT current_database() AS d')).rows[0].d as string;
    // This file's own database: no other file's sessions see it.
    const set = (setting: string, value: string | null) =>
      admin.query(
        value === null
          ? `ALTER DATABASE "${database}" RESET ${setting}`
          : `ALTER DATABASE "${database}" SET ${setting} = '${value}'`,
      );
    // Directly, not through the pooler: what is checked is the session's defaults.
    const pooled = (options: { durableCommits?: boolean } = {}) =>
      db.store({ pooler: 'transaction', poolSize: 1, ...options });
    try {
      await set('default_transaction_isolation', 'repeatable read');
      const isolation = await pooled()
        .migrate()
        .catch((e) => e);
      expect([isInvalidArgument(isolation), isolation.message]).toEqual([
        true,
        expect.stringContaining("ALTER ROLE … SET default_transaction_isolation = 'read committed'"),
      ]);
      // The status a manual migration reads is refused alike.
      expect(
        isInvalidArgument(
          await pooled()
            .migrationStatus()
            .catch((e) => e),
        ),
      ).toBe(true);
      await set('default_transaction_isolation', null);
      await set('synchronous_commit', 'off');
      const lossy = await pooled()
        .migrate()
        .catch((e) => e);
      expect([isInvalidArgument(lossy), lossy.message]).toEqual([
        true,
        expect.stringContaining("ALTER ROLE … SET synchronous_commit = 'local'"),
      ]);
      // Told that commits may be lost, the store takes such sessions.
      await pooled({ durableCommits: false }).migrate();
      // A direct store raises the setting itself, as before.
      await db.store().migrate();
    } finally {
      await set('default_transaction_isolation', null);
      await set('synchronous_commit', null);
      await admin.end();
      await db.closeStores();
    }
  });

  it('refuses a statement timeout it could not send, and a pooler it does not know', () => {
    expect(() => db.store({ pooler: 'transaction', statementTimeoutMs: 1000 })).toThrow(
      /statementTimeoutMs cannot reach the server through a transaction pooler/,
    );
    expect(() => db.store({ pooler: 'session' as never })).toThrow(/pooler is 'transaction' or left out/);
    expect(() => db.store({ listenUrl: '' })).toThrow(/listenUrl must be a non-empty/);
  });
});
