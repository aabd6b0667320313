/**
 * An attempt at the edges of what a handler may do, on a real SQLite store and worker: change
 * its result after returning it, validate its input with a schema that never answers, throw an
 * error that cannot be read or that carries one of the engine's own codes; and a worker stopped
 * twice. Each once left the operation running for ever, or ran it again and again.
 */
import type { StandardSchemaV1 } from '@standard-schema/spec';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Permanent, WorkerShutdown } from '../../src/index.js';
import { type Harness, harness } from '../helpers/engine.js';
import { Gate } from '../helpers/gate.js';

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const ref = { tenant: 'North', id: 'A' };

describe('an attempt', () => {
  it('keeps the result as the handler returned it, whatever the handler changes afterwards', async () => {
    h = await harness();
    let runs = 0;
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxResultBytes: 1000 },
      run: () => {
        runs++;
        const result: Record<string, unknown> = { charge: 'ch_1' };
        // Work the handler did not await changes it once it has returned: too big, then cyclic.
        setImmediate(() => {
          result.padding = 'x'.repeat(100_000);
          result.self = result;
        });
        return result;
      },
    });
    await h.sluice.submit({ ...ref, kind: 'job', input: {} });
    h.worker().start();
    const done = await h.sluice.wait(ref);
    expect([done.state, done.result, runs]).toEqual(['succeeded', { charge: 'ch_1' }, 1]);
  });

  it('times out an input schema that never answers, and its worker stops', async () => {
    h = await harness();
    let validations = 0;
    // Answers the submit's validation; never answers the attempt's.
    const hangsLater: StandardSchemaV1<unknown, unknown> = {
      '~standard': {
        version: 1,
        vendor: 'test',
        validate: (value) => (validations++ === 0 ? { value } : new Promise(() => {})),
      },
    };
    h.sluice.define('job', {
      input: hangsLater,
      limits: { attemptTimeoutMs: 200, maxAttempts: 1 },
      run: () => null,
    });
    await h.sluice.submit({ ...ref, kind: 'job', input: {} });
    const worker = h.worker();
    worker.start();
    const done = await h.sluice.wait(ref);
    expect([done.state, done.error?.code]).toEqual(['dead', 'attempts-exhausted']);
    await worker.stop({ graceMs: 0 });
    expect(worker.running).toBe(0);
  });

  it('ends when the handler throws an error whose message cannot be read', async () => {
    h = await harness();
    class Unreadable extends Error {
      override get message(): string {
        throw new Error('no message for you');
      }
    }
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 1 },
      run: () => {
        throw new Unreadable();
      },
    });
    await h.sluice.submit({ ...ref, kind: 'job', input: {} });
    h.worker({ leaseMs: 600_000 }).start();
    // Ended by the attempt itself: with no end written, the wait would outlast its 10 s, the
    // lease being ten minutes.
    const done = await h.sluice.wait(ref, { timeoutMs: 10_000 });
    expect(done.state).toBe('dead');
    const full = await h.sluice.get(ref, { include: ['attempts'] });
    expect(full?.attempts?.map((a) => a.outcome)).not.toContain('lease-expired');
  });

  it("fails once a handler's error carrying the worker's shutdown code, not released again and again", async () => {
    h = await harness();
    let runs = 0;
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 2, backoff: { baseMs: 0, capMs: 0 } },
      run: () => {
        runs++;
        if (runs === 1) throw new Permanent('mine', { code: 'worker-shutdown' });
        throw new WorkerShutdown();
      },
    });
    await h.sluice.submit({ ...ref, kind: 'job', input: {} });
    h.worker().start();
    const done = await h.sluice.wait(ref);
    expect([done.state, runs]).toEqual(['failed', 1]);
  });
});

describe('a worker stopped twice', () => {
  it('answers the second stop only once the first is done, so a close after it closes nothing in use', async () => {
    h = await harness();
    const gate = new Gate();
    h.sluice.define('job', {
      input: z.object({}),
      run: async (_i, ctx) => gate.wait(ctx.signal).catch(() => 'stopped'),
    });
    await h.sluice.submit({ ...ref, kind: 'job', input: {} });
    const worker = h.worker();
    worker.start();
    await gate.arrived;
    const first = worker.stop({ graceMs: 5000 });
    const second = worker.stop({ graceMs: 0 });
    let firstDone = false;
    void first.then(() => {
      firstDone = true;
    });
    gate.open();
    await second;
    expect(firstDone).toBe(true);
    expect(worker.running).toBe(0);
  });
});
