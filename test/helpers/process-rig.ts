/**
 * The set-up shared by the process-level fault tests: a migrated SQLite file in a temp folder,
 * a Sluice in the test process that submits and inspects (it defines the `charge` kind but runs
 * no worker), the HTTP provider stub on loopback, and worker processes on both. `close()` kills
 * every worker process, closes the stub and the store, and removes the folder.
 */
import { join } from 'node:path';
import { z } from 'zod';
import { deriveEffectKey } from '../../src/index.js';
import {
  type ProviderServer,
  type ProviderServerOptions,
  startProviderServer,
} from '../../src/testing/index.js';
import { type Harness, harness } from './engine.js';
import { assertBuilt, killAllWorkers, WorkerProcess, type WorkerProcessOptions } from './worker-process.js';

export interface Rig {
  h: Harness;
  provider: ProviderServer;
  /** Spawns a worker process on the rig's store and stub (does not wait for it). */
  spawn(id: string, options?: Omit<WorkerProcessOptions, 'dbPath' | 'providerUrl' | 'id'>): WorkerProcess;
  /** Spawns a worker process and waits for its `ready` line. */
  start(
    id: string,
    options?: Omit<WorkerProcessOptions, 'dbPath' | 'providerUrl' | 'id'>,
  ): Promise<WorkerProcess>;
  /** Idempotent. */
  close(): Promise<void>;
}

/** The provider idempotency key of an operation's `charge` effect, as every worker derives it. */
export const chargeKey = (tenant: string, id: string) => deriveEffectKey(tenant, id, 'charge');

export async function processRig(
  options: { provider?: ProviderServerOptions; maxAttempts?: number } = {},
): Promise<Rig> {
  assertBuilt();
  const h = await harness();
  // Same name and schema as the worker processes' kind; its limits are stored with each operation.
  h.sluice.define('charge', {
    input: z.object({ invoice: z.number().int().nonnegative(), amount_cents: z.number().int().positive() }),
    limits: { maxAttempts: options.maxAttempts ?? 5 },
    run() {
      throw new Error('the test process runs no worker');
    },
  });
  const provider = await startProviderServer(options.provider);
  const env = (o: { env?: Record<string, string> } | undefined) => ({
    TEMP_ROOT: join(h.dir, 'tmp'),
    ...o?.env,
  });
  let closed = false;
  const spawnOne: Rig['spawn'] = (id, o) =>
    new WorkerProcess({ ...o, env: env(o), dbPath: h.dbPath, providerUrl: provider.url, id });
  return {
    h,
    provider,
    spawn: spawnOne,
    async start(id, o) {
      const worker = spawnOne(id, o);
      await worker.ready();
      return worker;
    },
    async close() {
      if (closed) return;
      closed = true;
      await killAllWorkers();
      await provider.close();
      await h.close();
    },
  };
}
