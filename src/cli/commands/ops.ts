/**
 * @module cli/commands/ops
 * `sluice ops list|show`: what operators look at first — which operations are where, and for
 * one operation its attempts, effects (with their idempotency keys) and operator actions.
 */
import type { Command } from 'commander';
import pino from 'pino';
import { jsonFrom } from '../../config/inputs.js';
import { InvalidArgument, OperationNotFound } from '../../core/errors/index.js';
import type { Operation } from '../../core/operation.js';
import type { OperationState } from '../../core/states.js';
import { assertRecordedText, isStoredText, MAX_BY_CHARS } from '../../core/stored-text.js';
import { MAX_REFERENCE_CHARS } from '../../effects/run-effect.js';
import { MAX_REDRIVE_MANY, Sluice } from '../../sluice.js';
import type { ReconcileEffect } from '../../store/types.js';
import {
  assertMigrated,
  ignoredConfigNote,
  openStoreFromFlags,
  STORE_OPTIONS,
  type StoreFlags,
} from '../open-store.js';

/**
 * `ops cancel`'s status when the store answered `too_late`: the operation ran, or runs, to its
 * own end. Not 0, so a script does not take it for a cancel; not 1 (any error, the cancel perhaps
 * never asked) nor 2 (the drill's "could not run"): the store did answer, and the answer is no.
 */
export const EXIT_CANCEL_TOO_LATE = 3;

export async function withSluice<T>(flags: StoreFlags, fn: (sluice: Sluice) => Promise<T>): Promise<T> {
  const opened = await openStoreFromFlags(flags, { existing: true });
  const { store, db } = opened;
  const sluice = new Sluice({ store, logger: pino({ level: 'silent' }) });
  try {
    await assertMigrated(store, db, {
      migrate: opened.migrate,
      note: store.dialect === 'postgres' ? ignoredConfigNote(opened) : undefined,
    });
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
  const ops = program
    .command('ops')
    .description(
      'inspect operations, and cancel, redrive or reconcile one; redrive the dead ones an outage left',
    );
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
      const who = operator(opts.by);
      await withSluice(opts, async (sluice) => {
        const out = await sluice.cancel({ tenant, id }, { by: who });
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
        const who = operator(opts.by);
        await withSluice(opts, async (sluice) => {
          const op = await sluice.redrive({ tenant, id }, { by: who, reason: opts.reason });
          console.log(`${tenant}/${id}: ${op.state}`);
        });
      },
    );
  ops
    .command('redrive-dead')
    .description(
      'put dead operations back in the queue, each recorded as a redrive: those an outage left, ' +
        'once its cause is fixed (every tenant, or one; by kind and error code)',
    )
    .requiredOption('--reason <text>', 'why (kept with each operation)')
    .option('--tenant <tenant>', 'only this tenant')
    .option('--kind <kind>', 'only this kind')
    .option(
      '--code <code>',
      "only those whose error has this code (attempts-exhausted leaves a crash loop's out)",
    )
    .option('--limit <n>', 'at most this many, oldest first (1–10000)', '100')
    .option('--dry-run', 'list them, redrive nothing')
    .option('--by <who>', 'who (default: $SLUICE_OPERATOR or $USER)')
    .option(...STORE_OPTIONS.db)
    .option(...STORE_OPTIONS.config)
    .action(async (opts: RedriveDeadFlags) => {
      const who = operator(opts.by);
      const limit = countFrom('--limit', opts.limit, MAX_REDRIVE_DEAD);
      await withSluice(opts, async (sluice) => {
        const { found, more } = await deadOnes(sluice, opts, limit);
        if (opts.dryRun) {
          console.log(found.length ? table(found) : '(no dead operations match)');
          console.log(`\nwould redrive ${found.length}${more ? '; more match (--limit)' : ''}`);
          return;
        }
        let redriven = 0;
        for (let at = 0; at < found.length; at += MAX_REDRIVE_MANY) {
          const refs = found.slice(at, at + MAX_REDRIVE_MANY).map((o) => ({ tenant: o.tenant, id: o.id }));
          for (const r of await sluice.redriveMany(refs, { by: who, reason: opts.reason })) {
            if (r.ok) redriven++;
            console.log(
              `${r.tenant}/${r.id}: ${r.ok ? r.operation.state : `not redriven (${r.error.code})`}`,
            );
          }
        }
        console.log(`\nredrove ${redriven} of ${found.length}${more ? '; more match: run it again' : ''}`);
      });
    });
  ops
    .command('reconcile <tenant> <id>')
    .description('resolve an operation waiting in needs_reconciliation (recorded)')
    .requiredOption('--resolution <r>', 'requeue, succeeded or failed')
    .requiredOption('--reason <text>', 'what was established at the provider')
    .option(
      '--effect <name=outcome>',
      "an effect's outcome: name=absent, or name=committed:<json>, what the journal would have kept (the provider's answer, or what the effect's record makes of it) as a requeued handler gets it back (committed:null for none); repeatable",
      (value: string, all: string[] = []) => [...all, value],
    )
    .option(
      '--reference <name=text>',
      `the provider's reference of an effect named committed, e.g. charge=ch_9 (1–${MAX_REFERENCE_CHARS} characters; repeatable)`,
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
          reference?: string[];
          result?: string;
          by?: string;
        },
      ) => {
        if (!['requeue', 'succeeded', 'failed'].includes(opts.resolution)) {
          throw new InvalidArgument(
            `--resolution must be requeue, succeeded or failed, not ${JSON.stringify(opts.resolution)}`,
          );
        }
        const effects = withReferences((opts.effect ?? []).map(parseEffect), opts.reference ?? []);
        const who = operator(opts.by);
        await withSluice(opts, async (sluice) => {
          const op = await sluice.reconcile(
            { tenant, id },
            {
              by: who,
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
        // Thrown, so it prints as every error does: `sluice: operation-not-found: …`, status 1.
        if (!op) throw new OperationNotFound(tenant, id);
        console.log(JSON.stringify(op, null, 2));
      });
    });
}

/** The most dead operations one `ops redrive-dead` gathers and redrives. */
const MAX_REDRIVE_DEAD = 10_000;

interface RedriveDeadFlags extends StoreFlags {
  reason: string;
  tenant?: string;
  kind?: string;
  code?: string;
  limit: string;
  dryRun?: boolean;
  by?: string;
}

/**
 * The dead operations that match, oldest first, up to `limit`, gathered before any is redriven:
 * a listing paged while its operations leave the state would skip some. `more`: others match.
 */
async function deadOnes(
  sluice: Sluice,
  opts: RedriveDeadFlags,
  limit: number,
): Promise<{ found: Operation[]; more: boolean }> {
  const found: Operation[] = [];
  for (let cursor: string | undefined; ; ) {
    const page = await sluice.list({
      state: 'dead',
      tenant: opts.tenant,
      kind: opts.kind,
      limit: 500,
      cursor,
    });
    for (const op of page.operations) {
      if (opts.code !== undefined && !endedBy(op, opts.code)) continue;
      if (found.length === limit) return { found, more: true };
      found.push(op);
    }
    if (!page.nextCursor) return { found, more: false };
    cursor = page.nextCursor;
  }
}

/**
 * Whether `code` is what ended the operation: its error's code, or for attempts exhausted, the
 * code of the last attempt's error (`--code provider-unavailable`: those the outage killed).
 */
function endedBy(op: Operation, code: string): boolean {
  const last = (op.error?.details as { lastError?: { code?: unknown } } | undefined)?.lastError;
  return op.error?.code === code || last?.code === code;
}

/** A whole number from 1 to `max` given as a flag's text. */
function countFrom(flag: string, text: string, max: number): number {
  const n = /^\d+$/.test(text) ? Number(text) : Number.NaN;
  if (!(n >= 1 && n <= max))
    throw new InvalidArgument(`${flag} must be a whole number from 1 to ${max}, not ${text}`);
  return n;
}

/**
 * Who an operator action is recorded as: `--by`, else `$SLUICE_OPERATOR`, else `$USER` (an empty
 * variable is unset, as shells mean it), else `cli`. Held to the engine's rule for `by` here,
 * before the store is opened, with the variable that gave it named in the refusal.
 */
function operator(flag: string | undefined): string {
  const [where, by] =
    flag !== undefined
      ? ['--by', flag]
      : process.env.SLUICE_OPERATOR
        ? ['SLUICE_OPERATOR', process.env.SLUICE_OPERATOR]
        : ['USER', process.env.USER || 'cli'];
  assertRecordedText(where, by, MAX_BY_CHARS);
  return by;
}

/**
 * `name=absent`, or `name=committed:<json>`: the JSON is the provider's answer, which the journal
 * returns to the handler after a requeue, so it is not optional — a bare `committed` would have
 * the handler read `null` as what the provider said. `:null` says so outright when it had none.
 */
function parseEffect(spec: string): ReconcileEffect {
  const m = /^([^=]+)=(absent|committed)(?::(.*))?$/s.exec(spec);
  if (!m) throw new InvalidArgument(`--effect ${spec}: expected name=absent or name=committed:<json>`);
  const [, name, outcome, json] = m;
  if (outcome === 'absent') {
    if (json !== undefined)
      throw new InvalidArgument(`--effect ${spec}: an absent effect has no result (name=absent)`);
    return { name: name!, outcome: 'absent' };
  }
  if (json === undefined)
    throw new InvalidArgument(
      `--effect ${spec}: a committed effect needs the provider's answer as JSON, ` +
        `which a requeued handler gets back: ${name}=committed:<json> (${name}=committed:null if it gave none)`,
    );
  return { name: name!, outcome: 'committed', result: jsonFrom(`--effect ${name}=committed:`, json) };
}

/** `--reference name=text` given to the effects named committed: a reference without one is refused. */
function withReferences(effects: ReconcileEffect[], specs: string[]): ReconcileEffect[] {
  const references = new Map<string, string>();
  for (const spec of specs) {
    const at = spec.indexOf('=');
    if (at <= 0) throw new InvalidArgument(`--reference ${spec}: expected name=text`);
    const name = spec.slice(0, at);
    const text = spec.slice(at + 1);
    if (references.has(name)) throw new InvalidArgument(`--reference ${name} is given twice`);
    if (text.trim() === '' || text.length > MAX_REFERENCE_CHARS || !isStoredText(text))
      throw new InvalidArgument(
        `--reference ${name}: the reference must be 1–${MAX_REFERENCE_CHARS} characters, not all blank, ` +
          'without NUL or a lone surrogate',
      );
    if (!effects.some((e) => e.name === name && e.outcome === 'committed'))
      throw new InvalidArgument(
        `--reference ${name}: only an effect named committed keeps a reference (--effect ${name}=committed:<json>)`,
      );
    references.set(name, text);
  }
  return effects.map((e) =>
    e.outcome === 'committed' && references.has(e.name) ? { ...e, reference: references.get(e.name)! } : e,
  );
}
