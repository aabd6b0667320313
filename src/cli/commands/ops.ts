/**
 * @module cli/commands/ops
 * `sluice ops list|show`: what operators look at first — which operations are where, and for
 * one operation its attempts, effects (with their idempotency keys) and operator actions.
 */
import type { Command } from 'commander';
import pino from 'pino';
import { jsonFrom } from '../../config/inputs.js';
import { InvalidArgument } from '../../core/errors/index.js';
import type { Operation } from '../../core/operation.js';
import type { OperationState } from '../../core/states.js';
import { Sluice } from '../../sluice.js';
import type { ReconcileEffect } from '../../store/types.js';
import { assertMigrated, openStoreFromFlags, STORE_OPTIONS, type StoreFlags } from '../open-store.js';

/**
 * `ops cancel`'s status when the store answered `too_late`: the operation ran, or runs, to its
 * own end. Not 0, so a script does not take it for a cancel; not 1 (any error, the cancel perhaps
 * never asked) nor 2 (the drill's "could not run"): the store did answer, and the answer is no.
 */
export const EXIT_CANCEL_TOO_LATE = 3;

export async function withSluice<T>(flags: StoreFlags, fn: (sluice: Sluice) => Promise<T>): Promise<T> {
  const { store, db } = await openStoreFromFlags(flags, { existing: true });
  const sluice = new Sluice({ store, logger: pino({ level: 'silent' }) });
  try {
    await assertMigrated(store, db);
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
  const ops = program.command('ops').description('inspect operations, and cancel, redrive or reconcile one');
  ops
    .command('list')
    .description('list operations in acceptance order')
    .option(...STORE_OPTIONS.db)
    .option(...STORE_OPTIONS.config)
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
      await withSluice(opts, async (sluice) => {
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
  const by = () => process.env.SLUICE_OPERATOR ?? process.env.USER ?? 'cli';
  ops
    .command('cancel <tenant> <id>')
    .description(
      'ask to cancel an operation (queued: cancelled; running: stopped unless an effect happened); ' +
        `exits ${EXIT_CANCEL_TOO_LATE} when it is too late`,
    )
    .option('--by <who>', 'who (default: $SLUICE_OPERATOR or $USER)')
    .option(...STORE_OPTIONS.db)
    .option(...STORE_OPTIONS.config)
    .action(async (tenant: string, id: string, opts: { db?: string; config?: string; by?: string }) => {
      await withSluice(opts, async (sluice) => {
        const out = await sluice.cancel({ tenant, id }, { by: opts.by ?? by() });
        console.log(`${tenant}/${id}: cancel ${out.cancel}; state ${out.operation.state}`);
        if (out.cancel === 'too_late') process.exitCode = EXIT_CANCEL_TOO_LATE;
      });
    });
  ops
    .command('redrive <tenant> <id>')
    .description('put a dead operation back in the queue with a fresh attempt count (recorded)')
    .requiredOption('--reason <text>', 'why (kept with the operation)')
    .option('--by <who>', 'who (default: $SLUICE_OPERATOR or $USER)')
    .option(...STORE_OPTIONS.db)
    .option(...STORE_OPTIONS.config)
    .action(
      async (
        tenant: string,
        id: string,
        opts: { db?: string; config?: string; reason: string; by?: string },
      ) => {
        await withSluice(opts, async (sluice) => {
          const op = await sluice.redrive({ tenant, id }, { by: opts.by ?? by(), reason: opts.reason });
          console.log(`${tenant}/${id}: ${op.state}`);
        });
      },
    );
  ops
    .command('reconcile <tenant> <id>')
    .description('resolve an operation waiting in needs_reconciliation (recorded)')
    .requiredOption('--resolution <r>', 'requeue, succeeded or failed')
    .requiredOption('--reason <text>', 'what was established at the provider')
    .option(
      '--effect <name=outcome>',
      "an effect's outcome: name=absent, or name=committed[:json-result] (repeatable)",
      (value: string, all: string[] = []) => [...all, value],
    )
    .option('--result <json>', 'the result, with --resolution succeeded')
    .option('--by <who>', 'who (default: $SLUICE_OPERATOR or $USER)')
    .option(...STORE_OPTIONS.db)
    .option(...STORE_OPTIONS.config)
    .action(
      async (
        tenant: string,
        id: string,
        opts: {
          db?: string;
          resolution: string;
          reason: string;
          effect?: string[];
          result?: string;
          by?: string;
        },
      ) => {
        if (!['requeue', 'succeeded', 'failed'].includes(opts.resolution)) {
          throw new Error('--resolution must be requeue, succeeded or failed');
        }
        const effects = (opts.effect ?? []).map(parseEffect);
        await withSluice(opts, async (sluice) => {
          const op = await sluice.reconcile(
            { tenant, id },
            {
              by: opts.by ?? by(),
              reason: opts.reason,
              effects,
              resolution: opts.resolution as 'requeue' | 'succeeded' | 'failed',
              result: opts.result === undefined ? undefined : jsonFrom('--result', opts.result),
            },
          );
          console.log(`${tenant}/${id}: ${op.state}`);
        });
      },
    );
  ops
    .command('show <tenant> <id>')
    .description('one operation with its attempts, effects and operator actions (JSON)')
    .option(...STORE_OPTIONS.db)
    .option(...STORE_OPTIONS.config)
    .action(async (tenant: string, id: string, opts: { db?: string; config?: string }) => {
      await withSluice(opts, async (sluice) => {
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

function parseEffect(spec: string): ReconcileEffect {
  const m = /^([^=]+)=(absent|committed)(?::(.*))?$/s.exec(spec);
  if (!m) throw new InvalidArgument(`--effect ${spec}: expected name=absent or name=committed[:json]`);
  const [, name, outcome, json] = m;
  if (outcome === 'absent') return { name: name!, outcome: 'absent' };
  return {
    name: name!,
    outcome: 'committed',
    result: json === undefined ? null : jsonFrom(`--effect ${name}=committed:`, json),
  };
}
