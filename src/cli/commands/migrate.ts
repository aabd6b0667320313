/** @module cli/commands/migrate — `sluice migrate`: applies the store's pending migrations. */
import type { Command } from 'commander';
import type { PostgresStore } from '../../store/postgres/index.js';
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
        // Where it went: a URL alone migrates the default schema, which a user who meant another
        // (set in a config they did not pass) would otherwise not learn.
        const { applied } = await store.migrationStatus();
        const where =
          store.dialect === 'postgres' ? `, schema "${(store as PostgresStore).context.schema}"` : '';
        console.log(`migrated (${store.dialect}${where}, version ${applied})`);
        // Migrated, perhaps, into another schema than the service's: said, not refused, since a
        // config beside a store named outright may well set none.
        const note = store.dialect === 'postgres' ? ignoredConfigNote(opened) : undefined;
        if (note) console.error(`sluice: note: ${note}`);
      } finally {
        await store.close();
      }
    });
}
