/**
 * Temporary folders after a worker is killed outright. A worker process SIGKILLed while a handler
 * holds a `ctx.tempDir()` removes nothing (no exit path runs); the next worker process to start on
 * the same temp root sweeps the dead worker's folder before it claims anything, and the
 * redelivered operation's own folder is removed when it succeeds there. (Success, error, timeout
 * and abort inside a live worker: test/engine/resources.test.ts and context-helpers.test.ts.)
 */
import { existsSync, readdirSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { processAlive } from '../helpers/process-alive.js';
import { processRig, type Rig } from '../helpers/process-rig.js';

describe('temporary folders after SIGKILL + restart', () => {
  let rig: Rig | undefined;
  afterEach(async () => {
    await rig?.close();
    rig = undefined;
  });

  it('a worker killed while holding a temp folder leaves it behind; the next worker to start sweeps it', async () => {
    rig = await processRig();
    // Same name and schema as the worker processes' kind (test/fixtures/worker-process.mjs).
    rig.h.sluice.define('hold-temp', {
      input: z.object({}),
      limits: { maxAttempts: 3 },
      run: () => {
        throw new Error('the test process runs no worker');
      },
    });
    const env = { HOLD_TEMP: '1' };
    const root = join(rig.h.dir, 'tmp');
    const w1 = await rig.start('w1', { env });
    await rig.h.sluice.submit({ tenant: 'North', id: 'T1', kind: 'hold-temp', input: {} });
    const held = await w1.waitFor((e) => e.event === 'temp-held', '"temp-held"');
    const path = held.path as string;
    const w1Folder = dirname(path);
    expect(dirname(w1Folder)).toBe(root);
    expect(existsSync(join(path, 'rows.csv'))).toBe(true);

    w1.signal('SIGKILL');
    expect(await w1.exit()).toEqual({ code: null, signal: 'SIGKILL' });
    // No exit path ran: the folder and its file are still there.
    expect(existsSync(join(path, 'rows.csv'))).toBe(true);

    // `ready` is printed after `worker.start()`, which sweeps before its first claim.
    const w2 = await rig.start('w2', { env });
    expect(existsSync(w1Folder)).toBe(false);

    // Once w1's lease expires, w2 rescues and runs the operation; its folder goes with success.
    const op = await rig.h.sluice.wait({ tenant: 'North', id: 'T1' }, { timeoutMs: 20_000 });
    expect(op.state).toBe('succeeded');
    const second = (op.result as { dir: string }).dir;
    expect(existsSync(second)).toBe(false);
    // What is left under the root is w2's own (empty) folder, removed when w2 stops.
    expect(readdirSync(root)).toEqual([basename(dirname(second))]);
    expect(readdirSync(dirname(second))).toEqual([]);
    expect(w2.alive).toBe(true);
  });

  it('a worker killed while a subprocess runs: the next worker to start kills the orphaned group', async () => {
    rig = await processRig();
    rig.h.sluice.define('hold-temp', {
      input: z.object({ exec: z.boolean().optional() }),
      limits: { maxAttempts: 3 },
      run: () => {
        throw new Error('the test process runs no worker');
      },
    });
    const env = { HOLD_TEMP: '1' };
    const w1 = await rig.start('w1', { env });
    await rig.h.sluice.submit({ tenant: 'North', id: 'X1', kind: 'hold-temp', input: { exec: true } });
    const held = await w1.waitFor((e) => e.event === 'exec-held', '"exec-held"');
    const pid = held.pid as number;
    const alive = processAlive;
    expect(alive(pid)).toBe(true);

    w1.signal('SIGKILL');
    expect(await w1.exit()).toEqual({ code: null, signal: 'SIGKILL' });
    // Nothing ran on w1's side: its subprocess lives on, re-parented.
    expect(alive(pid)).toBe(true);

    // The next worker's start-up sweep kills the recorded group before it claims anything.
    // SIGKILL is delivered, not done, when kill() returns: the group dies shortly after.
    await rig.start('w2', { env });
    await vi.waitFor(() => expect(alive(pid)).toBe(false), { timeout: 10_000, interval: 20 });
    expect((await rig.h.sluice.wait({ tenant: 'North', id: 'X1' }, { timeoutMs: 20_000 })).state).toBe(
      'succeeded',
    );
  });
});
