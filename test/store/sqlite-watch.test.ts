/**
 * Wake-ups across processes on one SQLite file (store/sqlite/watch.ts): another connection's
 * commit that put operations in a class's queue wakes that class, and nothing else does. Two stores
 * on one file stand for two processes here (each has its own connection, which is all that
 * `PRAGMA data_version` distinguishes); test/process/sqlite-wake.test.ts does it with a real
 * worker process.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isInvalidArgument, sqliteStore } from '../../src/index.js';
import { classWatch, watchClasses } from '../../src/store/sqlite/watch.js';
import { type Harness, harness } from '../helpers/engine.js';

const open: Harness[] = [];
afterEach(async () => {
  for (const h of open.splice(0)) await h.close();
});

/** Resolves once `check` holds, looking at each turn of the event loop (the test's timeout bounds it). */
async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((resolve) => setImmediate(resolve));
}

/** Two engines on one file: `here` watches, `there` is the other process. */
async function pair() {
  const here = await harness();
  const there = await harness({ dir: here.dir, store: sqliteStore({ path: here.dbPath }) });
  open.push(there, here);
  for (const h of [here, there]) {
    h.sluice.define('charge', { input: z.object({}), run: () => null });
    h.sluice.define('export', { input: z.object({}), class: 'bulk', run: () => null });
  }
  const ctx = (here.store as ReturnType<typeof sqliteStore>).context;
  return { here, there, ctx };
}

describe('SQLite wake-ups across processes', () => {
  it("wakes the class whose queue another connection's commit added to, once", async () => {
    const { here, there, ctx } = await pair();
    await there.sluice.submit({ tenant: 't', id: 'before', kind: 'charge', input: {} });
    const watch = classWatch(ctx); // what waited before the watch began is the poll's to find
    expect(watch.look()).toBeUndefined(); // no other connection committed since

    await there.sluice.submit({ tenant: 't', id: 'e1', kind: 'export', input: {} });
    expect(watch.look()).toEqual(['bulk']);
    expect(watch.look()).toBeUndefined();

    await there.sluice.submit({ tenant: 't', id: 'c1', kind: 'charge', input: {} });
    await there.sluice.submit({ tenant: 'u', id: 'e2', kind: 'export', input: {} });
    expect(watch.look()?.sort()).toEqual(['bulk', 'default']);

    // This connection's own submit does not move data_version: the engine wakes its own workers.
    await here.sluice.submit({ tenant: 't', id: 'c2', kind: 'charge', input: {} });
    expect(watch.look()).toBeUndefined();
  });

  it("wakes after this process's own claim lowered the waiting count it last saw", async () => {
    const { here, there, ctx } = await pair();
    const watch = classWatch(ctx);
    await there.sluice.submit({ tenant: 't', id: 'c1', kind: 'charge', input: {} });
    expect(watch.look()).toEqual(['default']);
    // This process claims and runs c1: its own commits, unheard by data_version.
    const worker = here.worker();
    worker.start();
    await here.sluice.wait({ tenant: 't', id: 'c1' }, { timeoutMs: 10_000, pollMs: 10 });
    await worker.stop();
    // Waiting is back to what the last look saw (1 → 0 → 1); what entered is not.
    await there.sluice.submit({ tenant: 't', id: 'c2', kind: 'charge', input: {} });
    expect(watch.look()).toEqual(['default']);
  });

  it('a commit where nothing entered a queue (a claim, a cancel) wakes nothing', async () => {
    const { there, ctx } = await pair();
    await there.sluice.submit({ tenant: 't', id: 'c1', kind: 'charge', input: {} });
    await there.sluice.submit({ tenant: 't', id: 'c2', kind: 'charge', input: {} });
    const watch = classWatch(ctx);
    await there.sluice.cancel({ tenant: 't', id: 'c1' });
    const worker = there.worker();
    worker.start();
    await worker.idle();
    await worker.stop();
    expect((await there.sluice.get({ tenant: 't', id: 'c2' }))?.state).toBe('succeeded');
    expect(watch.look()).toEqual([]); // committed, and no count rose
  });

  it("a subscribed store calls back for another connection's submit", async () => {
    const { here, there } = await pair();
    let wake: (cls: string) => void = () => {};
    const woke = new Promise<string>((resolve) => {
      wake = resolve;
    });
    const stop = await here.store.subscribe!((cls) => wake(cls));
    await there.sluice.submit({ tenant: 't', id: 'e1', kind: 'export', input: {} });
    expect(await woke).toBe('bulk');
    await stop();
  });

  it('a worker on another connection starts a submitted operation without polling', async () => {
    const { here, there } = await pair();
    let started: (id: string) => void = () => {};
    const run = new Promise<string>((resolve) => {
      started = resolve;
    });
    here.sluice.define('wake', { input: z.object({}), run: (_input, ctx) => void started(ctx.id) });
    there.sluice.define('wake', { input: z.object({}), run: () => null });
    // The worker's first claim, when it has returned: after it the worker waits for its next
    // poll, a minute away, so only the watch can wake it within the test's time.
    const store = here.store;
    const claimMany = store.operationClaimMany.bind(store);
    let claimed: () => void = () => {};
    const firstClaim = new Promise<void>((resolve) => {
      claimed = resolve;
    });
    store.operationClaimMany = (...args) => claimMany(...args).finally(() => claimed());
    const worker = here.worker({ pollIntervalMs: 60_000 });
    worker.start();
    await firstClaim;
    await there.sluice.submit({ tenant: 't', id: 'w1', kind: 'wake', input: {} });
    expect(await run).toBe('w1');
  });

  it('watches the WAL file, and looks on a timer where it cannot', async () => {
    const { here, there, ctx } = await pair();
    const wakes = (walPath: string) => {
      const woke: string[] = [];
      let heard: () => void = () => {};
      const handle = watchClasses(ctx, walPath, (cls) => {
        woke.push(cls);
        heard();
      });
      const next = () =>
        new Promise<void>((resolve) => {
          heard = resolve;
        });
      return { handle, woke, next };
    };
    const events = wakes(`${here.dbPath}-wal`);
    expect(events.handle.mode).toBe('events');
    let heard = events.next();
    await there.sluice.submit({ tenant: 't', id: 'e1', kind: 'export', input: {} });
    await heard;
    expect(events.woke).toEqual(['bulk']);
    events.handle.stop();

    const polling = wakes(join(here.dir, 'no-such-dir', 'sluice.db-wal'));
    expect(polling.handle.mode).toBe('interval');
    heard = polling.next();
    await there.sluice.submit({ tenant: 't', id: 'c1', kind: 'charge', input: {} });
    await heard;
    expect(polling.woke).toEqual(['default']);
    polling.handle.stop();
  });

  it('keeps hearing the file after a checkpoint truncates the log', async () => {
    const { here, there, ctx } = await pair();
    let heard: (cls: string) => void = () => {};
    const handle = watchClasses(ctx, `${here.dbPath}-wal`, (cls) => heard(cls));
    const next = () =>
      new Promise<string>((resolve) => {
        heard = resolve;
      });
    let woke = next();
    await there.sluice.submit({ tenant: 't', id: 'e1', kind: 'export', input: {} });
    expect(await woke).toBe('bulk');
    const [checkpoint] = (there.store as ReturnType<typeof sqliteStore>).context.db.pragma(
      'wal_checkpoint(TRUNCATE)',
    ) as Array<{ busy: number }>;
    expect(checkpoint?.busy).toBe(0);
    woke = next();
    await there.sluice.submit({ tenant: 't', id: 'c1', kind: 'charge', input: {} });
    expect(await woke).toBe('default');
    expect(handle.mode).toBe('events');
    handle.stop();
  });

  it('stops hearing the file while nobody waits for work, and catches up when someone does', async () => {
    const { here, there, ctx } = await pair();
    let waiting = false;
    let start: () => void = () => {};
    const interest = {
      now: () => waiting,
      onStart: (listener: () => void) => {
        start = listener;
        return () => {};
      },
    };
    const woke: string[] = [];
    let heard: () => void = () => {};
    const handle = watchClasses(
      ctx,
      `${here.dbPath}-wal`,
      (cls) => {
        woke.push(cls);
        heard();
      },
      interest,
    );
    expect(handle.listening).toBe(true);
    // Busy: the first file event closes the watch, and nothing is looked at.
    await there.sluice.submit({ tenant: 't', id: 'e1', kind: 'export', input: {} });
    await until(() => !handle.listening);
    expect(woke).toEqual([]);
    // A loop starts to wait: the file is watched again, and a look wakes for what entered meanwhile.
    const caughtUp = new Promise<void>((resolve) => {
      heard = resolve;
    });
    waiting = true;
    start();
    expect(handle.listening).toBe(true);
    await caughtUp;
    expect(woke).toEqual(['bulk']);
    handle.stop();
  });

  it('refuses a watch setting that is not true or false', () => {
    let error: unknown;
    try {
      sqliteStore({ path: ':memory:', watch: 'yes' as unknown as boolean });
    } catch (e) {
      error = e;
    }
    expect(isInvalidArgument(error)).toBe(true);
    for (const watch of [true, false]) sqliteStore({ path: ':memory:', watch }).close();
  });
});
