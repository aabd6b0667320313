/**
 * SIGTERM during work, on a real `sluice serve` process: it stops accepting (503 with
 * Retry-After) while reads still answer, lets running attempts finish within the grace period,
 * releases the rest back to the queue without using an attempt, and exits 0. Afterwards no
 * operation is lost and none is left leased: another process runs every one to the end.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Sluice, sqliteStore } from '../../src/index.js';
import { silent } from '../helpers/engine.js';

const ROOT = join(import.meta.dirname, '../..');
const KEY = 'north-test-key';

function serve(dbPath: string, dir: string, graceMs: number): Promise<{ child: ChildProcess; url: string }> {
  const child = spawn(
    process.execPath,
    [
      join(ROOT, 'dist/cli/main.js'),
      'serve',
      '--config',
      join(ROOT, 'test/fixtures/serve.config.mjs'),
      '--db',
      dbPath,
      '--port',
      '0',
    ],
    {
      env: {
        ...process.env,
        SLUICE_LOG_LEVEL: 'warn',
        TEMP_ROOT: join(dir, 'tmp'),
        SLUICE_SHUTDOWN_GRACE_MS: String(graceMs),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const m = /API on (http:\/\/\S+)/.exec(out);
      if (m) resolve({ child, url: m[1]! });
    });
    child.once('exit', (code) => reject(new Error(`serve exited early (${code}): ${out}`)));
  });
}

describe('graceful shutdown', () => {
  let child: ChildProcess | undefined;
  let dir = '';
  afterEach(() => {
    if (child && child.exitCode === null) child.kill('SIGKILL');
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('stops accepting, lets short work finish, releases long work, and exits 0', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-shutdown-'));
    const dbPath = join(dir, 'sluice.db');
    const started = await serve(dbPath, dir, 1500);
    child = started.child;
    const headers = { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' };
    const post = (id: string, holdMs: number) =>
      fetch(`${started.url}/v1/operations`, {
        method: 'POST',
        headers: { ...headers, 'idempotency-key': id },
        body: JSON.stringify({ kind: 'hold', input: { holdMs } }),
      });
    // Three slots: one short operation and two that would outlast the grace period; three wait.
    const ops = [
      ['short', 200],
      ['long-1', 600_000],
      ['long-2', 600_000],
      ['w1', 10],
      ['w2', 10],
      ['w3', 10],
    ] as const;
    for (const [id, holdMs] of ops) expect((await post(id, holdMs)).status).toBe(202);
    const state = async (id: string) =>
      ((await (await fetch(`${started.url}/v1/operations/${id}`, { headers })).json()) as { state: string })
        .state;
    for (const id of ['long-1', 'long-2']) {
      while ((await state(id)) !== 'running') await new Promise((r) => setImmediate(r));
    }

    const exited = once(child, 'exit');
    child.kill('SIGTERM');
    // During the grace period: no new work, but reads answer.
    let refused: Response | undefined;
    for (let i = 0; i < 200 && !refused; i++) {
      const res = await post(`late-${i}`, 10);
      if (res.status === 503) refused = res;
      else expect(res.status).toBe(202); // accepted before the signal was handled: a real operation
    }
    expect(refused?.status).toBe(503);
    expect(Number(refused?.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await state('long-1')).toBe('running');
    const [code] = await exited;
    expect(code).toBe(0);

    // After exit: nothing lost, nothing leased; the long ones were released without using an attempt.
    const sluice = new Sluice({ store: sqliteStore({ path: dbPath }), logger: silent });
    sluice.define('hold', { input: z.object({ holdMs: z.number() }), run: () => ({ held: 'later' }) });
    try {
      const all = (await sluice.list({ tenant: 'north', limit: 500 })).operations;
      const accepted = all.map((o) => o.id);
      for (const [id] of ops) expect(accepted).toContain(id);
      expect(all.filter((o) => o.state === 'running')).toEqual([]);
      const long = await sluice.get({ tenant: 'north', id: 'long-1' }, { include: ['attempts'] });
      expect([long?.state, long?.attempt, long?.attempts?.map((a) => a.outcome)]).toEqual([
        'queued',
        0,
        ['released'],
      ]);
      expect((await sluice.get({ tenant: 'north', id: 'short' }))?.state).toBe('succeeded');
      const worker = sluice.worker({ tempRoot: join(dir, 'tmp'), pollIntervalMs: 20 });
      worker.start();
      for (const id of accepted)
        expect((await sluice.wait({ tenant: 'north', id }, { timeoutMs: 20_000 })).state).toBe('succeeded');
    } finally {
      await sluice.close();
    }
  });
});
