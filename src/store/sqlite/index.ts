/**
 * @module store/sqlite
 * The embedded default: one SQLite file (better-sqlite3), no set-up, any number of processes
 * on one machine. better-sqlite3 is synchronous; each method runs one short transaction and
 * resolves at once, and the engine groups concurrent hot-path calls so many share one commit.
 */

import { realpathSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { knownKeys } from '../../core/bounds.js';
import { systemClock } from '../../core/clock.js';
import { InvalidArgument, StoreError } from '../../core/errors/index.js';
import { storeClosed } from '../closed.js';
import type { Store } from '../store.js';
import type { AwaitingOperatorStats, LeaseRef, ListedOperation, ListParams, QueueStat } from '../types.js';
import { budgetUsage } from './budgets.js';
import { BusyQueue } from './busy.js';
import { claimMany } from './claim.js';
import { borrowSqlite, openSqlite, type SqliteContext, type SqliteOptions } from './connection.js';
import { sqliteDriver } from './driver.js';
import {
  effectBegin,
  effectBeginMany,
  effectMark,
  effectMarkAbsent,
  effectMarkMany,
  effectRecordSend,
} from './effects.js';
import { FileIdentity } from './file-identity.js';
import { extendMany, finishMany } from './finish.js';
import { AWAITING_OPERATOR_SQL, listParams, listSql } from './list.js';
import { purge, rescue } from './maintenance.js';
import { migrateSqlite, migrationStatusSqlite } from './migrate.js';
import { cancel, reconcile, redrive } from './operator.js';
import { retryBudgetStats, retryBudgetTake } from './retry-budget.js';
import {
  EFFECT_ROW,
  type RawAttempt,
  type RawEffect,
  type RawEvent,
  type RawOperation,
  toAttemptRow,
  toEffectRow,
  toEventRow,
  toOperationRow,
} from './rows.js';
import { submitMany } from './submit.js';
import { watchClasses } from './watch.js';

export type { SqliteOptions } from './connection.js';

export interface SqliteStore extends Store {
  readonly dialect: 'sqlite';
  /** The underlying connection, for transactional submit and for tests. */
  readonly context: SqliteContext;
}

/**
 * A store on a SQLite file.
 *
 * @example
 * ```ts
 * const store = sqliteStore({ path: './data/sluice.db' });
 * await store.migrate();
 * ```
 */
/** Where SQLite puts the file's WAL: beside the file itself, a symbolic link followed. */
export function walPathOf(path: string): string {
  return `${walBase(path)}-wal`;
}

function walBase(path: string): string {
  const absolute = resolvePath(path);
  try {
    return realpathSync(absolute);
  } catch {
    return absolute;
  }
}

const OPTION_KEYS = [
  'path',
  'synchronous',
  'busyTimeoutMs',
  'clock',
  'watch',
] as const satisfies ReadonlyArray<keyof SqliteOptions>;

/**
 * The embedded store: one SQLite file in WAL mode, `synchronous = FULL` by default (an accepted
 * operation survives power loss), shared by the processes of one machine. Run `sluice.migrate()`
 * (or `sluice migrate`) before the first use.
 *
 * @example
 * ```ts
 * const sluice = new Sluice({ store: sqliteStore({ path: './data/sluice.db' }) });
 * ```
 */
export function sqliteStore(options: SqliteOptions): SqliteStore {
  // Before the file is opened: a misspelt key (`watchh`) was its default without a word, and a
  // path that is not a string failed inside the driver with a TypeError.
  if (typeof (options as Partial<SqliteOptions> | null | undefined)?.path !== 'string')
    throw new InvalidArgument(
      `sqliteStore needs { path }, a string: the database file, or ':memory:' (got ${typeof options?.path})`,
    );
  knownKeys('sqliteStore options', options, OPTION_KEYS);
  if (options.watch !== undefined && typeof options.watch !== 'boolean')
    throw new InvalidArgument('watch must be true or false');
  const ctx = openSqlite(options, options.clock ?? systemClock);
  // Resolved now: the file SQLite opens, whatever the working directory is later. SQLite puts the
  // WAL beside the file a symbolic link points to, not beside the link.
  const walPath = walPathOf(options.path);
  const list = (p: ListParams): ListedOperation[] =>
    (ctx.stmt(listSql(p)).all(listParams(p)) as Array<RawOperation & { listed_bytes: number }>).map((r) => ({
      ...toOperationRow(r),
      listedBytes: r.listed_bytes,
    }));
  const busy = new BusyQueue(ctx.busyTimeoutMs);
  // Checked before every call, `now()` included: better-sqlite3's own refusal of a closed
  // database comes only from the calls that reach SQLite.
  let closed = false;
  const identity = FileIdentity.watch(options.path);
  const resolve = <T>(fn: () => T): Promise<T> => {
    if (closed) return Promise.reject(storeClosed('SQLite'));
    const lost = identity?.lost;
    return lost ? Promise.reject(new StoreError('unavailable', lost)) : busy.run(fn);
  };
  return {
    dialect: 'sqlite',
    context: ctx,
    migrate: () => resolve(() => migrateSqlite(ctx)),
    migrationStatus: () => resolve(() => ctx.read(() => migrationStatusSqlite(ctx))),
    close: () => {
      closed = true;
      identity?.stop();
      return busy.run(() => void (ctx.db.open && ctx.db.close()));
    },
    now: () => resolve(() => ctx.clock.now()),
    subscribe: (onClass, subscribeOptions) =>
      resolve(() => {
        // A private database (in memory, or a temporary file) has no other connection to hear from.
        if (options.watch === false || options.path === ':memory:' || options.path === '')
          return async () => {};
        const watch = ctx.read(() => watchClasses(ctx, walPath, onClass, subscribeOptions?.interest));
        return async () => watch.stop();
      }),
    operationSubmitMany: (items, submitOptions) =>
      resolve(() => {
        const tx = submitOptions?.tx;
        if (tx === undefined) return submitMany(ctx, items);
        if (!(tx instanceof sqliteDriver())) {
          throw new InvalidArgument('tx must be a better-sqlite3 Database inside an open transaction');
        }
        // On the store's own connection every write of the store would join the transaction too.
        if (tx === ctx.db)
          throw new InvalidArgument(
            "tx must be a connection of your own, not the store's: the store's other writes would join your transaction",
          );
        return submitMany(borrowSqlite(tx, ctx.clock), items);
      }),
    operationGet: ({ tenant, id }) =>
      resolve(() => {
        const raw = ctx.read(
          () =>
            ctx.stmt('SELECT * FROM operations WHERE tenant = ? AND id = ?').get(tenant, id) as
              | RawOperation
              | undefined,
        );
        return raw ? toOperationRow(raw) : undefined;
      }),
    operationList: (p) => resolve(() => ctx.read(() => list(p))),
    attemptList: ({ tenant, id }) =>
      resolve(() =>
        (
          ctx.read(() =>
            ctx
              .stmt(
                `SELECT o.tenant, o.id AS op_id, a.* FROM operations o JOIN attempts a ON a.op_seq = o.seq
                 WHERE o.tenant = ? AND o.id = ? ORDER BY a.epoch`,
              )
              .all(tenant, id),
          ) as RawAttempt[]
        ).map(toAttemptRow),
      ),
    effectList: ({ tenant, id }) =>
      resolve(() =>
        (
          ctx.read(() =>
            ctx
              .stmt(
                `SELECT ${EFFECT_ROW} FROM operations o JOIN effects e ON e.op_seq = o.seq
                  WHERE o.tenant = ? AND o.id = ? ORDER BY e.first_sent_at, e.name`,
              )
              .all(tenant, id),
          ) as RawEffect[]
        ).map(toEffectRow),
      ),
    eventList: ({ tenant, id }) =>
      resolve(() =>
        (
          ctx.read(() =>
            ctx.stmt('SELECT * FROM events WHERE tenant = ? AND op_id = ? ORDER BY seq').all(tenant, id),
          ) as RawEvent[]
        ).map(toEventRow),
      ),
    queueStats: ({ tenant, holdingWork = false } = {}) =>
      resolve(
        () =>
          ctx.read(() =>
            // One tenant's rows by the queues' key, through `classes`, not a scan of every tenant's.
            tenant === undefined
              ? ctx
                  .stmt(
                    `SELECT class, tenant, waiting, running FROM queues
                      WHERE NOT @holdingWork OR waiting > 0 OR running > 0 ORDER BY class, tenant`,
                  )
                  .all({ holdingWork: holdingWork ? 1 : 0 })
              : ctx
                  .stmt(
                    `SELECT class, tenant, waiting, running FROM queues
                      WHERE class IN (SELECT class FROM classes) AND tenant = @tenant
                        AND (NOT @holdingWork OR waiting > 0 OR running > 0) ORDER BY class`,
                  )
                  .all({ tenant, holdingWork: holdingWork ? 1 : 0 }),
          ) as QueueStat[],
      ),
    classStats: () =>
      resolve(
        () =>
          ctx.read(() => ctx.stmt('SELECT class, waiting FROM classes ORDER BY class').all()) as Array<{
            class: string;
            waiting: number;
          }>,
      ),
    awaitingOperatorStats: ({ cap }) =>
      resolve(() => ctx.read(() => ctx.stmt(AWAITING_OPERATOR_SQL).get({ cap })) as AwaitingOperatorStats),
    secret: (name) =>
      resolve(
        () =>
          (
            ctx.read(() => ctx.stmt('SELECT value FROM secrets WHERE name = ?').get(name)) as
              | { value: string }
              | undefined
          )?.value,
      ),
    operationClaimMany: (p) => resolve(() => claimMany(ctx, p)),
    leaseExtendMany: ({ leases, leaseMs }) => resolve(() => extendMany(ctx, leases, leaseMs)),
    leasesHeld: ({ owner, class: cls }) =>
      resolve(() =>
        ctx.read(
          () =>
            ctx
              .stmt(
                `SELECT tenant, id, epoch FROM operations
                  WHERE state = 'running' AND lease_owner = ? AND class = ? ORDER BY seq`,
              )
              .all(owner, cls) as LeaseRef[],
        ),
      ),
    attemptFinishMany: (items) => resolve(() => finishMany(ctx, items)),
    // One transaction, synced for the ends: the inner writes join the outer BEGIN IMMEDIATE.
    attemptFinishAndClaim: (items, claim) =>
      resolve(() => ctx.write(() => ({ finished: finishMany(ctx, items), claim: claimMany(ctx, claim) }))),
    effectBegin: (p) => resolve(() => effectBegin(ctx, p)),
    effectRecordSend: (p) => resolve(() => effectRecordSend(ctx, p)),
    effectMarkCommitted: ({ lease, name, result, reference }) =>
      resolve(() => effectMark(ctx, lease, name, { state: 'committed', result, reference })),
    effectMarkAbsent: ({ lease, name }) => resolve(() => effectMarkAbsent(ctx, lease, name)),
    effectBeginMany: (items) => resolve(() => effectBeginMany(ctx, items)),
    effectMarkMany: (items) => resolve(() => effectMarkMany(ctx, items)),
    effectMarkFailed: ({ lease, name, error }) =>
      resolve(() => effectMark(ctx, lease, name, { state: 'failed', error })),
    operationCancel: ({ tenant, id, by }) => resolve(() => cancel(ctx, tenant, id, by)),
    operationRedrive: ({ tenant, id, by, reason }) => resolve(() => redrive(ctx, tenant, id, by, reason)),
    operationReconcile: (p) => resolve(() => reconcile(ctx, p)),
    retryBudgetTake: (p) => resolve(() => retryBudgetTake(ctx, p)),
    retryBudgetStats: ({ windowMs }) => resolve(() => ctx.read(() => retryBudgetStats(ctx, windowMs))),
    budgetUsage: (params) => resolve(() => ctx.read(() => budgetUsage(ctx, params))),
    leaseRescue: (p) => resolve(() => rescue(ctx, p)),
    retentionPurge: (p) => resolve(() => purge(ctx, p)),
  };
}
