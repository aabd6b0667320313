#!/usr/bin/env node
/**
 * @module cli/main
 * The `sluice` command line. Each command lives in cli/commands/.
 */
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import { isSluiceError } from '../core/errors/index.js';
import { demoCommand } from './commands/demo.js';
import { drillCommand } from './commands/drill.js';
import { keysCommand } from './commands/keys.js';
import { migrateCommand } from './commands/migrate.js';
import { opsCommand } from './commands/ops.js';
import { serveCommand } from './commands/serve.js';
import { tenantsCommand } from './commands/tenants.js';

const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

const program = new Command()
  .name('sluice')
  .description('Bounded, durable background operations with safe retries')
  .version(pkg.version);
serveCommand(program);
migrateCommand(program);
opsCommand(program);
tenantsCommand(program);
keysCommand(program);
demoCommand(program);
drillCommand(program);

program.parseAsync(process.argv).catch((error: unknown) => {
  console.error(isSluiceError(error) ? `${error.code}: ${error.message}` : error);
  process.exit(1);
});
