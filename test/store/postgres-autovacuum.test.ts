/**
 * The warning a PostgreSQL store gives, at its first migration, when autovacuum cannot run on its
 * tables (store/postgres/autovacuum.ts). The server's own settings cannot be changed from a test,
 * so the decision is tested on its own for them; a table's `autovacuum_enabled` can, and is read
 * from a real schema, and the warning heard as a process warning. Whatever this server says of
 * `autovacuum` and `track_counts`, the warning for them is heard exactly when it says off.
 */
import { afterAll, describe, expect, it } from 'vitest';
import {
  AUTOVACUUM_WARNING,
  type AutovacuumSettings,
  autovacuumWarnings,
  readAutovacuumSettings,
} from '../../src/store/postgres/autovacuum.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();

/** Every autovacuum warning this file's process says, from its start. */
const heard: string[] = [];
const listen = (warning: Error & { code?: string }) => {
  if (warning.code === AUTOVACUUM_WARNING) heard.push(warning.message);
};
process.on('warning', listen);
afterAll(() => {
  process.off('warning', listen);
});

/**
 * Resolves once the warnings said before it was called have been heard: `process.emitWarning`
 * delivers each from the next-tick queue, which runs in order.
 */
const saidSoFar = () => new Promise<void>((resolve) => process.nextTick(resolve));

const ALL_ON: AutovacuumSettings = {
  database: 'app',
  schema: 'sluice',
  autovacuum: 'on',
  trackCounts: 'on',
  tablesOff: [],
};

describe('the autovacuum warning, decided', () => {
  it('says nothing when autovacuum runs on every table', () => {
    expect(autovacuumWarnings(ALL_ON)).toEqual([]);
  });

  it("names the server's settings that stop it: autovacuum, track_counts, or both, in one warning", () => {
    const server = (over: Partial<AutovacuumSettings>) => autovacuumWarnings({ ...ALL_ON, ...over });
    expect(server({ autovacuum: 'off' })).toEqual([
      expect.stringMatching(
        /^autovacuum does not run on the PostgreSQL server of database "app" \(autovacuum = off\)/,
      ),
    ]);
    expect(server({ trackCounts: 'off' })).toEqual([
      expect.stringMatching(/\(track_counts = off, which autovacuum needs\)/),
    ]);
    const both = server({ autovacuum: 'off', trackCounts: 'off' });
    expect(both).toHaveLength(1);
    expect(both[0]).toMatch(/\(autovacuum = off; track_counts = off, which autovacuum needs\)/);
    expect(both[0]).toMatch(/claims slow down/);
  });

  it("names the store's tables it is turned off for, apart from the server's warning", () => {
    expect(
      autovacuumWarnings({ ...ALL_ON, autovacuum: 'off', tablesOff: ['effects (TOAST)', 'operations'] }),
    ).toEqual([
      expect.stringMatching(/^autovacuum does not run on the PostgreSQL server/),
      expect.stringMatching(
        /^autovacuum is turned off for tables of the store's schema "sluice" in database "app" \(autovacuum_enabled = false\): effects \(TOAST\), operations; .*RESET \(autovacuum_enabled\)/,
      ),
    ]);
  });
});

describe('the autovacuum warning, on a real schema', () => {
  it("reads the server's settings and the tables whose autovacuum_enabled is false, TOAST included", async () => {
    const store = db.store();
    await store.migrate();
    const client = await db.client();
    try {
      const server = (
        await client.query(`SELECT current_setting('autovacuum') AS a, current_setting('track_counts') AS t`)
      ).rows[0];
      const schema = store.context.schema;
      expect(await readAutovacuumSettings(store.context)).toEqual({
        database: (await client.query('SELECT current_database() AS d')).rows[0].d,
        schema,
        autovacuum: server.a,
        trackCounts: server.t,
        tablesOff: [],
      });
      await client.query(`ALTER TABLE "${schema}".operations SET (autovacuum_enabled = false)`);
      // Any spelling PostgreSQL takes for false; on the TOAST table only, the table itself vacuumed.
      await client.query(`ALTER TABLE "${schema}".effects SET (toast.autovacuum_enabled = off)`);
      // Set back on: not off.
      await client.query(`ALTER TABLE "${schema}".queues SET (autovacuum_enabled = on)`);
      expect((await readAutovacuumSettings(store.context)).tablesOff).toEqual([
        'effects (TOAST)',
        'operations',
      ]);
    } finally {
      await client.end();
    }
  });

  it('is heard at the first migration of a store, once in the process, naming the tables', async () => {
    const first = db.store();
    await first.migrate();
    const schema = first.context.schema;
    const client = await db.client();
    try {
      await client.query(`ALTER TABLE "${schema}".operations SET (autovacuum_enabled = false)`);
      const server = (
        await client.query(
          `SELECT current_setting('autovacuum') = 'on' AND current_setting('track_counts') = 'on' AS on`,
        )
      ).rows[0].on as boolean;
      await saidSoFar();
      const before = heard.length;

      // A process starting on the schema: its first migration reads the table's setting.
      await db.store({ schema }).migrate();
      await saidSoFar();
      const about = heard.slice(before).filter((w) => w.includes(`schema "${schema}"`));
      expect(about).toEqual([expect.stringMatching(/\(autovacuum_enabled = false\): operations;/)]);

      // Said once in the process: another store on the schema, or this one migrated again, is silent.
      const again = db.store({ schema });
      await again.migrate();
      await again.migrate();
      await saidSoFar();
      expect(heard.slice(before).filter((w) => w.includes(`schema "${schema}"`))).toHaveLength(1);

      // This server's own settings: the warning about them was heard exactly when it has them off.
      const serverWarnings = heard.filter((w) =>
        w.startsWith('autovacuum does not run on the PostgreSQL server'),
      );
      expect(serverWarnings).toHaveLength(server ? 0 : 1);
    } finally {
      await client.end();
    }
  });
});
