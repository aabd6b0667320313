/**
 * @module cli/commands/tenants
 * `sluice tenants usage`: per tenant and class, what runs and what waits; per tenant, the spend
 * budgets drawn in the current windows.
 */
import type { Command } from 'commander';
import { spendKeyParts } from '../../admission/budgets.js';
import { STORE_OPTIONS } from '../open-store.js';
import { withSluice } from './ops.js';

export function tenantsCommand(program: Command): void {
  const tenants = program.command('tenants').description('tenants and their usage');
  tenants
    .command('usage [tenant]')
    .description('running and waiting operations per class, and spend drawn this window')
    .option(...STORE_OPTIONS.db)
    .option(...STORE_OPTIONS.config)
    .option('--json', 'print JSON')
    .action(async (tenant: string | undefined, opts: { db?: string; config?: string; json?: boolean }) => {
      await withSluice(opts, async (sluice) => {
        const now = await sluice.store.now();
        const queues = await sluice.store.queueStats({ tenant });
        const spend = (await sluice.store.budgetUsage({ prefix: 'spend:', since: now, tenant })).filter(
          (b) => tenant === undefined || spendKeyParts(b.key)?.tenant === tenant,
        );
        if (opts.json) {
          console.log(JSON.stringify({ queues, spend }, null, 2));
          return;
        }
        if (queues.length === 0) console.log('(no queued or running operations)');
        for (const q of queues)
          console.log(
            `${q.tenant.padEnd(20)} ${q.class.padEnd(14)} running ${q.running}  waiting ${q.waiting}`,
          );
        for (const b of spend) {
          console.log(
            `${b.key.padEnd(40)} reserved ${b.reserved}  committed ${b.committed}  (window from ${new Date(b.windowStart).toISOString()})`,
          );
        }
      });
    });
}
