/**
 * A build refuses a store that a newer build migrated past a version it marked breaking
 * (`store-schema-newer`), before applying anything; a newer version marked compatible lets it
 * run, as a rollback or a rolling upgrade needs. Both stores, real files and a real server.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { isStoreError, loadConfig } from '../../src/index.js';
import { startService } from '../../src/service/index.js';
import { COMPATIBLE_MARK } from '../../src/store/migrations.js';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import { silent } from '../helpers/engine.js';
import { usePostgres } from '../helpers/postgres.js';

const ROOT = join(import.meta.dirname, '../..');
const pg = usePostgres();
const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

function sqliteFile(): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-schema-'));
  dirs.push(dir);
  return join(dir, 'sluice.db');
}

const codeOf = (p: Promise<unknown>) =>
  p.then(
    () => 'resolved',
    (e: unknown) => (isStoreError(e) ? e.code : String(e)),
  );

describe('a schema newer than the build', () => {
  it('marks the migration files: compatible only where the file says so', async () => {
    const { loadMigrations } = await import('../../src/store/migrations.js');
    for (const driver of ['sqlite', 'postgres']) {
      const migrations = loadMigrations(join(ROOT, 'src/store', driver, 'migrations'));
      const compatible = migrations.filter((m) => !m.breaking).map((m) => m.version);
      expect(compatible, driver).toEqual(
        migrations.filter((m) => m.sql.includes(COMPATIBLE_MARK)).map((m) => m.version),
      );
      // The seq floor (25) is one: an older build's submit and purge run as they did.
      expect(compatible, driver).toContain(25);
      expect(migrations.find((m) => m.version === 24)?.breaking, driver).toBe(true);
    }
  });

  it('SQLite: a breaking version ahead is refused, a compatible one is not', async () => {
    const path = sqliteFile();
    const store = sqliteStore({ path });
    await store.migrate();
    const { latest } = await store.migrationStatus();
    await store.close();

    const raw = new Database(path);
    raw
      .prepare('INSERT INTO sluice_migrations (version, name, applied_at, breaking) VALUES (?, ?, 0, 0)')
      .run(latest + 1, 'from_a_newer_build');
    raw.close();
    const tolerant = sqliteStore({ path });
    expect(await tolerant.migrationStatus()).toEqual({ applied: latest + 1, latest, breakingAhead: null });
    expect(await codeOf(tolerant.migrate())).toBe('resolved');
    await tolerant.close();

    const raw2 = new Database(path);
    raw2
      .prepare('INSERT INTO sluice_migrations (version, name, applied_at, breaking) VALUES (?, ?, 0, 1)')
      .run(latest + 2, 'breaks_older_builds');
    raw2.close();
    const refused = sqliteStore({ path });
    expect(await refused.migrationStatus()).toEqual({
      applied: latest + 2,
      latest,
      breakingAhead: latest + 2,
    });
    expect(await codeOf(refused.migrate())).toBe('store-schema-newer');
    await refused.close();
  });

  it('SQLite: a file migrated before versions were marked counts every version as breaking', async () => {
    const path = sqliteFile();
    const raw = new Database(path);
    raw.exec(`CREATE TABLE sluice_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL);
              INSERT INTO sluice_migrations VALUES (1000, 'far_ahead', 0);`);
    raw.close();
    const store = sqliteStore({ path });
    const status = await store.migrationStatus();
    expect(status.breakingAhead).toBe(1000);
    expect(await codeOf(store.migrate())).toBe('store-schema-newer');
    await store.close();
    // The refusal changed nothing: no migration applied, no table made.
    const after = new Database(path, { readonly: true });
    expect(after.prepare('SELECT count(*) AS n FROM sluice_migrations').get()).toEqual({ n: 1 });
    expect(after.prepare(`SELECT count(*) AS n FROM sqlite_master WHERE name = 'operations'`).get()).toEqual({
      n: 0,
    });
    after.close();
  });

  it('SQLite: an unmarked table migrated by an earlier build of this line is upgraded in place', async () => {
    const path = sqliteFile();
    const store = sqliteStore({ path });
    await store.migrate();
    await store.close();
    const raw = new Database(path);
    // As an earlier build left it: no `breaking` column.
    raw.exec('ALTER TABLE sluice_migrations DROP COLUMN breaking');
    raw.close();
    const again = sqliteStore({ path });
    await again.migrate();
    const status = await again.migrationStatus();
    expect(status).toEqual({ applied: status.latest, latest: status.latest, breakingAhead: null });
    await again.close();
  });

  it('PostgreSQL: a breaking version ahead is refused by migrate and by a service that does not migrate', async () => {
    const schema = pg.freshSchema();
    const store = pg.store({ schema });
    await store.migrate();
    const { latest } = await store.migrationStatus();
    const client = await pg.client();
    try {
      await client.query(
        `INSERT INTO "${schema}".migrations (version, name, applied_at, breaking) VALUES ($1, $2, 0, false)`,
        [latest + 1, 'from_a_newer_build'],
      );
      expect(await store.migrationStatus()).toEqual({ applied: latest + 1, latest, breakingAhead: null });
      expect(await codeOf(store.migrate())).toBe('resolved');

      await client.query(
        `INSERT INTO "${schema}".migrations (version, name, applied_at, breaking) VALUES ($1, $2, 0, true)`,
        [latest + 2, 'breaks_older_builds'],
      );
      expect(await store.migrationStatus()).toEqual({
        applied: latest + 2,
        latest,
        breakingAhead: latest + 2,
      });
      expect(await codeOf(store.migrate())).toBe('store-schema-newer');

      const dir = mkdtempSync(join(tmpdir(), 'sluice-schema-'));
      dirs.push(dir);
      const file = join(dir, 'sluice.config.mjs');
      writeFileSync(
        file,
        `export default { db: ${JSON.stringify(pg.url)}, postgres: { schema: ${JSON.stringify(schema)} }, migrate: 'manual' };\n`,
      );
      const started = startService(await loadConfig(file), { role: 'api', port: 0, logger: silent });
      expect(await codeOf(started)).toBe('store-schema-newer');
      const cli = spawnSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), 'migrate', '--config', file], {
        encoding: 'utf8',
        env: { ...process.env, SLUICE_DB: undefined },
      });
      expect(cli.status).toBe(1);
      expect(cli.stderr).toMatch(/store-schema-newer|newer build of Sluice/);

      // A schema migrated before versions were marked: the column is added, every version breaking.
      await client.query(`DELETE FROM "${schema}".migrations WHERE version > $1`, [latest]);
      await client.query(`ALTER TABLE "${schema}".migrations DROP COLUMN breaking`);
      expect(await store.migrationStatus()).toEqual({ applied: latest, latest, breakingAhead: null });
      await store.migrate();
      const { rows } = await client.query(`SELECT bool_and(breaking) AS all FROM "${schema}".migrations`);
      expect(rows[0].all).toBe(true);
    } finally {
      await client.end();
    }
  });
});
