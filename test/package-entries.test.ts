/**
 * The package's entry points, as a program that installed it imports them: by name, from the
 * built dist/ (`npm test` builds first), each in a fresh Node process so that nothing another
 * import loaded counts. The engine's entry must not load the web server: fastify and prom-client
 * are most of a process's start-up, which a worker restarted after a crash waits through.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = join(import.meta.dirname, '..');

/** Imports `specifier` in a new process; answers its export names and the packages it loaded. */
function load(specifier: string): { exports: string[]; packages: string[] } {
  const script = `
    import { createRequire } from 'node:module';
    const entry = await import(${JSON.stringify(specifier)});
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
  it('sluice is the engine, without the web server', () => {
    const { exports, packages } = load('sluice');
    expect(exports).toEqual(expect.arrayContaining(['Sluice', 'sqliteStore', 'postgresStore', 'Worker']));
    expect(exports).not.toContain('buildServer');
    expect(packages).toEqual(expect.arrayContaining(['pg', 'better-sqlite3', 'pino']));
    expect(packages.filter((p) => ['fastify', 'prom-client'].includes(p))).toEqual([]);
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
});
