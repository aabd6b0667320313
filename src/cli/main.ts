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
  console.error(`sluice: ${describe(error)}`);
  process.exit(1);
});

/**
 * One line an operator can act on: a Sluice error's code and message, a system error's message
 * (a port in use, a folder that cannot be made). The stack only with `DEBUG` set: it is for
 * whoever debugs Sluice, not for whoever runs it.
 */
function describe(error: unknown): string {
  if (process.env.DEBUG && error instanceof Error && error.stack) return error.stack;
  if (isSluiceError(error)) return `${error.code}: ${error.message}`;
  if (error instanceof Error) return error.message;
  return String(error);
}
