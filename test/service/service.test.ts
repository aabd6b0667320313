/**
 * The service shell: a TypeScript config loaded without a build step, the environment's
 * overrides, and split roles (an API-only and a worker-only process on one store).
 */
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { withEnvironment } from '../../src/config/config.js';
import { namespacedEffectKey } from '../../src/effects/effect-key.js';
import {
  Ambiguous,
  deriveEffectKey,
  isInvalidArgument,
  loadConfig,
  type OperationContext,
} from '../../src/index.js';
import { type Service, startService } from '../../src/service/index.js';
import { silent } from '../helpers/engine.js';
import { Gate } from '../helpers/gate.js';
import { captureLog } from '../helpers/log-capture.js';

const ROOT = join(import.meta.dirname, '../..');
let dir = '';

describe('configuration', () => {
  it('loads a TypeScript config file, and is empty when there is none', async () => {
    const config = await loadConfig(join(ROOT, 'test/fixtures/sluice.config.ts'));
    expect(Object.keys(config.kinds ?? {})).toEqual(['echo']);
    expect(config.tenants?.north?.default?.maxRunning).toBe(1);
    expect(await loadConfig(undefined, mkdtempSync(join(tmpdir(), 'sluice-empty-')))).toEqual({});
    expect(isInvalidArgument(await loadConfig('missing.config.ts').catch((e) => e))).toBe(true);
  });

  it('refuses a config file with a misspelled key, naming it', async () => {
    const at = mkdtempSync(join(tmpdir(), 'sluice-config-'));
    writeFileSync(join(at, 'sluice.config.mjs'), 'export default { htttp: { port: 1 }, kinds: {} };\n');
    const refused = await loadConfig(undefined, at).catch((e) => e);
    expect(isInvalidArgument(refused)).toBe(true);
    expect(refused.message).toMatch(/unknown config key htttp/);
    rmSync(at, { recursive: true, force: true });
  });

  it('refuses a misspelled key one level down, naming it and what the section knows', async () => {
    const at = mkdtempSync(join(tmpdir(), 'sluice-config-'));
    try {
      const cases = [
        [
          "postgres: { pooller: 'transaction' }",
          'postgres.pooller',
          /known in postgres: schema, poolSize, pooler, listenUrl, durableCommits\)$/,
        ],
        ['http: { port: 1, metricAuth: "admin" }', 'http.metricAuth', /known in http: host, port/],
        ['worker: { slot: { default: 1 } }', 'worker.slot', /known in worker: slots, defaultSlots/],
        [
          'retention: { terminalMS: 1 }',
          'retention.terminalMS',
          /known in retention: terminalMs, tombstoneMs/,
        ],
        ['retryBudget: { ratio: 0.1, flor: 1 }', 'retryBudget.flor', /known in retryBudget: ratio, floor/],
        ['auth: { tenant: {} }', 'auth.tenant', /known in auth: tenants, admin/],
        ["sqlite: { synchronus: 'FULL' }", 'sqlite.synchronus', /known in sqlite: synchronous\)$/],
      ] as const;
      for (const [section, named, known] of cases) {
        const file = join(at, `${named}.config.mjs`);
        writeFileSync(file, `export default { ${section} };\n`);
        const refused = await loadConfig(file).catch((e) => e);
        expect([named, isInvalidArgument(refused)]).toEqual([named, true]);
        expect(refused.message).toContain(`unknown config key ${named} (`);
        expect(refused.message).toMatch(known);
      }
      // Spelled right, every one of them loads; `retryBudget: false` has no keys to check.
      const good = join(at, 'good.config.mjs');
      writeFileSync(
        good,
        "export default { postgres: { pooler: 'transaction', listenUrl: 'postgres://x' }, http: { metricsAuth: 'admin' }, " +
          "worker: { slots: { default: 1 } }, retention: { terminalMs: 1 }, retryBudget: false, auth: { tenants: {} }, sqlite: { synchronous: 'FULL' } };\n",
      );
      expect((await loadConfig(good)).postgres?.pooler).toBe('transaction');
    } finally {
      rmSync(at, { recursive: true, force: true });
    }
  });

  it('refuses a config file whose default export is null, undefined or missing, in one line with its code', async () => {
    const at = mkdtempSync(join(tmpdir(), 'sluice-config-'));
    try {
      for (const name of ['null.config.ts', 'null.config.mjs']) {
        writeFileSync(join(at, name), 'export default null;\n');
        const refused = await loadConfig(join(at, name)).catch((e) => e);
        expect(isInvalidArgument(refused)).toBe(true);
        expect(refused.message).toMatch(
          /must export a config object as its default export \(it exports null\)$/,
        );
      }
      const cli = spawnSync(
        process.execPath,
        [join(ROOT, 'dist/cli/main.js'), 'migrate', '--config', join(at, 'null.config.ts')],
        { encoding: 'utf8', env: { ...process.env, SLUICE_DB: undefined } },
      );
      expect([cli.status, cli.stderr]).toEqual([
        1,
        expect.stringMatching(
          /^sluice: invalid-argument: \S+null\.config\.ts must export a config object[^\n]*\n$/,
        ),
      ]);
      // No default export: said so, with the named exports, not read as unknown keys.
      writeFileSync(join(at, 'named.config.ts'), "export const db = './x.db';\n");
      const named = await loadConfig(join(at, 'named.config.ts')).catch((e) => e);
      expect([isInvalidArgument(named), named.message]).toEqual([
        true,
        expect.stringMatching(/as its default export \(it has none; its named exports: db\)$/),
      ]);
      writeFileSync(join(at, 'undefined.config.mjs'), 'export default undefined;\n');
      const undef = await loadConfig(join(at, 'undefined.config.mjs')).catch((e) => e);
      expect(undef.message).toMatch(/as its default export \(it exports undefined\)$/);
      // CommonJS: module.exports is the default.
      writeFileSync(join(at, 'cjs.config.cjs'), "module.exports = { db: './c.db' };\n");
      expect(await loadConfig(join(at, 'cjs.config.cjs'))).toEqual({ db: join(at, 'c.db') });
      // A TypeError the file throws itself is its own, and says so.
      writeFileSync(join(at, 'own.config.mjs'), 'const none = null;\nnone.db;\nexport default {};\n');
      const own = await loadConfig(join(at, 'own.config.mjs')).catch((e) => e);
      expect([own instanceof TypeError, own.message]).toEqual([
        true,
        "Cannot read properties of null (reading 'db')",
      ]);
    } finally {
      rmSync(at, { recursive: true, force: true });
    }
  });

  it("takes a file's relative paths from the file's folder, and every store command finds it", async () => {
    const at = mkdtempSync(join(tmpdir(), 'sluice-config-'));
    try {
      const app = join(at, 'app');
      const elsewhere = join(at, 'elsewhere');
      mkdirSync(app);
      mkdirSync(elsewhere);
      writeFileSync(
        join(app, 'sluice.config.mjs'),
        "export default { db: './data/svc.db', worker: { tempRoot: 'tmp' } };\n",
      );
      const config = await loadConfig(join(app, 'sluice.config.mjs'), elsewhere);
      expect([config.db, config.worker?.tempRoot]).toEqual([join(app, 'data/svc.db'), join(app, 'tmp')]);
      // URLs, SQLite's own names and absolute paths are kept as written.
      for (const [i, db] of ['postgres://u@h/db', ':memory:', '/var/lib/sluice.db'].entries()) {
        writeFileSync(join(app, `kept${i}.config.mjs`), `export default { db: ${JSON.stringify(db)} };\n`);
        expect((await loadConfig(join(app, `kept${i}.config.mjs`), elsewhere)).db).toBe(db);
      }
      const cli = (cwd: string, ...args: string[]) =>
        spawnSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), ...args], {
          cwd,
          encoding: 'utf8',
          env: { ...process.env, SLUICE_DB: undefined },
        });
      // Beside the config, as `sluice serve` finds it; from elsewhere, by --config: one file.
      expect(cli(app, 'migrate').status).toBe(0);
      expect(existsSync(join(app, 'data/svc.db'))).toBe(true);
      expect(existsSync(join(app, 'data/sluice.db'))).toBe(false);
      const listed = cli(elsewhere, 'ops', 'list', '--config', join(app, 'sluice.config.mjs'));
      expect([listed.status, listed.stderr]).toEqual([0, '']);
      expect(existsSync(join(elsewhere, 'data'))).toBe(false);
    } finally {
      rmSync(at, { recursive: true, force: true });
    }
  });

  it('takes the store, port and keys from the environment', () => {
    const out = withEnvironment(
      { auth: { tenants: { north: ['a'] } } },
      {
        SLUICE_DB: 'postgres://x/y',
        PORT: '9000',
        HOST: '0.0.0.0',
        SLUICE_TENANT_KEYS: 'north:b,south:c',
        SLUICE_ADMIN_KEYS: 'z',
      },
    );
    expect([out.db, out.http?.port, out.http?.host, out.auth]).toEqual([
      'postgres://x/y',
      9000,
      '0.0.0.0',
      { tenants: { north: ['a', 'b'], south: ['c'] }, admin: ['z'] },
    ]);
    // The variables beat the config's http section.
    const http = withEnvironment({ http: { port: 1, host: '::1' } }, { PORT: '2', HOST: 'localhost' }).http;
    expect([http?.port, http?.host]).toEqual([2, 'localhost']);
    expect(() => withEnvironment({}, { SLUICE_TENANT_KEYS: 'no-colon' })).toThrow(/tenant:key/);
    // An empty PORT is unset, as shells mean it; a blank one is a mistake.
    expect(withEnvironment({ http: { port: 1 } }, { PORT: '' }).http?.port).toBe(1);
    expect(() => withEnvironment({}, { PORT: ' ' })).toThrow(/PORT must be a port number/);
  });

  it('serve --help states that each flag beats its variable, which beats the config', () => {
    const help = spawnSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), 'serve', '--help'], {
      encoding: 'utf8',
    });
    // Commander wraps long lines to the terminal's width.
    const text = help.stdout.replace(/\s+/g, ' ');
    expect([help.status, text]).toEqual([
      0,
      expect.stringContaining('--port <port> API port (default: $PORT, '),
    ]);
    for (const line of [
      "--db <sqlite-path|postgres-url> the store (default: $SLUICE_DB, else the config's db, else ./data/sluice.db)",
      "--port <port> API port (default: $PORT, else the config's http.port, else 8080); with --role worker, the port of its /metrics, /healthz and /readyz (none without it)",
      "--host <host> API address (default: $HOST, else the config's http.host, else 127.0.0.1)",
    ])
      expect(text).toContain(line);
  });
});

describe('roles', () => {
  const services: Service[] = [];
  afterEach(async () => {
    for (const s of services.splice(0)) await s.stop({ graceMs: 100 });
    rmSync(dir, { recursive: true, force: true });
  });

  it('warns when the metrics answer without a key on an address beyond loopback', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-roles-'));
    const config = await loadConfig(join(ROOT, 'test/fixtures/sluice.config.ts'));
    const warnings = async (host: string, metricsAuth?: 'admin' | 'none') => {
      const { logger, lines } = captureLog('warn');
      const svc = await startService(
        { ...config, http: { ...config.http, metricsAuth } },
        { role: 'api', db: join(dir, `${host}-${metricsAuth}.db`), port: 0, host, logger },
      );
      await svc.stop({ graceMs: 100 });
      return lines.filter((l) => /GET \/metrics answers without a key/.test(String(l.msg))).length;
    };
    expect(await warnings('0.0.0.0')).toBe(1);
    expect(await warnings('0.0.0.0', 'admin')).toBe(0);
    expect(await warnings('127.0.0.1')).toBe(0);
  });

  it('warns when an API serves no kind, which would refuse every submit', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-roles-'));
    const config = await loadConfig(join(ROOT, 'test/fixtures/sluice.config.ts'));
    const warned = async (kinds: typeof config.kinds) => {
      const { logger, lines } = captureLog('warn');
      const svc = await startService(
        { ...config, kinds },
        { role: 'api', db: join(dir, `${kinds ? 'kinds' : 'none'}.db`), port: 0, logger },
      );
      await svc.stop({ graceMs: 100 });
      return lines.filter((l) => /^no kinds are defined/.test(String(l.msg))).length;
    };
    expect(await warned(undefined)).toBe(1);
    expect(await warned(config.kinds)).toBe(0);
  });

  it('an API-only and a worker-only process share one store', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-roles-'));
    const config = await loadConfig(join(ROOT, 'test/fixtures/sluice.config.ts'));
    const db = join(dir, 'sluice.db');
    const api = await startService(config, { role: 'api', db, port: 0, logger: silent });
    services.push(api);
    expect(api.worker).toBeUndefined();
    const worker = await startService(
      { ...config, worker: { ...config.worker, tempRoot: join(dir, 'tmp') } },
      {
        role: 'worker',
        db,
        logger: silent,
      },
    );
    services.push(worker);
    expect([worker.server, worker.url]).toEqual([undefined, undefined]);

    const res = await fetch(`${api.url}/v1/operations`, {
      method: 'POST',
      headers: {
        authorization: 'Bearer north-config-key',
        'idempotency-key': 'e1',
        'content-type': 'application/json',
      },
      body: JSON.stringify({ kind: 'echo', input: { say: 'hi' } }),
    });
    expect(res.status).toBe(202);
    // Completed by the other process's worker (the API process runs none).
    const done = await api.sluice.wait({ tenant: 'north', id: 'e1' }, { timeoutMs: 10_000 });
    expect([done.state, done.result]).toEqual(['succeeded', { said: 'hi' }]);
  });

  it('a worker-only process given a port serves its metrics and health there, and no API', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-roles-'));
    const config = await loadConfig(join(ROOT, 'test/fixtures/sluice.config.ts'));
    const db = join(dir, 'sluice.db');
    const api = await startService(config, { role: 'api', db, port: 0, logger: silent });
    services.push(api);
    const { logger, lines } = captureLog('info');
    const worker = await startService(
      { ...config, worker: { ...config.worker, tempRoot: join(dir, 'tmp') } },
      { role: 'worker', db, port: 0, logger },
    );
    expect(worker.url).toBeDefined();
    await api.sluice.submit({ tenant: 'north', id: 'm1', kind: 'echo', input: { say: 'hi' } });
    await api.sluice.wait({ tenant: 'north', id: 'm1' }, { timeoutMs: 10_000 });
    // The worker's own counters, which the API process never sees.
    const metrics = await (await fetch(`${worker.url}/metrics`)).text();
    expect(metrics).toMatch(/^sluice_attempts_total\{[^}]*\} 1$/m);
    expect((await fetch(`${worker.url}/readyz`)).status).toBe(200);
    expect(
      (
        await fetch(`${worker.url}/v1/operations/m1`, {
          headers: { authorization: 'Bearer north-config-key' },
        })
      ).status,
    ).toBe(404);
    // Its port serves no traffic to drain: it stops without the API's drain.
    await worker.stop({ graceMs: 10_000 });
    expect(lines.find((l) => l.msg === 'shutting down: no new work accepted')).toMatchObject({ drainMs: 0 });
    // Without a port, a worker listens on none.
    const quiet = await startService(
      { ...config, worker: { ...config.worker, tempRoot: join(dir, 'tmp') } },
      { role: 'worker', db, logger: silent },
    );
    services.push(quiet);
    expect([quiet.url, quiet.server]).toEqual([undefined, undefined]);
  });

  it('a start that cannot listen fails before its worker claims anything', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-roles-'));
    const config = await loadConfig(join(ROOT, 'test/fixtures/sluice.config.ts'));
    const db = join(dir, 'sluice.db');
    // Work waiting in the store, and the port taken by another server.
    const api = await startService(config, { role: 'api', db, port: 0, logger: silent });
    await api.sluice.submit({ tenant: 'north', id: 'w1', kind: 'echo', input: { say: 'hi' } });
    const taken = Number(new URL(api.url!).port);
    const all = { ...config, worker: { ...config.worker, tempRoot: join(dir, 'tmp'), pollIntervalMs: 5 } };
    await expect(startService(all, { db, port: taken, logger: silent })).rejects.toMatchObject({
      code: 'EADDRINUSE',
    });
    // An option only the server checks, likewise.
    const typo = { ...all, http: { ...all.http, metricsAuth: 'Admin' as 'admin' } };
    await expect(startService(typo, { db, port: 0, logger: silent })).rejects.toMatchObject({
      code: 'invalid-argument',
    });
    // Refused before the store is opened: a new one is not made, nor migrated.
    const fresh = join(dir, 'fresh', 'sluice.db');
    await expect(startService(typo, { db: fresh, port: 0, logger: silent })).rejects.toMatchObject({
      message: `http.metricsAuth must be 'none' or 'admin', not "Admin"`,
    });
    expect(existsSync(join(dir, 'fresh'))).toBe(false);
    const op = await api.sluice.get({ tenant: 'north', id: 'w1' });
    expect([op?.state, op?.attempt]).toEqual(['queued', 0]);
    await api.stop({ graceMs: 100 });
  });

  it('an API-only process keeps answering through its drain: 503 to new work and /readyz, reads served', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-drain-'));
    const config = await loadConfig(join(ROOT, 'test/fixtures/sluice.config.ts'));
    const api = await startService(
      { ...config, http: { ...config.http, drainMs: 3000 }, shutdownGraceMs: 10_000 },
      { role: 'api', db: join(dir, 'sluice.db'), port: 0, logger: silent },
    );
    const headers = { authorization: 'Bearer north-config-key', 'content-type': 'application/json' };
    const submit = (id: string) =>
      fetch(`${api.url}/v1/operations`, {
        method: 'POST',
        headers: { ...headers, 'idempotency-key': id },
        body: JSON.stringify({ kind: 'echo', input: { say: 'hi' } }),
      });
    expect((await submit('d1')).status).toBe(202);
    let stopped = false;
    const stopping = api.stop().then(() => {
      stopped = true;
    });
    // The port is still open: the load balancer is told, and reads are served.
    const refused = await submit('d2');
    expect([refused.status, refused.headers.get('retry-after'), stopped]).toEqual([
      503,
      expect.any(String),
      false,
    ]);
    expect((await fetch(`${api.url}/readyz`)).status).toBe(503);
    expect((await fetch(`${api.url}/v1/operations/d1`, { headers })).status).toBe(200);
    await stopping;
    await expect(fetch(`${api.url}/healthz`)).rejects.toThrow();
  });

  it("derives effect keys in the config's effectKeyNamespace", async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-ns-'));
    const svc = await startService(
      {
        effectKeyNamespace: 'staging',
        kinds: {
          pay: {
            input: z.object({}),
            run: (_input, ctx) => ctx.effect('charge', { call: async ({ key }) => key }),
          },
        },
        worker: { tempRoot: join(dir, 'tmp') },
      },
      { db: join(dir, 'sluice.db'), port: 0, logger: silent },
    );
    services.push(svc);
    await svc.sluice.submit({ tenant: 'north', id: 'p1', kind: 'pay', input: {} });
    const done = await svc.sluice.wait({ tenant: 'north', id: 'p1' }, { timeoutMs: 10_000 });
    expect(done.result).toBe(namespacedEffectKey('staging')('north', 'p1', 'charge'));
    expect(done.result).not.toBe(deriveEffectKey('north', 'p1', 'charge'));
  });

  it('a worker-only process without kinds is refused at start, not reported running and gone', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-roles-'));
    const start = startService({}, { role: 'worker', db: join(dir, 'sluice.db'), logger: silent });
    await expect(start).rejects.toMatchObject({
      code: 'invalid-argument',
      message: expect.stringContaining('a worker needs kinds to run'),
    });
  });

  it('the config can close /metrics to all but an admin key', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-roles-'));
    const config = await loadConfig(join(ROOT, 'test/fixtures/sluice.config.ts'));
    const api = await startService(
      {
        ...config,
        http: { ...config.http, metricsAuth: 'admin' },
        auth: { ...config.auth, admin: ['admin-key-1'] },
      },
      { role: 'api', db: join(dir, 'sluice.db'), port: 0, logger: silent },
    );
    services.push(api);
    const scrape = (key?: string) =>
      fetch(`${api.url}/metrics`, { headers: key ? { authorization: `Bearer ${key}` } : {} }).then(
        (r) => r.status,
      );
    expect([await scrape(), await scrape('north-config-key'), await scrape('admin-key-1')]).toEqual([
      401, 403, 200,
    ]);
  });
});

describe('operator commands', () => {
  it('cancel, redrive, reconcile and usage act on the store and record who', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-cli-'));
    const db = join(dir, 'sluice.db');
    const config = await loadConfig(join(ROOT, 'test/fixtures/sluice.config.ts'));
    const kinds = {
      ...config.kinds,
      fails: {
        input: z.object({}),
        limits: { maxAttempts: 1 },
        run: () => {
          throw new Error('no');
        },
      },
      // Its effect's outcome is unknown, and the provider's retention is (absurdly) 1 ms: the
      // retry cannot resend blindly, so it waits for reconciliation.
      unknown: {
        input: z.object({}),
        run: (_i: unknown, ctx: OperationContext) =>
          ctx.effect('charge', {
            retentionMs: 1,
            call: async () => {
              throw new Ambiguous('timed out after sending');
            },
          }),
      },
    };
    const svc = await startService({ ...config, kinds }, { role: 'worker', db, logger: silent });
    try {
      await svc.sluice.submit({ tenant: 'north', id: 'd1', kind: 'fails', input: {} });
      expect((await svc.sluice.wait({ tenant: 'north', id: 'd1' })).state).toBe('dead');
      await svc.sluice.submit({ tenant: 'north', id: 'u1', kind: 'unknown', input: {} });
      expect((await svc.sluice.wait({ tenant: 'north', id: 'u1' })).state).toBe('needs_reconciliation');
      await svc.sluice.submit({
        tenant: 'north',
        id: 'q1',
        kind: 'echo',
        input: { say: 'x' },
        delayMs: 600_000,
      });
    } finally {
      await svc.stop({ graceMs: 100 });
    }
    const cli = (...args: string[]) =>
      execFileSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), ...args, '--db', db], {
        encoding: 'utf8',
        env: { ...process.env, SLUICE_OPERATOR: 'ops@test' },
      });
    expect(cli('ops', 'cancel', 'north', 'q1', '--by', 'alice')).toMatch(/cancel cancelled; state cancelled/);
    expect(JSON.parse(cli('ops', 'show', 'north', 'q1')).events.map((e: { by: string }) => e.by)).toEqual([
      'alice',
    ]);
    expect(cli('ops', 'redrive', 'north', 'd1', '--reason', 'fixed the bug')).toMatch(/north\/d1: queued/);
    const shown = JSON.parse(cli('ops', 'show', 'north', 'd1'));
    expect(
      shown.events.map((e: { action: string; by: string; reason: string }) => [e.action, e.by, e.reason]),
    ).toEqual([['redrive', 'ops@test', 'fixed the bug']]);
    const reconcileArgs = ['--resolution', 'succeeded', '--reason', 'the provider has ch_9'];
    // A mistyped effect, or a blank reason, is refused, and nothing changes.
    for (const bad of [
      ['ops', 'reconcile', 'north', 'u1', ...reconcileArgs, '--effect', 'chrage=absent'],
      ['ops', 'redrive', 'north', 'd1', '--reason', ' '],
    ]) {
      const refused = cliFails(db, ...bad);
      expect([refused.status, refused.stderr]).toEqual([
        1,
        expect.stringMatching(/^sluice: invalid-argument: /),
      ]);
    }
    expect(JSON.parse(cli('ops', 'show', 'north', 'u1')).state).toBe('needs_reconciliation');
    const effectArgs = ['--effect', 'charge=committed:{"id":"ch_9"}', '--result', '{"charge":"ch_9"}'];
    expect(cli('ops', 'reconcile', 'north', 'u1', ...reconcileArgs, ...effectArgs)).toMatch(
      /north\/u1: succeeded/,
    );
    const reconciled = JSON.parse(cli('ops', 'show', 'north', 'u1'));
    expect([reconciled.result, reconciled.effects[0].state, reconciled.effects[0].result]).toEqual([
      { charge: 'ch_9' },
      'committed',
      { id: 'ch_9' },
    ]);
    expect(JSON.parse(cli('tenants', 'usage', 'north', '--json')).queues).toEqual([
      { class: 'default', tenant: 'north', waiting: 1, running: 0 },
    ]);
    rmSync(dir, { recursive: true, force: true });
  });
});

describe('sluice ops cancel', () => {
  it('exits 0 when the cancel took or is under way, 3 when it is too late, and prints the state', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-cli-'));
    const db = join(dir, 'sluice.db');
    const config = await loadConfig(join(ROOT, 'test/fixtures/sluice.config.ts'));
    const holding = new Gate();
    const kinds = {
      ...config.kinds,
      hold: { input: z.object({}), run: (_i: unknown, ctx: OperationContext) => holding.wait(ctx.signal) },
    };
    const svc = await startService({ ...config, kinds }, { role: 'worker', db, logger: silent });
    // Asynchronous: the worker in this process keeps its lease while the command runs.
    const cancel = (id: string) =>
      new Promise<{ status: number | null; stdout: string; stderr: string }>((done) => {
        execFile(
          process.execPath,
          [join(ROOT, 'dist/cli/main.js'), 'ops', 'cancel', 'north', id, '--db', db],
          { encoding: 'utf8' },
          (error, stdout, stderr) => done({ status: error ? (error.code as number) : 0, stdout, stderr }),
        );
      });
    try {
      await svc.sluice.submit({ tenant: 'north', id: 'done', kind: 'echo', input: { say: 'x' } });
      expect((await svc.sluice.wait({ tenant: 'north', id: 'done' })).state).toBe('succeeded');
      await svc.sluice.submit({ tenant: 'north', id: 'held', kind: 'hold', input: {} });
      await holding.arrived;
      await svc.sluice.submit({
        tenant: 'north',
        id: 'later',
        kind: 'echo',
        input: { say: 'y' },
        delayMs: 600_000,
      });

      expect(await cancel('done')).toEqual({
        status: 3,
        stdout: 'north/done: cancel too_late; state succeeded\n',
        stderr: '',
      });
      expect(await cancel('later')).toMatchObject({
        status: 0,
        stdout: 'north/later: cancel cancelled; state cancelled\n',
      });
      // Asked again: it is cancelled, as the script wanted.
      expect(await cancel('later')).toMatchObject({
        status: 0,
        stdout: 'north/later: cancel cancelled; state cancelled\n',
      });
      expect(await cancel('held')).toMatchObject({
        status: 0,
        stdout: 'north/held: cancel requested; state running\n',
      });
      expect((await svc.sluice.wait({ tenant: 'north', id: 'held' })).state).toBe('cancelled');
    } finally {
      holding.open();
      await svc.stop({ graceMs: 100 });
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** Runs the CLI expecting it to fail: its exit status and what it wrote to stderr. */
function cliFails(db: string | null, ...args: string[]): { status: number | null; stderr: string } {
  const result = spawnSync(
    process.execPath,
    [join(ROOT, 'dist/cli/main.js'), ...args, ...(db === null ? [] : ['--db', db])],
    {
      encoding: 'utf8',
      env: { ...process.env, SLUICE_OPERATOR: 'ops@test' },
    },
  );
  expect(result.status).not.toBe(0);
  return { status: result.status, stderr: result.stderr };
}

describe('operator commands refuse what they cannot do, in one line, changing nothing', () => {
  it('an empty, missing or unmigrated store', () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-cli-'));
    const missing = join(dir, 'typo', 'sluice.db');
    expect(cliFails(missing, 'ops', 'list')).toEqual({
      status: 1,
      stderr: expect.stringMatching(/^sluice: invalid-argument: no database at .*sluice migrate/),
    });
    expect(existsSync(join(dir, 'typo'))).toBe(false);
    // An empty --db or SLUICE_DB would open SQLite's temporary database: work lost at exit.
    expect(cliFails('', 'migrate').stderr).toMatch(/--db is empty/);
    const env = spawnSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), 'migrate'], {
      encoding: 'utf8',
      env: { ...process.env, SLUICE_DB: '' },
    });
    expect([env.status, env.stderr]).toEqual([1, expect.stringMatching(/SLUICE_DB is empty/)]);
    const fresh = join(dir, 'fresh.db');
    writeFileSync(fresh, '');
    expect(cliFails(fresh, 'ops', 'list').stderr).toMatch(
      /never migrated: run `sluice migrate --db .*fresh\.db` first/,
    );
    rmSync(dir, { recursive: true, force: true });
  });

  it.runIf(process.platform === 'linux')(
    'a store whose folder cannot be created is refused at once, naming the folder',
    () => {
      // procfs answers ENOENT for a folder it will never hold, under a parent that exists.
      const refused = spawnSync(
        process.execPath,
        [join(ROOT, 'dist/cli/main.js'), 'migrate', '--db', '/proc/sluice-none/sluice.db'],
        { encoding: 'utf8', timeout: 30_000 },
      );
      expect([refused.status, refused.signal, refused.stderr]).toEqual([
        1,
        null,
        'sluice: invalid-argument: cannot create /proc/sluice-none for /proc/sluice-none/sluice.db: ' +
          '/proc exists but takes no new folder sluice-none (ENOENT)\n',
      ]);
      // Missing folders that can be made still are, however deep.
      dir = mkdtempSync(join(tmpdir(), 'sluice-cli-'));
      const deep = join(dir, 'a', 'b', 'c', 'sluice.db');
      execFileSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), 'migrate', '--db', deep]);
      expect(existsSync(deep)).toBe(true);
      rmSync(dir, { recursive: true, force: true });
    },
  );

  it('bad arguments: no stack trace, and the drill says it could not run (2), not that it failed (1)', () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-cli-'));
    const db = join(dir, 'sluice.db');
    execFileSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), 'migrate', '--db', db]);
    const badJson = cliFails(
      db,
      'ops',
      'reconcile',
      'north',
      'x',
      '--resolution',
      'succeeded',
      '--reason',
      'r',
      '--result',
      '{bad',
    );
    expect(badJson.status).toBe(1);
    expect(badJson.stderr.trim().split('\n')).toHaveLength(1);
    expect(badJson.stderr).not.toMatch(/\bat .*\.js:\d+/);
    // Each names the flag or variable it came from, and what it was.
    expect(badJson.stderr).toMatch(/^sluice: invalid-argument: --result is not JSON/);
    const run = (args: string[], env: Record<string, string | undefined> = {}) =>
      spawnSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), ...args], {
        cwd: dir,
        encoding: 'utf8',
        timeout: 30_000,
        env: { ...process.env, ...env },
      });
    const refusals: Array<[string[], Record<string, string | undefined>, RegExp]> = [
      [['serve', '--db', db, '--port', 'abc'], {}, /--port must be a port number from 0 to 65535, not "abc"/],
      [['serve', '--db', db], { PORT: ' ' }, /PORT must be a port number from 0 to 65535, not " "/],
      [['serve', '--db', db], { PORT: '70000' }, /PORT must be a port number/],
      [
        ['serve', '--db', db],
        { SLUICE_LOG_LEVEL: 'verbose' },
        /SLUICE_LOG_LEVEL must be one of fatal, error/,
      ],
      [['migrate', '--db', 'postgress://u@127.0.0.1/db'], {}, /names a postgress:\/\/ URL/],
    ];
    for (const [args, env, message] of refusals) {
      const out = run(args, env);
      expect([args, out.status, out.stderr.trim().split('\n').length]).toEqual([args, 1, 1]);
      expect(out.stderr).toMatch(message);
    }
    expect(cliFails(db, 'ops', 'list', '--cursor', '!!!').stderr).toMatch(/cursor is not valid/);
    expect(cliFails(null, 'keys', 'hash', 'two words').stderr).toMatch(/cannot contain whitespace/);
    const drill = cliFails(null, 'drill', '--workers', '0');
    expect([drill.status, drill.stderr]).toEqual([2, expect.stringMatching(/--workers must be 1–16/)]);
    rmSync(dir, { recursive: true, force: true });
  });
});
