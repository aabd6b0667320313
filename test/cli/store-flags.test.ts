/**
 * How the operator commands (`migrate`, `ops`, `tenants`) find their store, and what they say
 * about it, run as a user runs them (the built CLI):
 *
 * - a PostgreSQL URL's password is never printed, in whatever form the URL carries it (in the
 *   user part, holding an `@`, or as a `password` parameter), from `--db` or `SLUICE_DB`;
 * - the `sluice migrate` suggested for an unmigrated store is the one that migrates that store: a
 *   store named by a config file is migrated with the config (its PostgreSQL schema), not with
 *   its URL alone, which would migrate the default schema;
 * - a config found in the current folder is not read when `--db` or `SLUICE_DB` names the store
 *   (a broken one does not stop `ops list`); a `--config` given is.
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { type Ran, runCli } from '../helpers/cli.js';
import { usePostgres } from '../helpers/postgres.js';
import { assertBuilt } from '../helpers/worker-process.js';

const pg = usePostgres();

/** The built CLI in `cwd`, with `env` over this process's environment. */
const cli = (cwd: string, args: string[], env: Record<string, string | undefined> = {}): Promise<Ran> =>
  runCli(args, { cwd, env });

beforeAll(() => assertBuilt());

/** Standard error without the store's autovacuum warning (store/postgres/autovacuum.ts) and Node's hint after it. */
const withoutAutovacuumWarning = (stderr: string): string =>
  stderr.replace(/^\(node:\d+\) \[SLUICE_AUTOVACUUM_OFF\].*\n(\(Use `node --trace-warnings.*\n)?/gm, '');

describe('a PostgreSQL password in the "never migrated" hint', () => {
  it('is not printed, whether in the user part, holding an @, or a password parameter; from --db or SLUICE_DB', async () => {
    // A role of its own with a password the server checks (or, under trust, ignores): the
    // connection succeeds, so the command reaches the unmigrated store and prints its hint.
    const secret = `S3cret${randomBytes(3).toString('hex')}`;
    const password = `Xq7@${secret}`;
    const role = `sluice_cli_${randomBytes(4).toString('hex')}`;
    const admin = await pg.client();
    await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
    const dir = mkdtempSync(join(tmpdir(), 'sluice-redact-'));
    try {
      const { host, pathname } = new URL(pg.url);
      const urls = {
        encoded: `postgres://${role}:${encodeURIComponent(password)}@${host}${pathname}`,
        raw: `postgres://${role}:${password}@${host}${pathname}`,
        parameter: `postgresql://${role}@${host}${pathname}?sslmode=disable&password=${encodeURIComponent(password)}`,
      };
      for (const [form, url] of Object.entries(urls)) {
        const byFlag = await cli(dir, ['ops', 'list', '--db', url]);
        const byEnv = await cli(dir, ['ops', 'list'], { SLUICE_DB: url });
        for (const [how, out] of [
          ['--db', byFlag],
          ['SLUICE_DB', byEnv],
        ] as const) {
          // The hint was printed (so the URL was in reach of the message) ...
          expect([form, how, out.status, out.stderr]).toEqual([
            form,
            how,
            1,
            expect.stringMatching(
              /^sluice: invalid-argument: the store was never migrated: run `sluice migrate/,
            ),
          ]);
          // ... and holds no part of the password.
          expect([form, how, out.stderr.includes(secret), out.stderr.includes('Xq7')]).toEqual([
            form,
            how,
            false,
            false,
          ]);
        }
        // --db is repeated masked, so the hint still names the server and database; SLUICE_DB is
        // read again by the suggested command, which need not name it.
        expect(byFlag.stderr).toContain(
          `--db '${form === 'parameter' ? 'postgresql' : 'postgres'}://${role}`,
        );
        expect(byFlag.stderr).toContain(`${host}${pathname}`);
        expect(byEnv.stderr).toMatch(/run `sluice migrate` first/);
      }
    } finally {
      await admin.query(`DROP ROLE IF EXISTS ${role}`);
      await admin.end();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the migrate hint for a store a config file names', () => {
  it('suggests migrating with the config, as given, so its schema is the one migrated', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-hint-'));
    const schema = pg.freshSchema();
    mkdirSync(join(dir, 'conf'));
    const config = `export default { db: ${JSON.stringify(pg.url)}, postgres: { schema: ${JSON.stringify(schema)} } };\n`;
    writeFileSync(join(dir, 'conf', 'billing.config.mjs'), config);
    try {
      const given = await cli(dir, ['ops', 'list', '--config', './conf/billing.config.mjs']);
      expect([given.status, given.stderr]).toEqual([
        1,
        'sluice: invalid-argument: the store was never migrated: run `sluice migrate --config ./conf/billing.config.mjs` first\n',
      ]);
      // The command it names, run as named, migrates the config's schema, and the store is usable.
      const hinted = /run `sluice (migrate [^`]*)`/.exec(given.stderr)![1]!.split(' ');
      const migrated = await cli(dir, hinted);
      const status = await pg.store({ schema }).migrationStatus();
      expect(status.applied).toBe(status.latest);
      // It says where it went: the config's schema, at the version it reached.
      expect([migrated.status, migrated.stdout]).toEqual([
        0,
        `migrated (postgres, schema "${schema}", version ${status.latest})\n`,
      ]);
      const listed = await cli(dir, ['ops', 'list', '--config', './conf/billing.config.mjs']);
      expect([listed.status, listed.stdout]).toEqual([0, '(no operations)\n']);

      // A config found in the current folder: plain `sluice migrate`, which finds it too.
      const other = pg.freshSchema();
      const beside = join(dir, 'conf');
      writeFileSync(
        join(beside, 'sluice.config.mjs'),
        config.replace(JSON.stringify(schema), JSON.stringify(other)),
      );
      const found = await cli(beside, ['tenants', 'usage']);
      expect([found.status, found.stderr]).toEqual([
        1,
        'sluice: invalid-argument: the store was never migrated: run `sluice migrate` first\n',
      ]);
      expect((await cli(beside, ['migrate'])).status).toBe(0);
      const otherStatus = await pg.store({ schema: other }).migrationStatus();
      expect(otherStatus.applied).toBe(otherStatus.latest);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a config in the current folder when --db or SLUICE_DB names the store', () => {
  it('is not read (a broken one does not stop ops list); a --config given is', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-noconfig-'));
    const db = join(dir, 'store.db');
    try {
      expect((await cli(dir, ['migrate', '--db', db])).status).toBe(0);
      // Half-edited: loading it throws.
      writeFileSync(join(dir, 'sluice.config.mjs'), "throw new Error('half-edited config');\n");
      const byEnv = await cli(dir, ['ops', 'list'], { SLUICE_DB: db });
      expect([byEnv.status, byEnv.stdout, byEnv.stderr]).toEqual([0, '(no operations)\n', '']);
      const byFlag = await cli(dir, ['ops', 'list', '--db', db]);
      expect([byFlag.status, byFlag.stdout]).toEqual([0, '(no operations)\n']);
      // Nothing else names the store: the config is where it comes from, and it is read.
      const bare = await cli(dir, ['ops', 'list']);
      expect([bare.status, bare.stderr]).toEqual([1, expect.stringMatching(/half-edited config/)]);
      // Given outright, it is read whatever names the store.
      const explicit = await cli(dir, ['ops', 'list', '--config', 'sluice.config.mjs'], { SLUICE_DB: db });
      expect([explicit.status, explicit.stderr]).toEqual([1, expect.stringMatching(/half-edited config/)]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('on PostgreSQL, says the config was left unread, as its schema may be the one meant', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-noconfig-'));
    const schema = pg.freshSchema();
    writeFileSync(
      join(dir, 'sluice.config.mjs'),
      `export default { postgres: { schema: ${JSON.stringify(schema)} } };\n`,
    );
    try {
      // The URL alone names the default schema, which nothing here migrated.
      const listed = await cli(dir, ['ops', 'list'], { SLUICE_DB: pg.url });
      expect([listed.status, listed.stderr]).toEqual([
        1,
        'sluice: invalid-argument: the store was never migrated: run `sluice migrate` first ' +
          '(sluice.config.mjs in this folder was not read, as SLUICE_DB names the store: ' +
          'add --config sluice.config.mjs to use the PostgreSQL schema it may set)\n',
      ]);
      const migrated = await cli(dir, ['migrate', '--config', 'sluice.config.mjs'], { SLUICE_DB: pg.url });
      // A server with autovacuum off (as a test server may be) is warned of, and nothing else.
      expect([migrated.status, withoutAutovacuumWarning(migrated.stderr)]).toEqual([0, '']);
      const status = await pg.store({ schema }).migrationStatus();
      expect(status.applied).toBe(status.latest);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
