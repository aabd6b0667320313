/**
 * @module cli/commands/ops
 * `sluice ops list|show`: what operators look at first — which operations are where, and for
 * one operation its attempts, effects (with their idempotency keys) and operator actions.
 */
import type { Command } from 'commander';
import pino from 'pino';
import type { Operation } from '../../core/operation.js';
import type { OperationState } from '../../core/states.js';
import { Sluice } from '../../sluice.js';
import { openStore } from '../open-store.js';

async function withSluice<T>(db: string | undefined, fn: (sluice: Sluice) => Promise<T>): Promise<T> {
  const sluice = new Sluice({ store: await openStore(db), logger: pino({ level: 'silent' }) });
  try {
    return await fn(sluice);
  } finally {
    await sluice.close();
  }
}

function table(ops: Operation[]): string {
  const rows = ops.map((o) => [
    o.tenant,
    o.id,
    o.kind,
    o.state + (o.cancel ? ` (cancel ${o.cancel})` : ''),
    `${o.attempt}/${o.maxAttempts}`,
    o.updatedAt,
    o.error ? o.error.code : '',
  ]);
  const head = ['TENANT', 'ID', 'KIND', 'STATE', 'ATTEMPT', 'UPDATED', 'ERROR'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) =>
    r
      .map((c, i) => c.padEnd(widths[i]!))
      .join('  ')
      .trimEnd();
  return [line(head), ...rows.map(line)].join('\n');
}

export function opsCommand(program: Command): void {
  const ops = program.command('ops').description('inspect operations');
  ops
    .command('list')
    .description('list operations in acceptance order')
    .option('--db <sqlite-path|postgres-url>', 'the store (default: $SLUICE_DB or ./data/sluice.db)')
    .option('--tenant <tenant>', 'only this tenant')
    .option(
      '--state <state>',
      'only this state (queued, running, succeeded, failed, cancelled, dead, needs_reconciliation)',
    )
    .option('--kind <kind>', 'only this kind')
    .option('--limit <n>', 'page size (1–500)', '50')
    .option('--cursor <cursor>', 'continue after a previous page')
    .option('--json', 'print JSON')
    .action(async (opts) => {
      await withSluice(opts.db, async (sluice) => {
        const page = await sluice.list({
          tenant: opts.tenant,
          state: opts.state as OperationState | undefined,
          kind: opts.kind,
          limit: Number(opts.limit),
          cursor: opts.cursor,
        });
        if (opts.json) console.log(JSON.stringify(page, null, 2));
        else {
          console.log(page.operations.length ? table(page.operations) : '(no operations)');
          if (page.nextCursor) console.log(`\nmore: --cursor ${page.nextCursor}`);
        }
      });
    });
  ops
    .command('show <tenant> <id>')
    .description('one operation with its attempts, effects and operator actions (JSON)')
    .option('--db <sqlite-path|postgres-url>', 'the store (default: $SLUICE_DB or ./data/sluice.db)')
    .action(async (tenant: string, id: string, opts: { db?: string }) => {
      await withSluice(opts.db, async (sluice) => {
        const op = await sluice.get({ tenant, id }, { include: ['attempts', 'effects', 'events'] });
        if (!op) {
          console.error(`no operation ${id} for tenant ${tenant}`);
          process.exitCode = 1;
          return;
        }
        console.log(JSON.stringify(op, null, 2));
      });
    });
}
