/**
 * A real PgBouncer in front of the test database, for the store behind a pooler: started from
 * Debian's `pgbouncer` (CI installs it; `.ci/run`) on a free port, in the mode a test asks for,
 * with `default_pool_size` server connections per database and user, so that more clients than
 * that share them: consecutive transactions of one client land on different server connections.
 *
 * Without the binary the file's tests are skipped, saying so, except under `CI=true`, where that
 * is a failure: CI must run them.
 *
 * @example
 * ```ts
 * const db = usePostgres();
 * const bouncer = usePgBouncer(db, { mode: 'transaction' });
 * it('…', async () => { const store = db.store({ connectionString: bouncer.url(), pooler: 'transaction' }); … });
 * ```
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { freePort, type PgTestDatabase } from './postgres.js';

export interface PgBouncerOptions {
  mode: 'transaction' | 'session';
  /** Server connections per database and user. Default 2. */
  poolSize?: number;
}

export interface TestPgBouncer {
  /** Whether the binary is here; without it (outside CI) the file's tests skip themselves. */
  readonly available: boolean;
  /** The test database's URL through the pooler. */
  url(): string;
}

const BINARY = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer', 'pgbouncer'].find(
  (b) => spawnSync(b, ['--version']).status === 0,
);

/** Starts a PgBouncer for the file (before its tests, stopped after them). */
export function usePgBouncer(db: PgTestDatabase, options: PgBouncerOptions): TestPgBouncer {
  if (!BINARY && process.env.CI === 'true')
    throw new Error('pgbouncer is not installed: CI runs the store behind it (apt-get install pgbouncer)');
  if (!BINARY) console.warn('pgbouncer is not installed: the tests of the store behind it are skipped');
  let child: ChildProcess | undefined;
  let dir = '';
  let base = '';
  beforeAll(async () => {
    if (!BINARY) return;
    const target = new URL(db.url);
    const port = await freePort();
    dir = mkdtempSync(join(tmpdir(), 'sluice-pgbouncer-'));
    // Run as root, PgBouncer must be told to drop to a user, who must read its files.
    chmodSync(dir, 0o755);
    // Clients are trusted; the server is logged in to with the URL's password, kept here.
    const user = decodeURIComponent(target.username || 'postgres');
    const password = decodeURIComponent(target.password).replaceAll('"', '""');
    writeFileSync(join(dir, 'users.txt'), `"${user}" "${password}"\n`, { mode: 0o644 });
    writeFileSync(
      join(dir, 'pgbouncer.ini'),
      [
        '[databases]',
        `* = host=${target.hostname} port=${target.port || 5432}`,
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${port}`,
        'unix_socket_dir =',
        'auth_type = trust',
        `auth_file = ${join(dir, 'users.txt')}`,
        `pool_mode = ${options.mode}`,
        `default_pool_size = ${options.poolSize ?? 2}`,
        'max_client_conn = 1000',
        '',
      ].join('\n'),
      { mode: 0o644 },
    );
    const asRoot = process.getuid?.() === 0 ? ['-u', 'postgres'] : [];
    child = spawn(BINARY, [...asRoot, join(dir, 'pgbouncer.ini')], { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    child.stderr?.on('data', (chunk) => {
      log = (log + chunk).slice(-4000);
    });
    target.host = `127.0.0.1:${port}`;
    base = target.toString();
    await untilAnswering(base, child, () => log);
  });
  afterAll(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child!.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    if (dir) rmSync(dir, { recursive: true, force: true });
  });
  return {
    available: BINARY !== undefined,
    url() {
      if (!base) throw new Error('the pooler is used before its beforeAll hook started it');
      return base;
    },
  };
}

/** Until a query through the pooler answers (it listens a moment after it starts), or 10 s. */
async function untilAnswering(url: string, child: ChildProcess, log: () => string): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`pgbouncer exited (${child.exitCode}): ${log()}`);
    const client = new pg.Client({ connectionString: url });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query('SELECT 1');
      return;
    } catch (error) {
      if (Date.now() > deadline) throw new Error(`pgbouncer does not answer: ${error}; its log: ${log()}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    } finally {
      await client.end().catch(() => {});
    }
  }
}
