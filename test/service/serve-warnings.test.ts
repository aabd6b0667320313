/**
 * A `sluice serve` process says the process's warnings as records of its JSON log: the PostgreSQL
 * store's autovacuum check would otherwise be a line of plain text among them, which a log
 * collector parsing line by line cannot read. The check is made to fire whatever the test server's
 * settings: one of the store's tables has autovacuum turned off.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { usePostgres } from '../helpers/postgres.js';

const ROOT = join(import.meta.dirname, '../..');
const pg = usePostgres();

describe('sluice serve and process warnings', () => {
  it('logs the autovacuum warning as a JSON record, and prints no plain warning line', async () => {
    const schema = pg.freshSchema();
    const store = pg.store({ schema });
    await store.migrate();
    await store.context.pool.query(`ALTER TABLE "${schema}".operations SET (autovacuum_enabled = false)`);
    await store.close();
    const dir = mkdtempSync(join(tmpdir(), 'sluice-warnings-'));
    const file = join(dir, 'sluice.config.mjs');
    writeFileSync(
      file,
      // A kind for the worker to run, its schema a Standard Schema of its own (no import to resolve).
      `const any = { '~standard': { version: 1, vendor: 'test', validate: (value) => ({ value }) } };
export default {
  db: ${JSON.stringify(pg.url)},
  postgres: { schema: ${JSON.stringify(schema)} },
  kinds: { noop: { input: any, run: () => null } },
};\n`,
    );
    const child = spawn(
      process.execPath,
      [join(ROOT, 'dist/cli/main.js'), 'serve', '--config', file, '--role', 'worker', '--port', '0'],
      {
        env: { ...process.env, SLUICE_DB: undefined, SLUICE_LOG_LEVEL: 'warn' },
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    try {
      let stderr = '';
      const warned = new Promise<void>((resolve, reject) => {
        child.stderr!.on('data', (chunk: Buffer) => {
          stderr += chunk.toString();
          if (/autovacuum is turned off for tables[^\n]*\n/.test(stderr)) resolve();
        });
        child.once('exit', (code) => reject(new Error(`serve exited (${code}) before warning: ${stderr}`)));
      });
      await warned;
      child.kill('SIGTERM');
      await once(child, 'close');
      const lines = stderr.split('\n').filter((line) => line !== '');
      expect(lines.filter((line) => !line.startsWith('{'))).toEqual([]);
      const records = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
      const tables = records.find((r) => String(r.msg).startsWith('autovacuum is turned off for tables'));
      expect(tables).toMatchObject({
        level: 40,
        warning: { name: 'SluiceWarning', code: 'SLUICE_AUTOVACUUM_OFF' },
      });
      expect(String(tables!.msg)).toContain('operations');
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
