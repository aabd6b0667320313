/**
 * @module bench/lib/drivers
 * The database drivers of the raw limit loops: the very `pg` and `better-sqlite3` that Sluice
 * itself loads, resolved from the `sluice` package's own location. A limit is only a fair
 * yardstick if it is measured with the same driver build (and, for SQLite, the same native
 * library and SQLite version) as the engine it is compared with; a second copy installed here
 * could drift in version, and the native one would need its own compile.
 */
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';
import type PgModule from 'pg';

const requireFromSluice = createRequire(import.meta.resolve('sluice'));

export const pg = requireFromSluice('pg') as typeof PgModule;
export const Database = requireFromSluice('better-sqlite3') as typeof BetterSqlite3;
export type SqliteDatabase = BetterSqlite3.Database;
export type PgClient = PgModule.Client;
