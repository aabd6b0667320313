/**
 * The set-up shared by the process-level fault tests: a migrated store, a Sluice in the test
 * process that submits and inspects (it defines the `charge` kind but runs no worker), the HTTP
 * provider stub on loopback, and worker processes on both. `close()` kills every worker process,
 * closes the stub and the store, and removes what the rig created.
 *
 * With `config` (test/helpers/worker-process.ts `WorkerConfig`), the test process's `Sluice` and
 * every worker process share one admission and budget configuration: classes and tenant caps
 * (stored with each submit), the retry budget, the `charge` kind's class, and an `export` kind.
 *
 * The store is a SQLite file in a temp folder (the default), or a fresh PostgreSQL schema:
 * - `store: 'postgres'`: in a database of the rig's own (test/helpers/postgres.ts: a new database
 *   on `DATABASE_URL`'s server, else a private embedded server), dropped by `close()`;
 * - `store: { postgresUrl }`: in a database the test owns (e.g. a server it stops and starts);
 *   `close()` drops the schema, never the database or the server.
 */
import { join } from 'node:path';
import pg from 'pg';
import { z } from 'zod';
import { deriveEffectKey, type PostgresStore, postgresStore } from '../../src/index.js';
import {
  type ProviderServer,
  type ProviderServerOptions,
  startProviderServer,
} from '../../src/testing/index.js';
import { type Harness, harness } from './engine.js';
import { type PgTestDatabase, startPostgres } from './postgres.js';
import {
  assertBuilt,
  killAllWorkers,
  type WorkerConfig,
  WorkerProcess,
  type WorkerProcessOptions,
} from './worker-process.js';

export type RigStore = 'sqlite' | 'postgres' | { postgresUrl: string };

/** How to reach the rig's PostgreSQL schema directly (for checks a test makes in SQL). */
export interface RigPostgres {
  url: string;
  schema: string;
  /** The schema's name quoted as an identifier, for SQL text. */
  quoted: string;
  /** A plain client on the database; the caller ends it. */
  client(): Promise<pg.Client>;
}

type SpawnOptions = Omit<WorkerProcessOptions, 'db' | 'schema' | 'providerUrl' | 'id'>;

export interface Rig {
  h: Harness;
  provider: ProviderServer;
  /** Set when the store is PostgreSQL. */
  postgres: RigPostgres | undefined;
  /** The admission and budget configuration every worker process gets (unless its spawn overrides it). */
  config: WorkerConfig | undefined;
  /** Spawns a worker process on the rig's store and stub (does not wait for it). */
  spawn(id: string, options?: SpawnOptions): WorkerProcess;
  /** Spawns a worker process and waits for its `ready` line. */
  start(id: string, options?: SpawnOptions): Promise<WorkerProcess>;
  /** Idempotent. */
  close(): Promise<void>;
}

/** The provider idempotency key of an operation's `charge` effect, as every worker derives it. */
export const chargeKey = (tenant: string, id: string) => deriveEffectKey(tenant, id, 'charge');

/**
 * The name a rig's worker was given, from the owner its leases and attempts record: the worker
 * adds a nonce of its own (`A/3fa2c1`), so that workers given one name never share leases.
 */
export const workerOf = (owner: string | null | undefined): string | null | undefined =>
  owner?.replace(/\/[0-9a-f]{6}$/, '');

export async function processRig(
  options: {
    provider?: ProviderServerOptions;
    maxAttempts?: number;
    store?: RigStore;
    /** Connections of the test process's PostgreSQL pool. Default 4. */
    poolSize?: number;
    /** Admission and budget configuration, for the test process and every worker process. */
    config?: WorkerConfig;
  } = {},
): Promise<Rig> {
  assertBuilt();
  const choice = options.store ?? 'sqlite';
  let database: PgTestDatabase | undefined;
  let pgStore: PostgresStore | undefined;
  let url: string | undefined;
  if (choice !== 'sqlite') {
    if (choice === 'postgres') {
      database = await startPostgres();
      url = database.url;
    } else url = choice.postgresUrl;
    const schema = `proc_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 8)}`;
    pgStore = postgresStore({ connectionString: url, schema, poolSize: options.poolSize ?? 4 });
  }
  let h: Harness;
  try {
    const { classes, tenants, retryBudget } = options.config ?? {};
    h = await harness({ store: pgStore, sluice: { classes, tenants, retryBudget } });
  } catch (error) {
    await pgStore?.close();
    await database?.stop();
    throw error;
  }
  // Same name and schema as the worker processes' kind; its limits are stored with each operation.
  const runsNothing = () => {
    throw new Error('the test process runs no worker');
  };
  h.sluice.define('charge', {
    class: options.config?.charge?.class,
    input: z.object({ invoice: z.number().int().nonnegative(), amount_cents: z.number().int().positive() }),
    limits: { maxAttempts: options.maxAttempts ?? 5 },
    run: runsNothing,
  });
  if (options.config?.export) {
    h.sluice.define('export', {
      class: options.config.export.class,
      input: z.object({ n: z.number().int().nonnegative() }),
      limits: { maxAttempts: options.maxAttempts ?? 5 },
      run: runsNothing,
    });
  }
  const provider = await startProviderServer(options.provider);
  const postgres: RigPostgres | undefined =
    pgStore && url
      ? {
          url,
          schema: pgStore.context.schema,
          quoted: pgStore.context.quoted,
          async client() {
            const client = new pg.Client({ connectionString: url });
            // A server restarted under an idle client ends it with an 'error' event.
            client.on('error', () => {});
            await client.connect();
            return client;
          },
        }
      : undefined;
  const env = (o: { env?: Record<string, string> } | undefined) => ({
    TEMP_ROOT: join(h.dir, 'tmp'),
    ...o?.env,
  });
  let closed = false;
  const spawnOne: Rig['spawn'] = (id, o) =>
    new WorkerProcess({
      config: options.config,
      ...o,
      env: env(o),
      db: postgres?.url ?? h.dbPath,
      schema: postgres?.schema,
      providerUrl: provider.url,
      id,
    });
  return {
    h,
    provider,
    postgres,
    config: options.config,
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
      if (database) await database.stop();
      else if (postgres) {
        // A database the test owns: leave it as found.
        const client = await postgres.client();
        try {
          await client.query(`DROP SCHEMA IF EXISTS ${postgres.quoted} CASCADE`);
        } finally {
          await client.end();
        }
      }
    },
  };
}
