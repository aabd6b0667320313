/**
 * @module bench/probes/load
 * The Sluice build a probe measures: `SLUICE` names a built `dist/index.js` (another commit's,
 * for an A/B run alternating with this one), else the `sluice` package this bench links to.
 * Each probe makes its own schema (PostgreSQL, `DATABASE_URL`) or file (SQLite) and drops nothing:
 * point it at a scratch database. Also what the probes share: quantiles, and the submit
 * function's call for the probes that measure the server's side of a submit without the engine.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as SluiceModule from 'sluice';
import { type PgClient, pg } from '../lib/drivers.js';
import { durableCommits } from '../lib/engine.js';

export type Sluice = typeof SluiceModule;

export async function loadSluice(): Promise<{ sluice: Sluice; label: string }> {
  const path = process.env.SLUICE;
  if (!path) return { sluice: (await import('sluice')) as Sluice, label: 'sluice' };
  return { sluice: (await import(pathToFileURL(path).href)) as Sluice, label: path };
}

export interface Build {
  sluice: Sluice;
  label: string;
}

/** The build under test, and with `against` (a built `dist/index.js`) another to alternate with. */
export async function loadBuilds(against: string | undefined): Promise<Build[]> {
  const builds = [await loadSluice()];
  if (against) builds.push({ sluice: (await import(pathToFileURL(against).href)) as Sluice, label: against });
  return builds;
}

/**
 * `round` for every build, `rounds` times over, the builds taking turns within each round, so that
 * both see the same minutes of a noisy machine; every other round in the reverse order, so that
 * neither build always runs just after the other's garbage. The results, per build, in round order.
 */
export async function alternate<T>(
  builds: Build[],
  rounds: number,
  round: (s: Sluice) => Promise<T>,
): Promise<T[][]> {
  const out = builds.map((): T[] => []);
  for (let r = 0; r < rounds; r++) {
    const order = [...builds.keys()];
    if (r % 2 === 1) order.reverse();
    for (const i of order) out[i]!.push(await round(builds[i]!.sluice));
  }
  return out;
}

/** Each round's figure of the first build over the second's, when there are two. */
export const roundRatios = (a: number[], b: number[] | undefined): string =>
  b ? `ratio round by round: ${a.map((x, r) => (x / b[r]!).toFixed(2)).join(', ')}` : '';

export const databaseUrl = (): string =>
  process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** How a probe opens a PostgreSQL store: on `DATABASE_URL`, commits as `durableCommits()` says. */
export const pgOptions = () => ({ connectionString: databaseUrl(), durableCommits: durableCommits() });

/**
 * One tenant's backlog of `n` no-op operations (`o0`, `o1`, …, kind `noop`, input `{ i }`),
 * submitted 500 at a time.
 */
export async function submitBacklog(
  engine: { submit(request: { tenant: string; id: string; kind: string; input: unknown }): Promise<unknown> },
  n: number,
  idOf: (i: number) => string = (i) => `o${i}`,
): Promise<void> {
  for (let i = 0; i < n; i += 500)
    await Promise.all(
      Array.from({ length: Math.min(500, n - i) }, (_, k) =>
        engine.submit({ tenant: 't', id: idOf(i + k), kind: 'noop', input: { i: i + k } }),
      ),
    );
}

/** A schema name no other probe run uses. */
export const freshSchema = (prefix: string): string => `${prefix}_${Date.now()}_${process.pid}`;

/** A fresh store of the kind `--store` names: `pg` (default) or `sqlite` (with `sqlite`'s options, say `synchronous`). */
export function freshStore(
  s: Sluice,
  kind: string,
  prefix: string,
  sqlite: { synchronous?: 'FULL' | 'NORMAL' } = {},
): SluiceModule.Store {
  if (kind === 'sqlite')
    return s.sqliteStore({ path: join(mkdtempSync(join(tmpdir(), `${prefix}-`)), 'sluice.db'), ...sqlite });
  return s.postgresStore({ ...pgOptions(), schema: freshSchema(prefix) });
}

/**
 * For the probes that call the store's functions without the engine: a fresh schema migrated by
 * the store (then closed), and a `pg` connection whose search path is that schema.
 */
export async function migratedSchema(s: Sluice, prefix: string): Promise<string> {
  const schema = freshSchema(prefix);
  const store = s.postgresStore({ ...pgOptions(), schema });
  await store.migrate();
  await store.close();
  return schema;
}

export async function schemaClient(schema: string): Promise<PgClient> {
  const client = new pg.Client({ connectionString: databaseUrl() });
  await client.connect();
  await client.query(`SET search_path = "${schema}"`);
  return client;
}

export const quantile = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))] ?? Number.NaN;
};

/**
 * The PostgreSQL store's submit function called directly, with no engine in front (the probes
 * that measure the server's side of a submit): one operation of kind `k`, no limits, announced.
 */
export const SUBMIT_ONE_SQL = `SELECT status FROM submit_one($1, $2, $3, $4, $5, $6, $7, $8::integer, $9::bigint,
  $10::bigint, $11::boolean, $12::float8, $13::integer, $14::integer, $15::integer, $16)`;

export const submitOneArgs = (tenant: string, id: string, cls: string): unknown[] => [
  null,
  tenant,
  id,
  'k',
  cls,
  'd',
  '{}',
  3,
  60_000,
  0,
  false,
  1,
  null,
  null,
  null,
  true,
];
