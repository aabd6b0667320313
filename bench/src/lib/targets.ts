/**
 * @module bench/lib/targets
 * Stores of their own for the parts of one case run (a baseline and the measured variant, each
 * on its own tables, so neither runs on the other's rows): a schema per part on PostgreSQL, a
 * folder per part on SQLite. The case's variant names the store.
 */
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import type { CaseSpec } from '../cases/types.js';
import type { StoreName, StoreTarget } from './engine.js';

export function storeOf(spec: CaseSpec): StoreName {
  if (spec.variant !== 'sqlite' && spec.variant !== 'pg')
    throw new Error(`${spec.scenario}: the variant is the store, sqlite or pg, not ${spec.variant}`);
  return spec.variant;
}

export function targetFor(spec: CaseSpec, part: string): StoreTarget {
  const store = storeOf(spec);
  if (store === 'pg') return { store, databaseUrl: spec.databaseUrl, schema: `${spec.tag}_${part}` };
  const dir = join(spec.dir, part);
  mkdirSync(dir, { recursive: true });
  return { store, dir };
}

/** The same store as `sluice serve --db` and `startService` take it: a SQLite file or a URL. */
export function dbOf(target: StoreTarget): string {
  return target.store === 'pg' ? target.databaseUrl! : join(target.dir!, 'sluice.db');
}
