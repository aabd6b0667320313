/**
 * Temp directories, slots and leases are released on every exit path of an attempt: success,
 * error, timeout, abort (cancel) and lost lease. Orphans of a killed worker are swept at start.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { isAttemptTimeout, isLeaseLost, Permanent } from '../../src/index.js';
import { TempDirs } from '../../src/runtime/temp-dirs.js';
import { FakeClock } from '../../src/testing/index.js';
import { type Harness, harness } from '../helpers/engine.js';
import { Gate } from '../helpers/gate.js';

type Ending = 'success' | 'error' | 'timeout' | 'cancel';

describe('resources are released on every exit path', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it.each<Ending>(['success', 'error', 'timeout', 'cancel'])('on %s', async (ending) => {
    h = await harness();
    const gate = new Gate();
    let tempPath = '';
    let signalReason: unknown;
    h.sluice.define('export', {
      input: z.object({ ending: z.string() }),
      limits: { attemptTimeoutMs: ending === 'timeout' ? 200 : 60_000, maxAttempts: 1 },
      async run(input, ctx) {
        tempPath = await ctx.tempDir();
        writeFileSync(join(tempPath, 'rows.csv'), 'a,b\n'.repeat(1000));
        if (input.ending === 'error') throw new Permanent('bad export');
        if (input.ending === 'timeout' || input.ending === 'cancel') {
          await gate.wait(ctx.signal).catch((e) => {
            signalReason = ctx.signal.reason;
            throw e;
          });
        }
        return { rows: 1000 };
      },
    });
    const worker = h.worker({ slots: { default: 2 } });
    worker.start();
    await h.sluice.submit({ tenant: 'North', id: 'E1', kind: 'export', input: { ending } });
    if (ending === 'cancel') {
      await gate.arrived;
      expect(existsSync(tempPath)).toBe(true);
      expect(worker.running).toBe(1);
      expect((await h.sluice.cancel({ tenant: 'North', id: 'E1' })).cancel).toBe('requested');
    }
    const op = await h.sluice.wait({ tenant: 'North', id: 'E1' });
    expect(op.state).toBe(
      { success: 'succeeded', error: 'failed', timeout: 'dead', cancel: 'cancelled' }[ending],
    );
    if (ending === 'timeout') {
      expect(isAttemptTimeout(signalReason)).toBe(true);
      expect(op.error?.code).toBe('attempts-exhausted');
    }
    expect(tempPath).not.toBe('');
    expect(existsSync(tempPath)).toBe(false);
    expect(op.lease).toBeNull();
    await worker.idle();
    expect(worker.runningByClass()).toEqual({ default: 0 });
    expect(await h.store.queueStats()).toEqual([
      { class: 'default', tenant: 'North', waiting: 0, running: 0 },
    ]);
  });

  it('on a lost lease: the handler is aborted, writes nothing, and frees its slot and files', async () => {
    const clock = new FakeClock();
    h = await harness({ clock });
    const gate = new Gate();
    let tempPath = '';
    let reason: unknown;
    let runs = 0;
    h.sluice.define('job', {
      input: z.object({}),
      async run(_i, ctx) {
        if (++runs > 1) return 'second run';
        tempPath = await ctx.tempDir();
        await gate.wait(ctx.signal).catch((e) => {
          reason = e;
          throw e;
        });
      },
    });
    const worker = h.worker({ leaseMs: 120_000, heartbeatMs: 60_000 });
    worker.start();
    await h.sluice.submit({ tenant: 'North', id: 'L1', kind: 'job', input: {} });
    await gate.arrived;
    // The worker is "paused" past its lease: another rescuer returns the operation to the queue.
    clock.advance(120_001);
    const abandoned = new Promise((resolve) => worker.once('attempt', (e) => resolve(e.report.outcome)));
    expect(await h.sluice.rescueExpiredLeases()).toBe(1);
    await worker.heartbeatNow();
    expect(await abandoned).toBe('abandoned');
    expect(isLeaseLost(reason)).toBe(true);
    expect(existsSync(tempPath)).toBe(false);
    const op = await h.sluice.wait({ tenant: 'North', id: 'L1' });
    expect([op.state, op.result]).toEqual(['succeeded', 'second run']);
    const full = await h.sluice.get({ tenant: 'North', id: 'L1' }, { include: ['attempts'] });
    expect(full?.attempts?.map((a) => a.outcome)).toEqual(['lease-expired', 'succeeded']);
  });

  it('enforces maxTempBytes at its edge: the limit itself is allowed, one byte more stops the attempt', async () => {
    h = await harness();
    const limit = 4096;
    const paths: string[] = [];
    h.sluice.define('export', {
      input: z.object({ bytes: z.number() }),
      limits: { maxTempBytes: limit, maxAttempts: 3 },
      async run(input, ctx) {
        const dir = await ctx.tempDir();
        paths.push(dir);
        writeFileSync(join(dir, 'part-1'), Buffer.alloc(limit - 100));
        writeFileSync(join(dir, 'part-2'), Buffer.alloc(input.bytes - (limit - 100)));
        // A long export keeps writing until told to stop; the monitor is what stops it.
        await new Promise((resolve, reject) => {
          if (input.bytes <= limit) return resolve(null);
          ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
        });
        return { bytes: input.bytes };
      },
    });
    h.worker({ tempCheckMs: 10 }).start();
    await h.sluice.submit({ tenant: 'North', id: 'at', kind: 'export', input: { bytes: limit } });
    await h.sluice.submit({ tenant: 'North', id: 'over', kind: 'export', input: { bytes: limit + 1 } });
    const at = await h.sluice.wait({ tenant: 'North', id: 'at' });
    const over = await h.sluice.wait({ tenant: 'North', id: 'over' });
    expect([at.state, at.result]).toEqual(['succeeded', { bytes: limit }]);
    expect([over.state, over.error?.code, over.attempt]).toEqual(['failed', 'temp-limit-exceeded', 1]);
    expect(paths.every((p) => !existsSync(p))).toBe(true);
  });

  it('measures the folder afresh at the end: a walk still going when the handler returns is not enough', async () => {
    h = await harness();
    // The first walk lists the folder before the handler's last write and answers only after the
    // handler has returned: the end must not take its figure for the folder's.
    const walk = TempDirs.bytesAsync.bind(TempDirs);
    let listed!: () => void;
    const firstListed = new Promise<void>((resolve) => {
      listed = resolve;
    });
    let returned!: () => void;
    const handlerReturned = new Promise<void>((resolve) => {
      returned = resolve;
    });
    let walks = 0;
    const spy = vi.spyOn(TempDirs, 'bytesAsync').mockImplementation(async (path: string) => {
      const bytes = await walk(path);
      if (walks++ === 0) {
        listed();
        await handlerReturned;
      }
      return bytes;
    });
    onTestFinished(() => spy.mockRestore());
    h.sluice.define('export', {
      input: z.object({}),
      limits: { maxTempBytes: 4096, maxAttempts: 1 },
      async run(_input, ctx) {
        const dir = await ctx.tempDir();
        writeFileSync(join(dir, 'small'), Buffer.alloc(10));
        await firstListed;
        writeFileSync(join(dir, 'big'), Buffer.alloc(50_000));
        setImmediate(returned);
        return { ok: true };
      },
    });
    h.worker({ tempCheckMs: 1 }).start();
    await h.sluice.submit({ tenant: 'North', id: 'late', kind: 'export', input: {} });
    const done = await h.sluice.wait({ tenant: 'North', id: 'late' });
    expect([done.state, done.error?.code]).toEqual(['failed', 'temp-limit-exceeded']);
  });

  it('forgets a worker once it has stopped, however often a process replaces its worker', async () => {
    h = await harness();
    h.sluice.define('note', { input: z.object({}), run: async () => 'ok' });
    for (let i = 0; i < 50; i++) {
      const worker = h.worker();
      worker.start();
      await h.sluice.submit({ tenant: 'North', id: `n${i}`, kind: 'note', input: {} });
      await h.sluice.wait({ tenant: 'North', id: `n${i}` });
      await worker.stop();
    }
    await h.worker().stop(); // made and stopped without a start
    expect(h.sluice.workerCount).toBe(0);
    const running = h.worker();
    running.start();
    expect(h.sluice.workerCount).toBe(1);
  });

  it("sweeps the temporary folders of dead workers at start, and keeps a live sibling's", async () => {
    h = await harness();
    h.sluice.define('job', { input: z.object({}), run: () => null });
    const root = join(h.dir, 'tmp');
    const dead = spawnSync(process.execPath, ['-e', '0']).pid;
    mkdirSync(join(root, `${dead}-abcd1234`, 'North-O1-1-x'), { recursive: true });
    // A worker of this process, with a temporary folder in use.
    const sibling = new TempDirs(root);
    const inUse = sibling.create('North', 'O2', 1);
    h.worker().start();
    expect(readdirSync(root)).toEqual([basename(sibling.ownerDir)]);
    expect(existsSync(inUse)).toBe(true);
    sibling.removeOwn();
  });

  it('sweeps a folder named for its own pid that no worker of this process made', async () => {
    // A container restarted: the new worker is PID 1 again, and finds PID 1's folder of the last run.
    h = await harness();
    h.sluice.define('job', { input: z.object({}), run: () => null });
    const root = join(h.dir, 'tmp');
    mkdirSync(join(root, `${process.pid}-0ld0ld00`, 'North-O1-1-x'), { recursive: true });
    h.worker().start();
    expect(readdirSync(root)).toEqual([]);
  });
});
