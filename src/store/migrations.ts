/**
 * @module store/migrations
 * Forward-only numbered migrations, one `NNNN_name.sql` file each, with the same numbers in
 * every driver's folder. A migration is applied once, in order, inside a transaction.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** Reads the migrations of one driver from its folder, in version order. */
export function loadMigrations(dir: string): Migration[] {
  return readdirSync(dir)
    .filter((f) => /^\d{4}_[a-z0-9_]+\.sql$/.test(f))
    .sort()
    .map((file) => ({
      version: Number(file.slice(0, 4)),
      name: file.slice(5, -4),
      sql: readFileSync(join(dir, file), 'utf8'),
    }));
}
