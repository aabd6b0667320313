/**
 * Test helpers: a Sluice on a fresh SQLite file in a temp folder, with a silent logger, and a
 * leak check that every worker stopped and every store closed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import type { Clock } from '../../src/core/clock.js';
import { Sluice, type SluiceOptions, sqliteStore } from '../../src/index.js';
import type { Worker, WorkerOptions } from '../../src/runtime/worker.js';
import type { Store } from '../../src/store/store.js';

export const silent = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });

export interface Harness {
  dir: string;
  dbPath: string;
  sluice: Sluice;
  store: Store;
  worker(options?: WorkerOptions): Worker;
  close(): Promise<void>;
}

export async function harness(
  options: { clock?: Clock; store?: Store; sluice?: Partial<SluiceOptions>; dir?: string } = {},
): Promise<Harness> {
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), 'sluice-test-'));
  const dbPath = join(dir, 'sluice.db');
  const store = options.store ?? sqliteStore({ path: dbPath, clock: options.clock });
  const sluice = new Sluice({ store, logger: silent, ...options.sluice });
  await sluice.migrate();
  const workers: Worker[] = [];
  return {
    dir,
    dbPath,
    sluice,
    store,
    worker(o: WorkerOptions = {}) {
      const w = sluice.worker({
        tempRoot: join(dir, 'tmp'),
        pollIntervalMs: 20,
        rescueIntervalMs: false,
        purgeIntervalMs: false,
        ...o,
      });
      workers.push(w);
      return w;
    },
    async close() {
      await sluice.close({ graceMs: 1000 });
      for (const w of workers)
        if (w.running !== 0) throw new Error(`worker ${w.id} leaked ${w.running} attempts`);
      if (!options.dir) rmSync(dir, { recursive: true, force: true });
    },
  };
}
