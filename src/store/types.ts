/**
 * @module store/types
 * The rows a store keeps and the parameters of its methods. `OperationRow` is the persisted
 * record as the engine reads it; `Operation` (core/operation.ts) is the public view.
 */
import type { ErrorRecord } from '../core/errors/index.js';
import type { OperationState } from '../core/states.js';

export type CancelState = 'requested' | 'too_late';

export interface OperationRow {
  /** Insertion order; also the list cursor. */
  seq: number;
  tenant: string;
  id: string;
  kind: string;
  class: string;
  /** SHA-256 of the canonical `{kind, input}`; immutable. */
  digest: string;
  input: unknown;
  state: OperationState;
  /** Attempts started in the current attempt count (redrive starts a new count). */
  attempt: number;
  maxAttempts: number;
  /** Fencing token: incremented by every claim, never reset. Writes of an attempt carry it. */
  epoch: number;
  runAfter: number;
  deadlineAt: number | null;
  createdAt: number;
  updatedAt: number;
  startedAt: number | null;
  finishedAt: number | null;
  leaseOwner: string | null;
  leaseExpiresAt: number | null;
  /** Leases of this operation that expired (its worker died or hung): the crash-loop counter. */
  leaseExpiries: number;
  /**
   * When the first effect began. Informational; the write that sets it is also what orders an
   * effect's start against a concurrent cancel (both lock the operation row).
   */
  effectStartedAt: number | null;
  cancel: CancelState | null;
  cancelRequestedAt: number | null;
  result: unknown;
  error: ErrorRecord | null;
}

/** The fencing reference of one attempt: every write of the attempt is conditional on it. */
export interface LeaseRef {
  tenant: string;
  id: string;
  epoch: number;
}

export type AttemptOutcome =
  | 'deferred'
  | 'succeeded'
  | 'failed'
  | 'retry'
  | 'dead'
  | 'needs_reconciliation'
  | 'cancelled'
  | 'released'
  | 'lease-expired'
  | 'deadline-exceeded';

export interface AttemptRow {
  tenant: string;
  id: string;
  attempt: number;
  epoch: number;
  owner: string | null;
  startedAt: number;
  endedAt: number;
  outcome: AttemptOutcome;
  error: ErrorRecord | null;
  /** For a retry: the back-off chosen before the next attempt. */
  retryDelayMs: number | null;
}

/**
 * `pending`: a request may have left and its outcome is unknown. `absent`: every request so far
 * certainly did not take effect. `committed`: done, result kept. `failed`: refused for good.
 */
export type EffectState = 'pending' | 'absent' | 'committed' | 'failed';

export interface EffectRow {
  tenant: string;
  id: string;
  name: string;
  /** The provider idempotency key: derived from (tenant, id, name), stable forever. */
  key: string;
  state: EffectState;
  provider: string | null;
  cost: number | null;
  /** When the first request whose outcome is unknown left: the start of the retention window. */
  firstSentAt: number;
  lastSentAt: number;
  /** Requests sent (or possibly sent) under this key. */
  sends: number;
  committedAt: number | null;
  result: unknown;
  reference: string | null;
  error: ErrorRecord | null;
  /** The attempt (fencing epoch) that last wrote the row. */
  epoch: number;
}

/** A recorded operator action: who moved an operation out of dead / needs_reconciliation, and why. */
export interface EventRow {
  tenant: string;
  id: string;
  at: number;
  action: string;
  by: string;
  reason: string;
  detail: unknown;
}

export interface QueueLimits {
  /** Operations of this tenant and class that may run at once, across all processes. */
  maxRunning?: number | null;
  /** Operations of this tenant and class that may wait; beyond it a submit is refused. */
  maxWaiting?: number | null;
  /** Share of the class's claims relative to other tenants (fair scheduling). Default 1. */
  weight?: number;
  /** Waiting operations of the whole class (all tenants); beyond it a submit is refused. */
  maxQueued?: number | null;
}

export interface SubmitParams {
  tenant: string;
  id: string;
  kind: string;
  class: string;
  digest: string;
  /** The input as canonical JSON text. */
  inputJson: string;
  maxAttempts: number;
  /** Overall deadline relative to acceptance; null for none. */
  deadlineMs: number | null;
  /** Delay before the first attempt may start. */
  delayMs?: number;
  limits?: QueueLimits;
}

export type SubmitOutcome =
  | { status: 'created'; row: OperationRow }
  | { status: 'existing'; row: OperationRow }
  | { status: 'conflict'; row: OperationRow }
  | { status: 'expired'; digestMatches: boolean }
  | {
      status: 'rejected';
      reason: 'tenant-queue-full' | 'class-queue-full';
      /** The counts that refused it, for the engine's retry-after estimate. */
      waiting: number;
      running: number;
      /**
       * For `tenant-queue-full`: how long, by the store's clock, until the earliest of the tenant's
       * waiting operations in the class is due (0 when one is due now), since none of them can
       * leave the queue before; null when none waits, and for `class-queue-full`.
       */
      dueInMs: number | null;
    };

export interface ClaimParams {
  class: string;
  owner: string;
  limit: number;
  leaseMs: number;
  /** Count the first attempts claimed into the service-wide retry budget's current bucket. */
  retryBudget?: { bucketMs: number; shard: number };
  /**
   * Lease expiries from which the claim passes an operation over: one on its last chance, whom
   * one more expiry would park (`crash-loop`). A worker already running such an operation sets
   * it, so that two of them never share a process (runtime/worker.ts). Default: none passed over.
   */
  passOver?: number;
}

export interface ClaimResult {
  /** The store's clock when the claim was made: the base for remaining-time computations. */
  now: number;
  rows: OperationRow[];
  /**
   * The claimed rows' tenants that have a running cap (`maxRunning`) in this class. When one of
   * their attempts ends, a waiting operation of theirs may become claimable, and no write
   * announces that. Only stores that announce work (`Store.announcesWork`) need to tell.
   */
  capped?: ReadonlySet<string>;
  /**
   * Short of its limit, the claim may have left ready work behind: another transaction held what
   * it needed (PostgreSQL's `SKIP LOCKED` passed over it), or work became ready meanwhile. Claim
   * again soon; nothing else may announce that work. Stores with one writer at a time never set it.
   */
  contended?: boolean;
}

export interface FinishAndClaimResult {
  /** Per finish item, whether the fenced write took effect. */
  finished: boolean[];
  claim: ClaimResult;
}

export interface LeaseStatus {
  /** False when the lease is gone: the attempt must stop, its writes will be refused. */
  ok: boolean;
  cancelRequested: boolean;
}

export type FinishParams = {
  lease: LeaseRef;
  /**
   * Effect marks of this attempt written first, in the end's transaction: a `committed` mark the
   * handler's return came before (effects/attempt-marks.ts). Each is fenced on its own lease, as
   * the end is: one refused means the lease is lost and the end is refused too.
   */
  marks?: EffectMarkParams[];
} & (
  | { outcome: 'succeeded'; result: unknown }
  | { outcome: 'failed'; error: ErrorRecord }
  | { outcome: 'retry'; error: ErrorRecord; delayMs: number }
  | { outcome: 'dead'; error: ErrorRecord }
  | { outcome: 'needs_reconciliation'; error: ErrorRecord }
  | { outcome: 'cancelled' }
  /** Interrupted (shutdown): back to the queue without consuming an attempt. */
  | { outcome: 'released' }
  /** Not run now (a budget said wait): back to the queue after `delayMs`, the attempt not consumed. */
  | { outcome: 'deferred'; delayMs: number; error: ErrorRecord }
);

/**
 * One budget an effect draws on, counted in fixed windows of `windowMs` across all processes:
 * a spend budget (units of `cost`) or a call-rate cap (cost 1 per request).
 */
export interface BudgetCharge {
  /** e.g. `spend:payments:tenant:North`, `spend:payments:*`, `rate:payments`. */
  key: string;
  limit: number;
  windowMs: number;
  cost: number;
}

export interface EffectBeginParams {
  lease: LeaseRef;
  name: string;
  key: string;
  provider?: string | null;
  cost?: number | null;
  /** Spend reserved when the `pending` row is written; committed or released with the effect. */
  spend?: BudgetCharge[];
  /** Call-rate caps, drawn on by every request sent (never released). */
  rates?: BudgetCharge[];
  /** Requests (sends) the whole operation may make; beyond it the effect is refused. */
  maxCalls?: number;
}

/**
 * Which budget windows to read. A key may name a tenant after its first `:tenant:` mark
 * (`spend:<provider>:tenant:<tenant>`, `rate:<provider>:tenant:<tenant>`; admission/budgets.ts
 * keeps the mark out of provider names, so the first mark ends the part before the tenant).
 */
export interface BudgetUsageParams {
  /** Only keys that start with it. */
  prefix?: string;
  /** Windows that end after it (ms since the epoch): those in effect, or ended later. */
  since: number;
  /** Only keys naming this tenant: an index read, not a scan of every tenant's windows. */
  tenant?: string;
}

export interface BudgetUsage {
  key: string;
  windowStart: number;
  windowMs: number | null;
  reserved: number;
  committed: number;
}

export interface RetryBudgetParams {
  windowMs: number;
  bucketMs: number;
  /** Retries allowed per first attempt in the window (0.1: at most 10%). */
  ratio: number;
  /** Retries always allowed in a window, so a quiet service can still retry. */
  floor: number;
  shard: number;
}

export interface RetryBudgetStats {
  firstAttempts: number;
  retries: number;
  denials: number;
}

export interface EffectBeginResult {
  row: EffectRow;
  /** True when this call wrote the `pending` row: no request under the key can have left before. */
  created: boolean;
  now: number;
}

export type CancelOutcome = 'cancelled' | 'requested' | 'too_late';

export interface CancelAnswer {
  row: OperationRow;
  outcome: CancelOutcome;
  /** This call ended the operation (queued → cancelled); false when it was cancelled already. */
  ended: boolean;
}

export type ReconcileEffect =
  | { name: string; outcome: 'committed'; result?: unknown; reference?: string | null }
  | { name: string; outcome: 'absent' };

export interface ReconcileParams {
  tenant: string;
  id: string;
  by: string;
  reason: string;
  effects?: ReconcileEffect[];
  /** `requeue` runs the handler again (journaled effects return their recorded results). */
  resolution: 'requeue' | 'succeeded' | 'failed';
  result?: unknown;
  error?: ErrorRecord;
}

export interface RescueParams {
  /** Lease expiries after which an operation is a poison message (dead, `crash-loop`). */
  maxLeaseExpiries: number;
  limit: number;
}

export interface RescuedOperation {
  tenant: string;
  id: string;
  kind: string;
  class: string;
  to: OperationState;
  /** Acceptance to this end when `to` is terminal, else null. */
  endToEndMs: number | null;
}

/** What one pass of the retention purge removed. */
export interface PurgeResult {
  /** Terminal operations purged to a tombstone. */
  purged: number;
  tombstonesDeleted: number;
  /** Queue rows of tenants left with no operation at all (store.ts `retentionPurge`). */
  queuesDeleted: number;
}

export interface PurgeParams {
  /** Terminal operations finished longer ago than this are purged to a tombstone. */
  retentionMs: number;
  /** Tombstones older than this (since the operation finished) are deleted. */
  tombstoneMs: number;
  limit: number;
}

export interface ListParams {
  tenant?: string;
  state?: OperationState;
  kind?: string;
  /** Return operations with `seq` greater than this. */
  after?: number;
  limit: number;
  /**
   * A bound on what one page carries: the rows end one row after the first at which their
   * `listedBytes` reach it (that one more row tells the caller whether anything follows). The
   * rows past it are never read out of the store.
   */
  maxBytes?: number;
}

/** A listed operation, with the bytes of its input, result and error as the store holds them. */
export interface ListedOperation extends OperationRow {
  listedBytes: number;
}

export interface QueueStatsParams {
  /** Only this tenant's rows. */
  tenant?: string;
  /** Only rows with an operation waiting or running. */
  holdingWork?: boolean;
}

export interface QueueStat {
  class: string;
  tenant: string;
  waiting: number;
  running: number;
}

/** How an effect's uncertainty ends (see EffectState). */
export type EffectMarkParams = { lease: LeaseRef; name: string } & (
  | { state: 'absent' }
  | { state: 'committed'; result: unknown; reference: string | null }
  | { state: 'failed'; error: ErrorRecord }
);

/** One item's answer in a batch: its value, or the error it alone was refused with. */
export type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

/**
 * How far the metrics and `GET /v1/queues` count the operations waiting for an operator, per
 * state: past it they read the cap, and a read of a store with a million dead letters reads ten
 * thousand index entries, not a million.
 */
export const AWAITING_OPERATOR_CAP = 10_000;

/** Operations waiting for an operator, every tenant's, each state counted up to a cap. */
export interface AwaitingOperatorStats {
  dead: number;
  needsReconciliation: number;
}
