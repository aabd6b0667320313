/** @module cli/commands/migrate — `sluice migrate`: applies the store's pending migrations. */
import type { Command } from 'commander';
import { openStoreFromFlags, STORE_OPTIONS, type StoreFlags } from '../open-store.js';

export function migrateCommand(program: Command): void {
  program
    .command('migrate')
    .description('apply pending schema migrations to the store')
    .option(...STORE_OPTIONS.db)
    .option(...STORE_OPTIONS.config)
    .action(async (opts: StoreFlags) => {
      const { store } = await openStoreFromFlags(opts);
      try {
        await store.migrate();
        console.log(`migrated (${store.dialect})`);
      } finally {
        await store.close();
      }
    });
}
