/**
 * The engine after `sluice.close()`, on both stores: every call that reaches the store is refused
 * with `store-closed`, not retryable, so an application that retries retryable errors stops at
 * once on what is a mistake in its own order of shutdown, where `store-unavailable` had it retry
 * for ever. A submit goes through the engine's batching, which sends a batch refused with an
 * error that is not retryable again item by item: each caller is still answered `store-closed`.
 * Closing again changes nothing.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isSluiceError, Sluice, sqliteStore } from '../../src/index.js';
import type { Store } from '../../src/store/store.js';
import { silent } from '../helpers/engine.js';
import { usePostgres } from '../helpers/postgres.js';

const CLOSED = 'store-closed, not retryable';

async function outcome(call: () => Promise<unknown>): Promise<string> {
  try {
    await call();
    return 'answered';
  } catch (error) {
    if (!isSluiceError(error)) throw error;
    return `${error.code}, ${error.retryable ? 'retryable' : 'not retryable'}`;
  }
}

/** Every call of a closed engine that reaches its store, and how each ended. */
async function afterClose(store: Store): Promise<Record<string, string>> {
  const sluice = new Sluice({ store, logger: silent });
  await sluice.migrate();
  sluice.define('job', { input: z.object({ n: z.number() }), run: () => null });
  await sluice.submit({ tenant: 'North', id: 'before', kind: 'job', input: { n: 1 } });
  await sluice.close();
  const ref = { tenant: 'North', id: 'before' };
  return {
    // Two at once, so that they share a batch, which the engine then sends again one by one.
    submit: (
      await Promise.all([
        outcome(() => sluice.submit({ tenant: 'North', id: 'a', kind: 'job', input: { n: 1 } })),
        outcome(() => sluice.submit({ tenant: 'North', id: 'b', kind: 'job', input: { n: 2 } })),
      ])
    ).join(' | '),
    get: await outcome(() => sluice.get(ref)),
    list: await outcome(() => sluice.list({ tenant: 'North' })),
    cancel: await outcome(() => sluice.cancel(ref)),
    wait: await outcome(() => sluice.wait(ref, { timeoutMs: 60_000 })),
    rescueExpiredLeases: await outcome(() => sluice.rescueExpiredLeases()),
    purgeExpired: await outcome(() => sluice.purgeExpired()),
    migrate: await outcome(() => sluice.migrate()),
    closeAgain: await outcome(() => sluice.close()),
  };
}

const EXPECTED = {
  submit: `${CLOSED} | ${CLOSED}`,
  get: CLOSED,
  list: CLOSED,
  cancel: CLOSED,
  wait: CLOSED,
  rescueExpiredLeases: CLOSED,
  purgeExpired: CLOSED,
  migrate: CLOSED,
  closeAgain: 'answered',
};

describe('a closed engine on SQLite', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('refuses every call with store-closed, not retryable; closing again changes nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-closed-engine-'));
    dirs.push(dir);
    expect(await afterClose(sqliteStore({ path: join(dir, 'sluice.db') }))).toEqual(EXPECTED);
  });
});

describe('a worker whose store is closed under it', () => {
  it('says so once and claims no more, where it retried a failed claim for ever', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-closed-worker-'));
    const store = sqliteStore({ path: join(dir, 'sluice.db') });
    const lines: Array<{ level: number; msg: string }> = [];
    // The claim loop and both maintenance tasks, each saying it once.
    let heard: () => void = () => {};
    const closedSaid = new Promise<void>((resolve) => {
      heard = resolve;
    });
    let said = 0;
    const logger = pino(
      { level: 'info' },
      {
        write: (line: string) => {
          const record = JSON.parse(line) as { level: number; msg: string };
          lines.push(record);
          if (record.msg.startsWith('the store is closed') && ++said === 3) heard();
        },
      },
    );
    const sluice = new Sluice({ store, logger });
    await sluice.migrate();
    sluice.define('job', { input: z.object({}), run: () => null });
    const worker = sluice.worker({ rescueIntervalMs: 5, purgeIntervalMs: 5, pollIntervalMs: 5 });
    worker.start();
    await store.close();
    await closedSaid;
    await worker.stop({ graceMs: 100 });
    // The first failure after the close is the only line about it: no back-off that logs on.
    expect(
      lines
        .filter((l) => /failed|the store is closed/.test(l.msg))
        .map((l) => l.msg)
        .sort(),
    ).toEqual([
      'the store is closed: this maintenance task stops',
      'the store is closed: this maintenance task stops',
      'the store is closed: this worker claims no more; stop it',
    ]);
    rmSync(dir, { recursive: true, force: true });
  });
});

describe('a closed engine on PostgreSQL', () => {
  const db = usePostgres();

  it('refuses every call with store-closed, not retryable; closing again changes nothing', async () => {
    expect(await afterClose(db.store())).toEqual(EXPECTED);
  });
});
