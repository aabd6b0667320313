/**
 * @module store/postgres
 * The store for more than one machine: any number of API and worker processes on any number of
 * hosts share one PostgreSQL (node-postgres). It behaves exactly as the SQLite store (one
 * conformance suite runs against both); what differs is how it stays correct under real
 * concurrency: READ COMMITTED with row locks, never table locks; claims with
 * `FOR UPDATE SKIP LOCKED`; admission counted under the queue row's lock; LISTEN/NOTIFY to wake
 * idle workers in other processes; the server's clock for every lease and deadline.
 *
 * Round trips: submit of a batch, claim, finish of a batch, heartbeat, every effect-journal
 * write (budget draws and settlements included) and a retry-budget take are one statement each
 * (the hot paths are functions installed by the migrations). Admission and budgets hold across
 * processes because every count is checked under the lock of the row that holds it: the queue
 * row (tenant caps), the class row (`maxQueued`), the budget rows (spend, call rate), an
 * advisory lock for retry-budget takes. migrations/0002_admission.sql gives the lock order, and
 * 0024_budget_lock_order.sql its form for batches (every operation row, then every budget row).
 * The one exception is a submit inside the caller's transaction: it reads the class bound without
 * the lock and counts its class as a delta, so that the caller's open transaction never holds
 * the row every submit and claim of the class moves (0031_class_deltas.sql).
 */
import { knownKeys } from '../../core/bounds.js';
import { storeClosed } from '../closed.js';
import type { Store } from '../store.js';
import type { ListParams, QueueStat, SubmitOutcome, SubmitParams } from '../types.js';
import { warnIfAutovacuumOff } from './autovacuum.js';
import { budgetUsage } from './budgets.js';
import { claimMany } from './claim.js';
import { openPostgres, type PgContext, type PostgresOptions } from './connection.js';
import { effectBegin, effectBeginMany, effectMark, effectMarkMany, effectRecordSend } from './effects.js';
import { extendMany, finishMany } from './finish.js';
import { finishAndClaim } from './finish-claim.js';
import { listQuery } from './list.js';
import { foldClassDeltas, purge, rescue } from './maintenance.js';
import { migratePostgres, migrationStatusPostgres } from './migrate.js';
import { type SubscribeOptions, subscribe } from './notify.js';
import { cancel, reconcile, redrive } from './operator.js';
import { retryBudgetStats, retryBudgetTake } from './retry-budget.js';
import { num, type PgRow, toAttemptRow, toEffectRow, toEventRow, toOperationRow } from './rows.js';
import { type SubmitOptions, submitMany } from './submit.js';

export type { PostgresOptions } from './connection.js';
export { classifyPgError } from './errors.js';
export type { SubscribeOptions } from './notify.js';
export type { SubmitOptions } from './submit.js';

export interface PostgresStore extends Store {
  readonly dialect: 'postgres';
  /** The pool, schema and clock the store uses (for tests and tooling). */
  readonly context: PgContext;
  /**
   * Accepts operations in one round trip and one commit. With `{ client }`, runs inside that
   * client's open transaction instead (transactional submit): the operations are accepted if
   * and only if the caller's transaction commits.
   *
   * @example
   * ```ts
   * const client = await pool.connect();
   * await client.query('BEGIN');
   * await client.query('INSERT INTO invoices …');
   * await store.operationSubmitMany([item], { client });
   * await client.query('COMMIT'); // the operation exists only now
   * ```
   */
  operationSubmitMany(items: SubmitParams[], options?: SubmitOptions): Promise<SubmitOutcome[]>;
  /**
   * Calls `onClass` whenever another process makes work of a class ready (NOTIFY on commit).
   * Resolves once listening; the returned function stops. See notify.ts for reconnection.
   */
  subscribe(onClass: (cls: string) => void, options?: SubscribeOptions): Promise<() => Promise<void>>;
}

/**
 * A store on a PostgreSQL database, in its own schema (default `sluice`).
 *
 * @example
 * ```ts
 * const store = postgresStore({ connectionString: process.env.DATABASE_URL });
 * await store.migrate();
 * const sluice = new Sluice({ store });
 * ```
 */
const OPTION_KEYS = [
  'connectionString',
  'pool',
  'schema',
  'poolSize',
  'clock',
  'statementTimeoutMs',
  'connectTimeoutMs',
  'notify',
  'durableCommits',
  'pooler',
  'listenUrl',
] as const satisfies ReadonlyArray<keyof PostgresOptions>;

/**
 * The PostgreSQL store: any number of API and worker processes on any number of hosts share one
 * database, in a schema of their own (`sluice` by default). Commits wait for the WAL flush
 * (`synchronous_commit` on). Run `sluice.migrate()` (or `sluice migrate`) before the first use;
 * docs/operations.md has the roles, poolers and server settings.
 *
 * @example
 * ```ts
 * const sluice = new Sluice({ store: postgresStore({ connectionString: process.env.DATABASE_URL }) });
 * ```
 */
export function postgresStore(options: PostgresOptions): PostgresStore {
  // Before the pool is made: a misspelt key (`poolsize`, `durableCommit`) was its default.
  knownKeys('postgresStore options', options, OPTION_KEYS);
  const ctx = openPostgres(options);
  const subscriptions = new Set<() => Promise<void>>();
  let autovacuumChecked = false;
  const list = (p: ListParams) => {
    const { text, values } = listQuery(p);
    return ctx.query(text, values);
  };
  return {
    dialect: 'postgres',
    context: ctx,
    announcesWork: ctx.notify,
    async migrate() {
      await migratePostgres(ctx);
      // Once per store, where a service or `sluice migrate` starts: see autovacuum.ts.
      if (autovacuumChecked) return;
      autovacuumChecked = true;
      await warnIfAutovacuumOff(ctx);
    },
    migrationStatus: () => migrationStatusPostgres(ctx),
    async close() {
      ctx.markClosed();
      await Promise.all([...subscriptions].map((stop) => stop()));
      subscriptions.clear();
      if (ctx.ownsPool && !ctx.pool.ending) await ctx.pool.end();
    },
    async now() {
      if (ctx.closed) throw storeClosed('PostgreSQL');
      if (ctx.clock) return ctx.clock.now();
      const [row] = await ctx.query<{ now: string }>(
        'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now',
      );
      return num(row!.now)!;
    },
    operationSubmitMany: (items, submitOptions) => submitMany(ctx, items, submitOptions),
    async operationGet({ tenant, id }) {
      const [row] = await ctx.query('SELECT * FROM {s}.operations WHERE tenant = $1 AND id = $2', [
        tenant,
        id,
      ]);
      return row ? toOperationRow(row) : undefined;
    },
    operationList: async (p) =>
      (await list(p)).map((r) => ({ ...toOperationRow(r), listedBytes: Number(r.listed_bytes) })),
    attemptList: async ({ tenant, id }) =>
      (
        await ctx.query<PgRow>(
          `SELECT o.tenant, o.id AS op_id, a.* FROM {s}.operations o JOIN {s}.attempts a ON a.op_seq = o.seq
            WHERE o.tenant = $1 AND o.id = $2 ORDER BY a.epoch`,
          [tenant, id],
        )
      ).map(toAttemptRow),
    effectList: async ({ tenant, id }) =>
      (
        await ctx.query<PgRow>(
          `SELECT e.* FROM {s}.operations o JOIN {s}.effects e ON e.op_seq = o.seq
            WHERE o.tenant = $1 AND o.id = $2 ORDER BY e.first_sent_at, e.name`,
          [tenant, id],
        )
      ).map(toEffectRow),
    eventList: async ({ tenant, id }) =>
      (
        await ctx.query<PgRow>('SELECT * FROM {s}.events WHERE tenant = $1 AND op_id = $2 ORDER BY seq', [
          tenant,
          id,
        ])
      ).map(toEventRow),
    queueStats: ({ tenant, holdingWork = false } = {}) =>
      // One tenant's rows by the queues' key, through the classes, not a scan of every tenant's
      // (a class first seen in a transactional submit has deltas before it has a row).
      tenant === undefined
        ? ctx.query<QueueStat>(
            `SELECT class, tenant, waiting, running FROM {s}.queues
              WHERE NOT $1::boolean OR waiting > 0 OR running > 0 ORDER BY class, tenant`,
            [holdingWork],
          )
        : ctx.query<QueueStat>(
            `SELECT q.class, q.tenant, q.waiting, q.running
               FROM (SELECT class FROM {s}.classes UNION SELECT class FROM {s}.class_deltas) c
               JOIN LATERAL (SELECT * FROM {s}.queues x WHERE x.class = c.class AND x.tenant = $1 OFFSET 0) q
                 ON true
              WHERE NOT $2::boolean OR q.waiting > 0 OR q.running > 0 ORDER BY q.class`,
            [tenant, holdingWork],
          ),
    classStats: () =>
      // The class rows and the transactional submits' deltas not yet folded into them.
      ctx.query<{ class: string; waiting: number }>(
        `SELECT c.class, sum(c.waiting)::integer AS waiting
           FROM (SELECT class, waiting FROM {s}.classes UNION ALL SELECT class, waiting FROM {s}.class_deltas) c
          GROUP BY c.class ORDER BY c.class`,
      ),
    awaitingOperatorStats: async ({ cap }) => {
      // Through the index of the settled states by acceptance order (version 1).
      const [row] = await ctx.query<{ dead: number; needs_reconciliation: number }>(
        `SELECT (SELECT count(*) FROM (SELECT 1 FROM {s}.operations WHERE state = 'dead' LIMIT $1) d)::integer AS dead,
                (SELECT count(*) FROM (SELECT 1 FROM {s}.operations WHERE state = 'needs_reconciliation' LIMIT $1) n)::integer
                  AS needs_reconciliation`,
        [cap],
      );
      return { dead: row!.dead, needsReconciliation: row!.needs_reconciliation };
    },
    secret: async (name) =>
      (await ctx.query<{ value: string }>('SELECT value FROM {s}.secrets WHERE name = $1', [name]))[0]?.value,
    operationClaimMany: (p) => claimMany(ctx, p),
    leaseExtendMany: ({ leases, leaseMs }) => extendMany(ctx, leases, leaseMs),
    leasesHeld: async ({ owner, class: cls }) =>
      // Through the index of leased rows (as many as are running): never a scan of the table.
      (
        await ctx.query<{ tenant: string; id: string; epoch: string }>(
          `SELECT tenant, id, epoch FROM {s}.operations
            WHERE lease_expires_at IS NOT NULL AND state = 'running' AND lease_owner = $1 AND class = $2
            ORDER BY seq`,
          [owner, cls],
        )
      ).map((r) => ({ tenant: r.tenant, id: r.id, epoch: Number(r.epoch) })),
    attemptFinishMany: (items) => finishMany(ctx, items),
    attemptFinishAndClaim: (items, claim) => finishAndClaim(ctx, items, claim),
    effectBegin: (p) => effectBegin(ctx, p),
    effectRecordSend: (p) => effectRecordSend(ctx, p),
    effectMarkCommitted: ({ lease, name, result, reference }) =>
      effectMark(ctx, lease, name, { state: 'committed', result, reference }),
    effectMarkAbsent: ({ lease, name }) => effectMark(ctx, lease, name, { state: 'absent' }),
    effectBeginMany: (items) => effectBeginMany(ctx, items),
    effectMarkMany: (items) => effectMarkMany(ctx, items),
    effectMarkFailed: ({ lease, name, error }) => effectMark(ctx, lease, name, { state: 'failed', error }),
    operationCancel: ({ tenant, id, by }) => cancel(ctx, tenant, id, by),
    operationRedrive: ({ tenant, id, by, reason }) => redrive(ctx, tenant, id, by, reason),
    operationReconcile: (p) => reconcile(ctx, p),
    retryBudgetTake: (p) => retryBudgetTake(ctx, p),
    retryBudgetStats: ({ windowMs }) => retryBudgetStats(ctx, windowMs),
    budgetUsage: (params) => budgetUsage(ctx, params),
    leaseRescue: (p) => rescue(ctx, p),
    countersFold: () => foldClassDeltas(ctx),
    retentionPurge: (p) => purge(ctx, p),
    async subscribe(onClass, subscribeOptions) {
      // The listening connection is the store's own, not the pool's: no checkout refuses it.
      if (ctx.closed) throw storeClosed('PostgreSQL');
      const stop = await subscribe(ctx, onClass, subscribeOptions);
      // Closed while it connected: `close()` stopped the others, and would never see this one.
      if (ctx.closed) {
        await stop();
        throw storeClosed('PostgreSQL');
      }
      const tracked = async () => {
        subscriptions.delete(tracked);
        await stop();
      };
      subscriptions.add(tracked);
      return tracked;
    },
  };
}
