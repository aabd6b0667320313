/**
 * A claim that committed but whose answer never reached the worker (the connection dropped after
 * the commit): the operations it took are leased to a worker that does not know of them. Before
 * the worker looked for them, they waited out their lease and the expiry cost them an attempt
 * (on the last attempt, the operation). Now the worker's next claim first releases the leases it
 * holds and is not running: the operation starts at once, on the attempt it had.
 *
 * The stores are real; only the answer is lost: the claim's store call runs to its commit, and
 * then the call fails as a dropped connection fails it.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { StoreError } from '../../src/core/errors/index.js';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import type { Store } from '../../src/store/store.js';
import { type Harness, harness } from '../helpers/engine.js';
import { Gate } from '../helpers/gate.js';
import { captureLog } from '../helpers/log-capture.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();

/** `store`, whose first claim that takes anything commits and then fails with its answer lost. */
function losingFirstAnswer(store: Store, onLost?: () => void): { store: Store; lost: () => number } {
  let lost = 0;
  const drop = <T extends { rows: unknown[] }>(claim: T): T => {
    if (lost > 0 || claim.rows.length === 0) return claim;
    lost = claim.rows.length;
    onLost?.();
    throw new StoreError('unavailable', 'PostgreSQL connection lost: Connection terminated unexpectedly');
  };
  const wrapped: Store = Object.create(store, {
    operationClaimMany: {
      value: async (p: Parameters<Store['operationClaimMany']>[0]) => drop(await store.operationClaimMany(p)),
    },
    attemptFinishAndClaim: {
      value: async (...args: Parameters<Store['attemptFinishAndClaim']>) => {
        const out = await store.attemptFinishAndClaim(...args);
        drop(out.claim);
        return out;
      },
    },
  });
  return { store: wrapped, lost: () => lost };
}

describe.each([
  [
    'SQLite',
    () => sqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'sluice-lost-answer-')), 'sluice.db') }),
  ],
  ['PostgreSQL', () => db.store()],
] as const)('a claim whose answer was lost (%s)', (_name, makeStore) => {
  let h: Harness | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
  });

  it('is released by the next claim and runs at once, on the attempt it had', async () => {
    const { logger, lines } = captureLog('warn');
    const losing = losingFirstAnswer(makeStore());
    h = await harness({ store: losing.store, sluice: { logger } });
    const runs: number[] = [];
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 1 },
      run: (_input, ctx) => {
        runs.push(ctx.attempt);
        return 'done';
      },
    });
    await h.sluice.submit({ tenant: 'North', id: 'j1', kind: 'job', input: {} });
    // A lease of ten minutes: had the worker waited for it, the wait below would time out; and
    // with one attempt allowed, its expiry would have ended the operation `dead`.
    h.worker({ leaseMs: 600_000 }).start();
    const done = await h.sluice.wait({ tenant: 'North', id: 'j1' }, { timeoutMs: 20_000 });
    expect(losing.lost()).toBe(1);
    expect([done.state, done.result, done.attempt]).toEqual(['succeeded', 'done', 1]);
    expect(runs).toEqual([1]);
    const full = await h.sluice.get({ tenant: 'North', id: 'j1' }, { include: ['attempts'] });
    expect(full?.attempts?.map((a) => [a.attempt, a.outcome])).toEqual([
      [1, 'released'],
      [1, 'succeeded'],
    ]);
    expect(lines.map((l) => [l.msg, l.released])).toContainEqual([
      'released operations a claim took without its answer reaching this worker',
      1,
    ]);
  });

  it('is released by a worker that stops before it claims again', async () => {
    let stopped: Promise<void> | undefined;
    const losing = losingFirstAnswer(makeStore(), () => {
      // The stop starts while the lost claim's call is still failing: the worker makes no next claim.
      stopped = worker.stop({ graceMs: 0 });
    });
    h = await harness({ store: losing.store });
    h.sluice.define('job', { input: z.object({}), limits: { maxAttempts: 1 }, run: () => 'done' });
    await h.sluice.submit({ tenant: 'North', id: 'j1', kind: 'job', input: {} });
    const worker = h.worker({ leaseMs: 600_000 });
    worker.start();
    await vi.waitFor(() => expect(stopped).toBeDefined(), { timeout: 20_000 });
    await stopped;
    expect(losing.lost()).toBe(1);
    // Queued again on the attempt it had, not leased to a stopped worker for ten minutes.
    const op = await h.sluice.get({ tenant: 'North', id: 'j1' }, { include: ['attempts'] });
    expect([op?.state, op?.attempt]).toEqual(['queued', 0]);
    expect(op?.attempts?.map((a) => [a.attempt, a.outcome])).toEqual([[1, 'released']]);
  });
});

describe('a claim that failed, beside another worker given the same id', () => {
  let a: Harness | undefined;
  let b: Harness | undefined;
  afterEach(async () => {
    await b?.close();
    await a?.close();
  });

  it('leaves alone what the other worker is running: no operation runs twice at once', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-shared-id-'));
    const path = join(dir, 'sluice.db');
    a = await harness({ store: sqliteStore({ path }) });
    // B's first claim fails with no answer, as a dropped connection fails it: B then releases
    // the leases held in its name that it is not running.
    let failed = 0;
    const real = sqliteStore({ path });
    const flaky: Store = Object.create(real, {
      operationClaimMany: {
        value: async (p: Parameters<Store['operationClaimMany']>[0]) => {
          if (failed++ === 0) throw new StoreError('unavailable', 'connection lost');
          return real.operationClaimMany(p);
        },
      },
    });
    b = await harness({ store: flaky });
    const gate = new Gate();
    const runs: string[] = [];
    for (const [who, h] of [
      ['A', a],
      ['B', b],
    ] as const)
      h.sluice.define('job', {
        input: z.object({}),
        run: async (_input, ctx) => {
          runs.push(`${who}#${ctx.attempt}`);
          await gate.wait(ctx.signal);
          return who;
        },
      });
    const options = { id: 'payments-worker', slots: { default: 1 }, leaseMs: 600_000 };
    const wa = a.worker(options);
    wa.start();
    await a.sluice.submit({ tenant: 'North', id: 'j1', kind: 'job', input: {} });
    await gate.arrived;
    const wb = b.worker(options);
    wb.start();
    // B's failed claim and the claims after it have run (B polls every 20 ms), or B has taken
    // the operation A runs.
    await vi.waitFor(() => expect(failed > 2 || runs.length > 1).toBe(true), { timeout: 20_000 });
    expect(runs).toEqual(['A#1']);
    expect(wa.id).not.toBe(wb.id);
    gate.open();
    const done = await a.sluice.wait({ tenant: 'North', id: 'j1' }, { timeoutMs: 20_000 });
    expect([done.state, done.result, runs]).toEqual(['succeeded', 'A', ['A#1']]);
  });
});
