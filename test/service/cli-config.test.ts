/**
 * The operator commands take their store from a config file: its URL and its PostgreSQL schema,
 * which `--db` alone cannot name. A service configured with `migrate: 'manual'` is migrated by
 * `sluice migrate --config`, into the schema it will use, and refuses to start before that.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isInvalidArgument, loadConfig, type PostgresStore } from '../../src/index.js';
import { startService } from '../../src/service/index.js';
import { silent } from '../helpers/engine.js';
import { usePostgres } from '../helpers/postgres.js';

const ROOT = join(import.meta.dirname, '../..');
const pg = usePostgres();

function cli(...args: string[]) {
  return spawnSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), ...args], {
    encoding: 'utf8',
    env: { ...process.env, SLUICE_DB: undefined },
  });
}

describe('sluice migrate and ops with --config', () => {
  it("migrate the config's schema; ops read it; a manual-migration service waits for it", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-config-'));
    const schema = pg.freshSchema();
    const file = join(dir, 'sluice.config.mjs');
    writeFileSync(
      file,
      `export default { db: ${JSON.stringify(pg.url)}, postgres: { schema: ${JSON.stringify(schema)} }, migrate: 'manual' };\n`,
    );
    try {
      // Before: the service refuses the schema it would use, naming the fix.
      const early = await startService(await loadConfig(file), { role: 'worker', logger: silent }).catch(
        (e) => e,
      );
      expect(isInvalidArgument(early)).toBe(true);
      expect(early.message).toMatch(/never migrated: run `sluice migrate --db '?postgres/);

      const migrated = cli('migrate', '--config', file);
      const status = await pg.store({ schema }).migrationStatus();
      expect(status.applied).toBe(status.latest);
      expect([migrated.status, migrated.stdout.trim()]).toEqual([
        0,
        `migrated (postgres, schema "${schema}", version ${status.latest})`,
      ]);

      const listed = cli('ops', 'list', '--config', file);
      expect([listed.status, listed.stdout.trim()]).toEqual([0, '(no operations)']);
      // --db alone names the default schema, which nothing migrated.
      const bare = cli('ops', 'list', '--db', pg.url);
      expect([bare.status, bare.stderr]).toEqual([1, expect.stringMatching(/never migrated/)]);

      const service = await startService(await loadConfig(file), { role: 'api', port: 0, logger: silent });
      await service.stop({ graceMs: 0 });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('postgres.durableCommits', () => {
  it('reaches the store the service opens from the config; anything but a boolean is refused', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-config-'));
    // Connections that start as a server, database or role set to `off` would start them.
    const url = new URL(pg.url);
    url.searchParams.set('options', '-c synchronous_commit=off');
    const schema = pg.freshSchema();
    const started = async (postgres: string) => {
      const file = join(dir, `${Math.random().toString(36).slice(2)}.config.mjs`);
      writeFileSync(
        file,
        `export default { db: ${JSON.stringify(url.toString())}, postgres: { schema: ${JSON.stringify(schema)}${postgres} } };\n`,
      );
      const service = await startService(await loadConfig(file), { role: 'api', port: 0, logger: silent });
      try {
        const { context } = service.sluice.store as PostgresStore;
        const [row] = await context.query<{ v: string }>(`SELECT current_setting('synchronous_commit') AS v`);
        return [context.durableCommits, row?.v];
      } finally {
        await service.stop({ graceMs: 0 });
      }
    };
    try {
      // Left out, the store raises `off` to `local`; told false, it keeps the server's setting.
      expect(await started('')).toEqual([true, 'local']);
      expect(await started(', durableCommits: false')).toEqual([false, 'off']);
      for (const [i, value] of ["'false'", '0', 'null'].entries()) {
        const file = join(dir, `bad${i}.config.mjs`);
        writeFileSync(file, `export default { postgres: { durableCommits: ${value} } };\n`);
        const refused = await loadConfig(file).catch((e) => e);
        expect([value, isInvalidArgument(refused), refused.message]).toEqual([
          value,
          true,
          `${file}: postgres.durableCommits must be true or false, not ${value === "'false'" ? '"false"' : value}`,
        ]);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
