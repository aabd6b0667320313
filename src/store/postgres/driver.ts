/**
 * @module store/postgres/driver
 * `pg`, read on the first PostgreSQL store rather than when the package is imported: a program on
 * SQLite never loads it, and a process's start-up is what a worker restarted after a crash waits
 * through before its first claim (importing `sluice` takes about a third less without it).
 * `pg` is CommonJS, so a synchronous `require` keeps `postgresStore` synchronous.
 */
import { createRequire } from 'node:module';
import type pg from 'pg';

let driver: typeof pg | undefined;

export function pgDriver(): typeof pg {
  driver ??= createRequire(import.meta.url)('pg') as typeof pg;
  return driver;
}
