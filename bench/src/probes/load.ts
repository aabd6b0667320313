/**
 * @module bench/probes/load
 * The Sluice build a probe measures: `SLUICE` names a built `dist/index.js` (another commit's,
 * for an A/B run alternating with this one), else the `sluice` package this bench links to.
 * Each probe makes its own schema (PostgreSQL, `DATABASE_URL`) or file (SQLite) and drops nothing:
 * point it at a scratch database.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type * as SluiceModule from 'sluice';

export type Sluice = typeof SluiceModule;

export async function loadSluice(): Promise<{ sluice: Sluice; label: string }> {
  const path = process.env.SLUICE;
  if (!path) return { sluice: (await import('sluice')) as Sluice, label: 'sluice' };
  return { sluice: (await import(pathToFileURL(path).href)) as Sluice, label: path };
}

/** A fresh store of the kind `--store` names: `pg` (default) or `sqlite`. */
export function freshStore(s: Sluice, kind: string, prefix: string): SluiceModule.Store {
  if (kind === 'sqlite')
    return s.sqliteStore({ path: join(mkdtempSync(join(tmpdir(), `${prefix}-`)), 'sluice.db') });
  const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
  return s.postgresStore({ connectionString: url, schema: `${prefix}_${Date.now()}_${process.pid}` });
}

export const quantile = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))] ?? Number.NaN;
};
