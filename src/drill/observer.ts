/**
 * @module drill/observer
 * The drill's own view of the deployment's store, opened in the drill process beside the
 * deployment: the queue counters, the running operations and their lease holders, the retry
 * budget's counters, every operation at the end, and the database connections the deployment
 * holds. It only reads (migrating the fresh store before the deployment starts aside).
 *
 * Connections are measured, not assumed:
 * - PostgreSQL: rows of `pg_stat_activity` whose `application_name` is the run's (the deployment's
 *   processes connect with it; the observer uses another), i.e. every open connection of the
 *   API and worker pools, idle or busy, and their LISTEN connections.
 * - SQLite has no server: each process holds its own connection, an open file descriptor on the
 *   database file. On Linux the observer counts the live deployment processes' descriptors that
 *   point at the file (`/proc/<pid>/fd`); elsewhere it counts one per live process.
 */
import { readdirSync, readlinkSync, realpathSync } from 'node:fs';
import { openStore } from '../cli/open-store.js';
import type { PostgresStore } from '../store/postgres/index.js';
import type { Store } from '../store/store.js';
import type { OperationRow, QueueStat, RetryBudgetStats } from '../store/types.js';

export interface Observer {
  readonly store: Store;
  readonly dialect: 'sqlite' | 'postgres';
  /** How `connections()` measures, in words (for the docs and the report's detail). */
  readonly connectionsMethod: string;
  /** The most connections one deployment process may open: its pool, and its LISTEN connection. */
  readonly connectionsPerProcess: number;
  queueStats(): Promise<QueueStat[]>;
  /** Every running operation (one statement: one snapshot). */
  running(): Promise<OperationRow[]>;
  retryStats(windowMs: number): Promise<RetryBudgetStats>;
  /** The deployment's open database connections now. `livePids`: its live processes. */
  connections(livePids: number[]): Promise<number>;
  /** Every operation in the store, in acceptance order. */
  allOperations(): Promise<OperationRow[]>;
  /** Closes the observer; drops the run's PostgreSQL schema unless `keep`. */
  close(options: { dropSchema: boolean }): Promise<void>;
}

const isPostgres = (db: string) => /^postgres(ql)?:\/\//.test(db);

/** The URL with `application_name` set (node-postgres lets the URL's parameter win). */
export function withApplicationName(url: string, name: string): string {
  const u = new URL(url);
  u.searchParams.set('application_name', name);
  return u.toString();
}

export async function openObserver(params: {
  db: string;
  schema?: string;
  /** The deployment's `application_name` (PostgreSQL). */
  appName: string;
  /** The deployment processes' pool size (PostgreSQL). */
  poolSize: number;
}): Promise<Observer> {
  const postgres = isPostgres(params.db);
  const store = await openStore(
    postgres ? withApplicationName(params.db, `${params.appName}-observer`) : params.db,
    { postgres: { schema: params.schema, poolSize: 3 } },
  );
  await store.migrate();
  const base = {
    store,
    dialect: store.dialect,
    queueStats: async () =>
      (await store.queueStats()).map((q) => ({
        ...q,
        waiting: Number(q.waiting),
        running: Number(q.running),
      })),
    running: () => store.operationList({ state: 'running', limit: 1000 }),
    retryStats: async (windowMs: number) => {
      const s = await store.retryBudgetStats({ windowMs });
      return {
        firstAttempts: Number(s.firstAttempts),
        retries: Number(s.retries),
        denials: Number(s.denials),
      };
    },
    async allOperations() {
      const all: OperationRow[] = [];
      for (let after = 0; ; ) {
        const page = await store.operationList({ after, limit: 1000 });
        all.push(...page);
        if (page.length < 1000) return all;
        after = page.at(-1)!.seq;
      }
    },
  };
  if (postgres) {
    const pgStore = store as PostgresStore;
    return {
      ...base,
      connectionsMethod: `pg_stat_activity rows with application_name '${params.appName}'`,
      connectionsPerProcess: params.poolSize + 1,
      async connections() {
        const { rows } = await pgStore.context.pool.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
          [params.appName],
        );
        return Number(rows[0]?.n ?? 0);
      },
      async close({ dropSchema }) {
        if (dropSchema && params.schema) {
          await pgStore.context.pool.query(`DROP SCHEMA IF EXISTS ${pgStore.context.quoted} CASCADE`);
        }
        await store.close();
      },
    };
  }
  const file = realpathSync(params.db);
  const procfs = process.platform === 'linux';
  return {
    ...base,
    connectionsMethod: procfs
      ? 'open file descriptors on the SQLite file in the live deployment processes (/proc/<pid>/fd)'
      : 'one connection per live deployment process (SQLite: each process opens the file once)',
    connectionsPerProcess: 1,
    async connections(livePids) {
      if (!procfs) return livePids.length;
      let n = 0;
      for (const pid of livePids) {
        let fds: string[];
        try {
          fds = readdirSync(`/proc/${pid}/fd`);
        } catch {
          continue; // it just exited
        }
        for (const fd of fds) {
          try {
            if (readlinkSync(`/proc/${pid}/fd/${fd}`) === file) n++;
          } catch {
            // closed meanwhile
          }
        }
      }
      return n;
    },
    close: () => store.close(),
  };
}
