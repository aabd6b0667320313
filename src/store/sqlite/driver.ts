/**
 * @module store/sqlite/driver
 * `better-sqlite3`, read on the first SQLite store rather than when the package is imported: a
 * program on PostgreSQL never loads it (nor its native binding). It is CommonJS, so a synchronous
 * `require` keeps `sqliteStore` synchronous.
 */
import { createRequire } from 'node:module';
import type Database from 'better-sqlite3';

let driver: typeof Database | undefined;

export function sqliteDriver(): typeof Database {
  driver ??= createRequire(import.meta.url)('better-sqlite3') as typeof Database;
  return driver;
}
