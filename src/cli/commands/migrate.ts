/** @module cli/commands/migrate — `sluice migrate`: applies the store's pending migrations. */
import type { Command } from 'commander';
import { ignoredConfigNote, openStoreFromFlags, STORE_OPTIONS, type StoreFlags } from '../open-store.js';

export function migrateCommand(program: Command): void {
  program
    .command('migrate')
    .description('apply pending schema migrations to the store')
    .option(...STORE_OPTIONS.db)
    .option(...STORE_OPTIONS.config)
    .action(async (opts: StoreFlags) => {
      const opened = await openStoreFromFlags(opts);
      const { store } = opened;
      try {
        await store.migrate();
        console.log(`migrated (${store.dialect})`);
        // Migrated, perhaps, into another schema than the service's: said, not refused, since a
        // config beside a store named outright may well set none.
        const note = store.dialect === 'postgres' ? ignoredConfigNote(opened) : undefined;
        if (note) console.error(`sluice: note: ${note}`);
      } finally {
        await store.close();
      }
    });
}
