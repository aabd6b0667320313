/**
 * @module cli/open-store
 * Turns a `--db` value into a store: a `postgres://` URL opens PostgreSQL, anything else is a
 * SQLite file path (its folder is created). Default: `SLUICE_DB`, else `./data/sluice.db`.
 */
import { mkdirSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { sqliteStore } from '../store/sqlite/index.js';
import type { Store } from '../store/store.js';

export const DEFAULT_DB = './data/sluice.db';

export interface OpenStoreOptions {
  sqlite?: { synchronous?: 'FULL' | 'NORMAL' };
  postgres?: { schema?: string; poolSize?: number };
}

export async function openStore(db: string | undefined, options: OpenStoreOptions = {}): Promise<Store> {
  const target = db ?? process.env.SLUICE_DB ?? DEFAULT_DB;
  if (/^postgres(ql)?:\/\//.test(target)) {
    const { postgresStore } = await import('../store/postgres/index.js');
    return postgresStore({ connectionString: target, ...options.postgres });
  }
  if (target !== ':memory:') mkdirSync(dirname(resolve(target)), { recursive: true });
  return sqliteStore({ path: target, ...options.sqlite });
}
