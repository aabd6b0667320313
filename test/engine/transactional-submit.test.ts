/**
 * Transactional submit on SQLite: the operation is accepted if and only if the caller's own
 * transaction (on its own connection to the same file) commits — the outbox pattern with no
 * outbox. The PostgreSQL form is tested in test/store/postgres-engine.test.ts.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isInvalidArgument } from '../../src/index.js';
import { type Harness, harness } from '../helpers/engine.js';

describe('transactional submit (SQLite)', () => {
  let h: Harness;
  let app: Database.Database;
  afterEach(async () => {
    app?.close();
    await h?.close();
  });

  async function setup() {
    h = await harness();
    h.sluice.define('invoice-email', { input: z.object({ invoice: z.number() }), run: () => 'sent' });
    app = new Database(h.dbPath);
    app.pragma('busy_timeout = 5000');
    app.exec('CREATE TABLE IF NOT EXISTS invoices (id INTEGER PRIMARY KEY, amount INTEGER)');
  }

  it('accepts the operation when the business transaction commits', async () => {
    await setup();
    app.exec('BEGIN IMMEDIATE');
    app.prepare('INSERT INTO invoices (id, amount) VALUES (7, 5000)').run();
    const { created } = await h.sluice.submit(
      { tenant: 'North', id: 'mail-7', kind: 'invoice-email', input: { invoice: 7 } },
      { tx: app },
    );
    expect(created).toBe(true);
    app.exec('COMMIT');
    h.worker().start();
    expect((await h.sluice.wait({ tenant: 'North', id: 'mail-7' })).result).toBe('sent');
  });

  it('leaves nothing when it rolls back — not the operation, not a counter', async () => {
    await setup();
    app.exec('BEGIN IMMEDIATE');
    app.prepare('INSERT INTO invoices (id, amount) VALUES (8, 5000)').run();
    await h.sluice.submit(
      { tenant: 'North', id: 'mail-8', kind: 'invoice-email', input: { invoice: 8 } },
      { tx: app },
    );
    app.exec('ROLLBACK');
    expect(await h.sluice.get({ tenant: 'North', id: 'mail-8' })).toBeUndefined();
    expect(app.prepare('SELECT count(*) AS n FROM invoices').get()).toEqual({ n: 0 });
    expect(await h.store.queueStats()).toEqual([]);
    // The same id is free: nothing was accepted.
    expect(
      (await h.sluice.submit({ tenant: 'North', id: 'mail-8', kind: 'invoice-email', input: { invoice: 8 } }))
        .created,
    ).toBe(true);
  });

  it('refuses, as a wrong argument, a handle on another database file', async () => {
    await setup();
    // The application's own database, not the store's: no retry or migrate makes it right.
    const other = new Database(join(h.dir, 'app.db'));
    try {
      other.exec('BEGIN IMMEDIATE');
      const error = await h.sluice
        .submit(
          { tenant: 'North', id: 'mail-10', kind: 'invoice-email', input: { invoice: 10 } },
          { tx: other },
        )
        .catch((e) => e);
      expect([isInvalidArgument(error), error.message]).toEqual([
        true,
        expect.stringMatching(/^tx: the handle/),
      ]);
      other.exec('ROLLBACK');
    } finally {
      other.close();
    }
    expect(await h.sluice.get({ tenant: 'North', id: 'mail-10' })).toBeUndefined();
  });

  it('refuses a handle that is not inside a transaction', async () => {
    await setup();
    const error = await h.sluice
      .submit({ tenant: 'North', id: 'mail-9', kind: 'invoice-email', input: { invoice: 9 } }, { tx: app })
      .catch((e) => e);
    expect(isInvalidArgument(error)).toBe(true);
    expect(await h.sluice.get({ tenant: 'North', id: 'mail-9' })).toBeUndefined();
  });
});
