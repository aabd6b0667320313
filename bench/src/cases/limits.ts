/**
 * @module bench/cases/limits
 * The yardsticks: how many durable single-row commits each database does on this machine, with
 * nothing of Sluice in the way. Sluice's figures are read as fractions of these.
 *
 * - limit-pg: a plain `pg` loop, `INSERT` of one row per statement in autocommit (one
 *   transaction, one commit, `synchronous_commit` as the server has it: on), a named prepared
 *   statement, by 1 client and by 16 clients at once (where PostgreSQL's group commit lets one
 *   WAL flush serve several commits).
 * - limit-sqlite: a better-sqlite3 loop on a WAL file, one `BEGIN IMMEDIATE; INSERT; COMMIT` per
 *   row (what Sluice's SQLite store does per write), under `synchronous=FULL` and `NORMAL`.
 */
import { join } from 'node:path';
import { Database, type PgClient, pg } from '../lib/drivers.js';
import { PhaseMeter } from '../lib/meter.js';
import { databaseOf, PgObserver } from '../lib/pg-admin.js';
import type { CaseResult, CaseSpec } from './types.js';

const PAYLOAD = JSON.stringify({ invoice: 123456, amount_cents: 5000, note: 'a row of about 64 bytes' });

export async function limitPg(spec: CaseSpec): Promise<CaseResult> {
  const clients = Number(spec.variant);
  if (!(clients >= 1)) throw new Error(`limit-pg variant must be a client count, not ${spec.variant}`);
  const total = spec.ops ?? (clients === 1 ? (spec.quick ? 300 : 3000) : spec.quick ? 800 : 12_800);
  const perClient = Math.ceil(total / clients);
  const n = perClient * clients;
  const schema = `"${spec.tag}"`;
  const table = `${schema}.limit_rows`;
  const insert = { name: 'bench_limit_insert', text: `INSERT INTO ${table} (v) VALUES ($1)` };
  const connect = async (): Promise<PgClient[]> => {
    const cs = Array.from(
      { length: clients },
      () => new pg.Client({ connectionString: spec.databaseUrl, application_name: 'bench-limit' }),
    );
    await Promise.all(cs.map((c) => c.connect()));
    return cs;
  };
  const loop = (cs: PgClient[], each: number) =>
    Promise.all(
      cs.map(async (c) => {
        for (let i = 0; i < each; i++) await c.query({ ...insert, values: [PAYLOAD] });
      }),
    );

  const observer = await PgObserver.open(spec.serverUrl, databaseOf(spec.databaseUrl));
  try {
    const setup = await connect();
    await setup[0]!.query(`CREATE SCHEMA ${schema}`);
    await setup[0]!.query(
      `CREATE TABLE ${table} (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text NOT NULL)`,
    );
    // Warm-up: the JIT, the connections' plans, the table's first pages.
    await loop(setup, spec.quick ? 20 : 100);
    await Promise.all(setup.map((c) => c.end()));

    const meter = new PhaseMeter(observer, ['bench-limit']);
    await meter.open();
    const cs = await connect();
    meter.start();
    await loop(cs, perClient);
    meter.stop();
    await meter.sampleServerCpu();
    await Promise.all(cs.map((c) => c.end()));
    await meter.close();

    const cleanup = new pg.Client({ connectionString: spec.databaseUrl, application_name: 'bench-cleanup' });
    await cleanup.connect();
    await cleanup.query(`DROP SCHEMA ${schema} CASCADE`);
    await cleanup.end();
    return {
      figures: { commits: meter.rate(n) },
      perOp: meter.perOp(n, 'limit'),
      info: { n, clients, seconds: meter.seconds },
    };
  } finally {
    await observer.close();
  }
}

export async function limitSqlite(spec: CaseSpec): Promise<CaseResult> {
  const sync = spec.variant;
  if (sync !== 'FULL' && sync !== 'NORMAL') throw new Error(`limit-sqlite variant must be FULL or NORMAL`);
  const n = spec.ops ?? (sync === 'FULL' ? (spec.quick ? 500 : 8000) : spec.quick ? 2000 : 40_000);
  const db = new Database(join(spec.dir, 'limit.db'));
  try {
    db.pragma('journal_mode = WAL');
    db.pragma(`synchronous = ${sync}`);
    db.exec('CREATE TABLE limit_rows (id INTEGER PRIMARY KEY, v TEXT NOT NULL)');
    const insert = db.prepare('INSERT INTO limit_rows (v) VALUES (?)');
    const commitOne = db.transaction((v: string) => insert.run(v));
    for (let i = 0; i < (spec.quick ? 100 : 500); i++) commitOne.immediate(PAYLOAD);

    const meter = new PhaseMeter(undefined);
    meter.start();
    for (let i = 0; i < n; i++) commitOne.immediate(PAYLOAD);
    meter.stop();
    return {
      figures: { commits: meter.rate(n) },
      perOp: meter.perOp(n, 'limit'),
      info: {
        n,
        seconds: meter.seconds,
        sqlite: String(db.prepare('SELECT sqlite_version() AS v').pluck().get()),
      },
    };
  } finally {
    db.close();
  }
}
