/**
 * `sluice demo` serves published keys, an admin key among them: it refuses a `HOST` beyond
 * loopback, before it opens anything, and names `sluice serve` instead; with `--public` it runs
 * there and says so loudly. Through the built command line, as `npm start` runs it.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { isLoopback } from '../../src/service/service.js';

const ROOT = join(import.meta.dirname, '../..');
const MAIN = join(ROOT, 'dist/cli/main.js');

describe('sluice demo', () => {
  let dir = '';
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  const env = (host: string) => ({
    ...process.env,
    HOST: host,
    PORT: '0',
    STUB_PORT: '0',
    SLUICE_DB: join(dir, 'sluice.db'),
    SLUICE_LOG_LEVEL: 'info',
  });

  it('refuses a host beyond loopback, pointing at sluice serve', { timeout: 40_000 }, () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-demo-cli-'));
    for (const host of ['0.0.0.0', '::', '10.1.2.3']) {
      // Bounded: a demo that did not refuse would run until stopped.
      const run = spawnSync(process.execPath, [MAIN, 'demo'], {
        cwd: dir,
        env: env(host),
        encoding: 'utf8',
        timeout: 10_000,
      });
      expect([host, run.status]).toEqual([host, 1]);
      expect(run.stderr).toContain(`not on HOST=${host}`);
      expect(run.stderr).toContain('run `sluice serve` with keys of your own');
      expect(run.stderr).toContain('--public');
      expect(existsSync(join(dir, 'sluice.db'))).toBe(false);
    }
    expect(
      ['127.0.0.1', '127.0.0.2', '::1', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1', 'localhost'].every(isLoopback),
    ).toBe(true);
    expect(['0.0.0.0', '::', '10.1.2.3', '::ffff:10.0.0.1', 'example.com'].some(isLoopback)).toBe(false);
  });

  it('with --public, runs there and warns in the log and on the terminal', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-demo-cli-'));
    const child = spawn(process.execPath, [MAIN, 'demo', '--public'], { cwd: dir, env: env('0.0.0.0') });
    let stderr = '';
    let stdout = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
    // The banner comes once the API listens, after the log's warning.
    await new Promise<void>((resolve, reject) => {
      child.stderr.on('data', (chunk) => {
        stderr += chunk;
        if (stderr.includes('!!! PUBLIC')) resolve();
      });
      void exited.then((code) => reject(new Error(`the demo exited (${code}) before it warned:\n${stderr}`)));
    });
    child.kill('SIGINT');
    expect(await exited).toBe(0);
    expect(stderr).toContain('!!! PUBLIC: the demo listens on 0.0.0.0');
    const warnings = stderr
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as { level: number; msg: string })
      .filter((line) => line.level === 40)
      .map((line) => line.msg);
    expect(warnings).toContainEqual(expect.stringContaining('the demo is listening beyond loopback'));
    expect(stdout).toContain('Sluice payments demo');
  }, 20_000);
});
