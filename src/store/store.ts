/**
 * @module store/store
 * The contract between the engine and a database. Both drivers (SQLite, PostgreSQL) implement
 * it and pass one conformance suite (test/conformance/). It is internal: applications choose a
 * driver with `sqliteStore()` or `postgresStore()` and never call it directly.
 *
 * Invariants every driver keeps:
 * - `(tenant, id)` is unique; the digest never changes after acceptance.
 * - Every write of an attempt (effect journal, finish, heartbeat) is conditional on the lease's
 *   fencing epoch and the `running` state, and reports whether it took effect.
 * - State moves follow core/states.ts; a terminal state changes only by redrive or reconcile.
 * - The `queues` counters (waiting, running per class and tenant) change in the same transaction
 *   as the operations they count.
 * - Times come from the store's clock.
 * - Hot-path methods take arrays, so the engine can group concurrent calls into one commit.
 */

import type { ErrorRecord } from '../core/errors/index.js';
import type { MigrationStatus } from './migrations.js';
import type {
  AttemptRow,
  AwaitingOperatorStats,
  BudgetCharge,
  BudgetUsage,
  BudgetUsageParams,
  CancelAnswer,
  ClaimParams,
  ClaimResult,
  EffectBeginParams,
  EffectBeginResult,
  EffectMarkParams,
  EffectRow,
  EventRow,
  FinishAndClaimResult,
  FinishParams,
  LeaseRef,
  LeaseStatus,
  ListedOperation,
  ListParams,
  OperationRow,
  PurgeParams,
  PurgeResult,
  QueueStat,
  QueueStatsParams,
  ReconcileParams,
  RescuedOperation,
  RescueParams,
  RetryBudgetParams,
  RetryBudgetStats,
  Settled,
  SubmitOutcome,
  SubmitParams,
} from './types.js';

/** Whether anyone would act on a wake now (a claim loop waits for work), and when that starts. */
export interface WakeInterest {
  now(): boolean;
  /** Calls `listener` whenever a loop starts to wait for work after none did; returns a remover. */
  onStart(listener: () => void): () => void;
}

export interface Store {
  readonly dialect: 'sqlite' | 'postgres';
  /**
   * Applies pending migrations. Safe to call from several processes at once. Refuses with
   * `store-schema-newer`, changing nothing, when a newer build has applied a migration it marked
   * breaking for older builds.
   */
  migrate(): Promise<void>;
  /** The highest migration applied to the store, the latest this code has, and any breaking one ahead. */
  migrationStatus(): Promise<MigrationStatus>;
  close(): Promise<void>;
  /** The store's clock, in epoch milliseconds. */
  now(): Promise<number>;

  /**
   * Accepts operations: one transaction for the whole batch, one outcome per item. With `tx`
   * (the driver's own transaction handle: a `pg` client, a better-sqlite3 `Database`), runs inside
   * the caller's open transaction instead: accepted if and only if that transaction commits.
   */
  operationSubmitMany(items: SubmitParams[], options?: { tx?: unknown }): Promise<SubmitOutcome[]>;
  /**
   * Optional: calls `onClass` when another process makes work of a class ready, so idle workers
   * wake at once instead of at the next poll. `onLost` when wake-ups stop coming (the listening
   * connection was lost, or could not listen at start), `onReconnect` once they come again:
   * notifications may have been missed in between. `interest`: whether a wake would be acted on
   * now (a claim loop waits for work); a store that has to look for other processes' work rather
   * than be told (SQLite) looks only then.
   */
  subscribe?(
    onClass: (cls: string) => void,
    options?: { onReconnect?: () => void; onLost?: (error: unknown) => void; interest?: WakeInterest },
  ): Promise<() => Promise<void>>;
  /**
   * True when the store's writes announce to subscribers the work they make ready (a submit, a
   * retry due at once, a redrive), so a subscribed worker need not look for work each time one
   * of its attempts ends. Only meaningful with `subscribe`.
   */
  readonly announcesWork?: boolean;
  operationGet(params: { tenant: string; id: string }): Promise<OperationRow | undefined>;
  operationList(params: ListParams): Promise<ListedOperation[]>;
  attemptList(params: { tenant: string; id: string }): Promise<AttemptRow[]>;
  effectList(params: { tenant: string; id: string }): Promise<EffectRow[]>;
  eventList(params: { tenant: string; id: string }): Promise<EventRow[]>;
  /**
   * The queue counters per (class, tenant), in class then tenant order: every row, or one
   * tenant's (read by key), or only those holding work (what a metrics scrape shows).
   */
  queueStats(params?: QueueStatsParams): Promise<QueueStat[]>;
  /** Waiting operations per class, all tenants together (the class's global queue bound). */
  classStats(): Promise<Array<{ class: string; waiting: number }>>;
  /**
   * How many operations wait for an operator, every tenant's: `dead` (to redrive) and
   * `needs_reconciliation` (to reconcile), each counted up to `cap` through the index of those
   * states (migration 35 on SQLite), so a scrape costs at most `cap` index entries a state.
   */
  awaitingOperatorStats(params: { cap: number }): Promise<AwaitingOperatorStats>;
  /**
   * A secret the store made once, at its migration, for every process that shares it (hex):
   * `cursor`, the key of list cursors. Undefined for a name it does not keep.
   */
  secret(name: 'cursor'): Promise<string | undefined>;

  /** Claims up to `limit` ready operations of a class, rotating fairly across tenants. */
  operationClaimMany(params: ClaimParams): Promise<ClaimResult>;
  /** Heartbeat: extends each lease still held; reports lost leases and cancel requests. */
  leaseExtendMany(params: { leases: LeaseRef[]; leaseMs: number }): Promise<LeaseStatus[]>;
  /**
   * The leases `owner` holds on running operations of `class`. A worker whose claim failed with
   * no answer reads them to find what that claim may have taken without its reply (the worker
   * releases those it is not running, rather than leave them to their lease's expiry).
   */
  leasesHeld(params: { owner: string; class: string }): Promise<LeaseRef[]>;
  /** Ends attempts. Returns, per item, whether the fenced write took effect. */
  attemptFinishMany(items: FinishParams[]): Promise<boolean[]>;
  /**
   * `attemptFinishMany`, then `operationClaimMany`, in one transaction: the claim sees the ends
   * (freed running caps, retries due at once). What a worker calls when ended attempts free
   * slots that more work may fill: one round trip and one commit instead of two.
   *
   * The ends must be attempts of `claim.class` (a worker's class channel calls it so). Ends of
   * another class lock that class's counter row and the claim its own, in an order another
   * transaction may take the other way: PostgreSQL breaks such a cycle after `deadlock_timeout`
   * (1 s) and the store runs the loser again, a second lost each time.
   */
  attemptFinishAndClaim(items: FinishParams[], claim: ClaimParams): Promise<FinishAndClaimResult>;

  /**
   * Steps 2 and 3 of the effect protocol in one transaction: draws on the budgets, then writes
   * the durable `pending` row (or returns the existing one). Fenced. Over a budget nothing is
   * written and `BudgetExhausted` is thrown; over `maxCalls`, `OperationLimitExceeded`.
   */
  effectBegin(params: EffectBeginParams): Promise<EffectBeginResult>;
  /**
   * Records one more request about to be sent under an existing key (`pending` or `absent`).
   * From `absent` nothing is uncertain, so the retention window restarts now. Fenced.
   */
  effectRecordSend(params: {
    lease: LeaseRef;
    name: string;
    /** Reserved again only when sending from `absent` (the earlier reservation was released). */
    spend?: BudgetCharge[];
    rates?: BudgetCharge[];
    maxCalls?: number;
  }): Promise<{ row: EffectRow; now: number }>;
  /** A `pending` effect is known not to have happened (definite refusal, confirmed lookup). Fenced. */
  effectMarkAbsent(params: { lease: LeaseRef; name: string }): Promise<boolean>;
  effectMarkCommitted(params: {
    lease: LeaseRef;
    name: string;
    result: unknown;
    reference: string | null;
  }): Promise<boolean>;
  effectMarkFailed(params: { lease: LeaseRef; name: string; error: ErrorRecord }): Promise<boolean>;
  /**
   * `effectBegin` for several attempts in one transaction (group commit). Each item is applied
   * under its own rules and answered alone: a refusal writes nothing for it and touches no other.
   */
  effectBeginMany(items: EffectBeginParams[]): Promise<Array<Settled<EffectBeginResult>>>;
  /** The marks (absent, committed, failed) for several attempts in one transaction. */
  effectMarkMany(items: EffectMarkParams[]): Promise<boolean[]>;

  operationCancel(params: { tenant: string; id: string; by?: string }): Promise<CancelAnswer | undefined>;
  operationRedrive(params: { tenant: string; id: string; by: string; reason: string }): Promise<OperationRow>;
  operationReconcile(params: ReconcileParams): Promise<OperationRow>;

  /**
   * The service-wide retry budget: allows one retry if retries in the window stay under
   * `floor + ratio × first attempts`, and counts it; otherwise counts a denial.
   */
  retryBudgetTake(params: RetryBudgetParams): Promise<{ allowed: boolean }>;
  retryBudgetStats(params: { windowMs: number }): Promise<RetryBudgetStats>;
  /** Budget windows in use (spend reserved and committed, calls made), current and recent. */
  budgetUsage(params: BudgetUsageParams): Promise<BudgetUsage[]>;

  /** Moves operations whose lease expired back to the queue, or parks them. */
  leaseRescue(params: RescueParams): Promise<RescuedOperation[]>;
  /**
   * Optional housekeeping of counters kept in parts (PostgreSQL: the class deltas of
   * transactional submits, folded into their class rows); returns the parts folded. Workers call
   * it as often as the rescuer. It waits for no other transaction's rows.
   */
  countersFold?(): Promise<number>;
  /**
   * Purges old terminal operations to tombstones and deletes old tombstones. The queue rows
   * (counters and fair-scheduling state, per class) of a tenant whose last operations this pass
   * purged go too: a tenant that comes back is counted in afresh by its next submit.
   */
  retentionPurge(params: PurgeParams): Promise<PurgeResult>;
}
