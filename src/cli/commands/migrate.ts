/** @module cli/commands/migrate — `sluice migrate`: applies the store's pending migrations. */
import type { Command } from 'commander';
import { openStore } from '../open-store.js';

export function migrateCommand(program: Command): void {
  program
    .command('migrate')
    .description('apply pending schema migrations to the store')
    .option('--db <sqlite-path|postgres-url>', 'the store (default: $SLUICE_DB or ./data/sluice.db)')
    .action(async (opts: { db?: string }) => {
      const store = await openStore(opts.db);
      try {
        await store.migrate();
        console.log(`migrated (${store.dialect})`);
      } finally {
        await store.close();
      }
    });
}
