/**
 * @module bench/lib/pg-admin
 * The bench's PostgreSQL database and what the server can tell about a phase of work.
 *
 * - One fresh database per bench run (`sluice_bench_<time>_<pid>`), dropped at the end; each
 *   case run uses a schema of its own inside it.
 * - Counters are read from the server's cumulative statistics through a connection to the
 *   *admin* database, so the reads are not counted in the bench database's own numbers.
 *   PostgreSQL 15 backends publish their counters at most once a second while busy, and at
 *   exit: a phase's connections are therefore closed before its counters are read, and the
 *   reader waits until they are gone.
 * - The CPU time of the phase's server backends is read from /proc (the server is local), just
 *   before their connections close: each phase opens its own pool, so a backend's whole life is
 *   that phase.
 */
import { readFileSync } from 'node:fs';
import { type PgClient, pg } from './drivers.js';

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

export function databaseOf(url: string): string {
  return decodeURIComponent(new URL(url).pathname.slice(1)) || 'postgres';
}

const BENCH_DB = /^sluice_bench_\d+_\d+$/;

/** Creates the run's database; `drop()` removes it (and refuses any other name). */
export async function createBenchDatabase(
  serverUrl: string,
): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `sluice_bench_${Date.now()}_${process.pid}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name}`);
  } finally {
    await admin.end();
  }
  let dropped = false;
  return {
    url: withDatabase(serverUrl, name),
    async drop() {
      if (dropped || !BENCH_DB.test(name)) return;
      dropped = true;
      const c = new pg.Client({ connectionString: serverUrl });
      await c.connect();
      try {
        await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await c.end();
      }
    },
  };
}

export interface ServerInfo {
  version: string;
  settings: Record<string, string>;
}

export async function serverInfo(serverUrl: string): Promise<ServerInfo> {
  const c = new pg.Client({ connectionString: serverUrl });
  await c.connect();
  try {
    const names = [
      'synchronous_commit',
      'fsync',
      'wal_sync_method',
      'full_page_writes',
      'commit_delay',
      'shared_buffers',
      'max_wal_size',
      'wal_level',
    ];
    const settings: Record<string, string> = {};
    for (const n of names) {
      const r = await c.query(`SELECT current_setting($1) AS v`, [n]);
      settings[n] = String(r.rows[0].v);
    }
    const v = await c.query('SHOW server_version');
    return { version: String(v.rows[0].server_version), settings };
  } finally {
    await c.end();
  }
}

export interface PgCounters {
  /** Commits in the bench database. */
  xactCommit: number;
  tupInserted: number;
  tupUpdated: number;
  tupDeleted: number;
  /** Cluster-wide (other users of the server included). */
  walSync: number;
  walBytes: number;
}

/** Reads the server's counters for one database, from a connection to the admin database. */
export class PgObserver {
  private constructor(
    private readonly admin: PgClient,
    readonly database: string,
  ) {}

  static async open(serverUrl: string, database: string): Promise<PgObserver> {
    const admin = new pg.Client({ connectionString: serverUrl, application_name: 'sluice-bench-observer' });
    await admin.connect();
    return new PgObserver(admin, database);
  }

  async close(): Promise<void> {
    await this.admin.end();
  }

  /** Waits until no connection of `applications` (prefixes) is left on the database. */
  async waitForDisconnect(applications: string[] = ['sluice', 'bench'], timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const r = await this.admin.query(
        `SELECT count(*)::int AS n FROM pg_stat_activity
          WHERE datname = $1 AND application_name LIKE ANY ($2::text[])`,
        [this.database, applications.map((a) => `${a}%`)],
      );
      if (r.rows[0].n === 0) break;
      if (Date.now() > deadline)
        throw new Error(`connections of ${applications} still open on ${this.database}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    // The exiting backends publish their counters on the way out; give the last one a moment.
    await new Promise((resolve) => setTimeout(resolve, 100));
  }

  async counters(): Promise<PgCounters> {
    const db = await this.admin.query(
      `SELECT xact_commit::float8 AS c, tup_inserted::float8 AS i, tup_updated::float8 AS u, tup_deleted::float8 AS d
         FROM pg_stat_database WHERE datname = $1`,
      [this.database],
    );
    const wal = await this.admin.query(
      `SELECT wal_sync::float8 AS s, (pg_current_wal_lsn() - '0/0'::pg_lsn)::float8 AS lsn FROM pg_stat_wal`,
    );
    const d = db.rows[0] ?? { c: 0, i: 0, u: 0, d: 0 };
    return {
      xactCommit: d.c,
      tupInserted: d.i,
      tupUpdated: d.u,
      tupDeleted: d.d,
      walSync: wal.rows[0].s,
      walBytes: wal.rows[0].lsn,
    };
  }

  /**
   * Samples, every `intervalMs` until stopped, what the backends serving `applications` are doing:
   * their wait event (`IO:WALSync`, `LWLock:WALWrite`, `Lock:tuple`…), `CPU` when active with no
   * wait event, or `idle` (waiting for the client's next statement: the client's side of a round
   * trip). Returns, per state, the mean number of backends in it.
   */
  sampleWaits(applications: string[], intervalMs = 10): () => Promise<Record<string, number>> {
    const tally = new Map<string, number>();
    let samples = 0;
    let running = true;
    const loop = (async () => {
      while (running) {
        const r = await this.admin.query(
          `SELECT coalesce(wait_event_type || ':' || wait_event, CASE WHEN state = 'active' THEN 'CPU' ELSE state END) AS w,
                  count(*)::int AS n
             FROM pg_stat_activity
            WHERE datname = $1 AND application_name LIKE ANY ($2::text[]) AND backend_type = 'client backend'
            GROUP BY 1`,
          [this.database, applications.map((a) => `${a}%`)],
        );
        samples++;
        for (const row of r.rows) {
          const w = row.w === 'Client:ClientRead' ? 'idle' : String(row.w);
          tally.set(w, (tally.get(w) ?? 0) + row.n);
        }
        await new Promise((resolve) => setTimeout(resolve, intervalMs));
      }
    })();
    return async () => {
      running = false;
      await loop;
      return Object.fromEntries(
        [...tally].map(([w, n]) => [w, n / Math.max(1, samples)]).sort((a, b) => Number(b[1]) - Number(a[1])),
      );
    };
  }

  /** CPU seconds (user + system) used so far by the backends serving `applications` (prefixes). */
  async backendCpuSeconds(applications: string[]): Promise<number> {
    const r = await this.admin.query(
      `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE ANY ($2::text[])`,
      [this.database, applications.map((a) => `${a}%`)],
    );
    let total = 0;
    for (const { pid } of r.rows) total += processCpuSeconds(pid);
    return total;
  }

  /**
   * CPU seconds used so far by each backend serving `applications`, by pid: for windows over
   * long-lived pools, where a backend may close (the pool's idle timeout) or open mid-window.
   */
  async backendCpuByPid(applications: string[]): Promise<Map<number, number>> {
    const r = await this.admin.query(
      `SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE ANY ($2::text[])`,
      [this.database, applications.map((a) => `${a}%`)],
    );
    return new Map(r.rows.map(({ pid }) => [pid as number, processCpuSeconds(pid)]));
  }
}

export function diff(after: PgCounters, before: PgCounters): PgCounters {
  return {
    xactCommit: after.xactCommit - before.xactCommit,
    tupInserted: after.tupInserted - before.tupInserted,
    tupUpdated: after.tupUpdated - before.tupUpdated,
    tupDeleted: after.tupDeleted - before.tupDeleted,
    walSync: after.walSync - before.walSync,
    walBytes: after.walBytes - before.walBytes,
  };
}

/** utime + stime of a local process, in seconds (0 if it is gone). Linux only. */
export function processCpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which is in parentheses and may hold spaces).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  } catch {
    return 0;
  }
}

/** USER_HZ: 100 on every Linux this runs on. */
const CLOCK_TICKS = 100;
