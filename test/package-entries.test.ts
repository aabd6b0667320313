/**
 * The package's entry points, as a program that installed it imports them: by name, from the
 * built dist/ (`npm test` builds first), each in a fresh Node process so that nothing another
 * import loaded counts. The engine's entry loads neither the web server (fastify and prom-client)
 * nor a database driver before a store of that kind is opened: they are most of a process's
 * start-up, which a worker restarted after a crash waits through.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..');

/**
 * Imports `specifier` in a new process and runs `then` (with the entry as `entry`); answers the
 * entry's export names and the packages loaded by then.
 */
function load(specifier: string, then = ''): { exports: string[]; packages: string[] } {
  const script = `
    import { createRequire } from 'node:module';
    const entry = await import(${JSON.stringify(specifier)});
    ${then}
    const cache = createRequire(import.meta.url).cache;
    const packages = new Set();
    for (const file of Object.keys(cache)) {
      const m = /node_modules\\/((?:@[^/]+\\/)?[^/]+)/.exec(file);
      if (m) packages.add(m[1]);
    }
    console.log(JSON.stringify({ exports: Object.keys(entry).sort(), packages: [...packages].sort() }));`;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: ROOT });
  return JSON.parse(out.toString());
}

describe('the package entry points', () => {
  const heavy = ['fastify', 'prom-client', 'pg', 'better-sqlite3'];

  it('sluice is the engine, without the web server or a driver', () => {
    const { exports, packages } = load('sluice');
    expect(exports).toEqual(expect.arrayContaining(['Sluice', 'sqliteStore', 'postgresStore', 'Worker']));
    expect(exports).not.toContain('buildServer');
    expect(packages).toContain('pino');
    expect(packages.filter((p) => heavy.includes(p))).toEqual([]);
  });

  it('a store loads its own driver only', () => {
    const sqlite = load('sluice', "entry.sqliteStore({ path: ':memory:' }).close();");
    expect(sqlite.packages.filter((p) => heavy.includes(p))).toEqual(['better-sqlite3']);
    // The pool connects on first use: creating the store opens no connection.
    const postgres = load(
      'sluice',
      "entry.postgresStore({ connectionString: 'postgres://127.0.0.1:1/none' });",
    );
    expect(postgres.packages.filter((p) => heavy.includes(p))).toEqual(['pg']);
  });

  it('sluice/service is the HTTP service and its metrics', () => {
    const { exports, packages } = load('sluice/service');
    expect(exports).toEqual(
      expect.arrayContaining(['buildServer', 'createMetrics', 'hashApiKey', 'startService']),
    );
    expect(packages).toEqual(expect.arrayContaining(['fastify', 'prom-client']));
  });

  it('sluice/testing holds the provider stub and the failpoints', () => {
    const { exports } = load('sluice/testing');
    expect(exports).toEqual(expect.arrayContaining(['CRASH_POINTS', 'ProviderClient']));
  });

  it('a CommonJS program requires each entry, with no warning', () => {
    // Node from 20.19 loads an ES module with require(); the exports' `default` condition lets
    // it, where `import` alone answered ERR_PACKAGE_PATH_NOT_EXPORTED after TypeScript had
    // compiled the require() without a word.
    const script = `
      const names = ['sluice', 'sluice/service', 'sluice/testing'].map((e) => Object.keys(require(e)).length);
      console.log(JSON.stringify(names));`;
    const run = spawnSync(process.execPath, ['--input-type=commonjs', '-e', script], { cwd: ROOT });
    expect(run.stderr.toString()).toBe('');
    const counts: number[] = JSON.parse(run.stdout.toString());
    expect(counts.every((n) => n > 0)).toBe(true);
    expect(run.status).toBe(0);
  });
});
