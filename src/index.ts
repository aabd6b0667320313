/**
 * @module sluice
 * Bounded, durable background operations with safe retries. The public API: named re-exports only.
 * The engine alone: the HTTP service is `sluice/service` (src/service/index.ts), so that a program
 * that only runs operations never loads the web server.
 */

export type { BudgetWindow, ProviderBudget, ProviderBudgets } from './admission/budgets.js';
export type {
  AdmissionConfig,
  ClassConfig,
  TenantConfig,
  TenantLimits,
} from './admission/limits.js';
export type { RetryBudgetConfig } from './admission/retry-budget.js';
export { defineConfig, loadConfig, type PostgresConfig, type SluiceConfig } from './config/config.js';
export type { SluiceOptions } from './config/engine-options.js';
export { type Clock, systemClock } from './core/clock.js';
export { canonicalJson, operationDigest } from './core/digest.js';
export * from './core/errors/index.js';
export type { AttemptView, EffectView, EventView, Operation } from './core/operation.js';
export {
  allowedTargets,
  isTerminal,
  OPERATION_STATES,
  type OperationState,
  TERMINAL_STATES,
  type TransitionEvent,
  transitionTable,
} from './core/states.js';
export { deriveEffectKey, type EffectKeyFn } from './effects/effect-key.js';
export type { ReconcileRequest } from './effects/reconcile-checks.js';
export type { EffectCall, EffectOptions, LookupResult } from './effects/run-effect.js';
export type {
  AttemptEndOutcome,
  OperationRef,
  SluiceEventMap,
  SluiceEvents,
} from './observability/events.js';
export { DEFAULT_RETENTION, type RetentionPolicy } from './queue/maintenance.js';
export { type BackoffOptions, backoffCeiling, DEFAULT_BACKOFF, fullJitterDelay } from './retry/backoff.js';
export type { AttemptReport } from './runtime/attempt.js';
export { OperationContext } from './runtime/context.js';
export type { ExecOptions, ExecResult } from './runtime/helpers/exec.js';
export type { PgClientLike, PgPoolLike, PgQueryResult } from './runtime/helpers/pg-query.js';
export {
  DEFAULT_LIMITS,
  type InputOf,
  type Kind,
  type KindDefinition,
  type KindLimits,
  type ResolvedLimits,
  type ResultOf,
} from './runtime/kinds.js';
export { Worker, type WorkerEvents, type WorkerOptions } from './runtime/worker.js';
export {
  type CancelResult,
  type Include,
  type ListRequest,
  MAX_REDRIVE_MANY,
  type OperationReference,
  type RedriveManyResult,
  Sluice,
} from './sluice.js';
export type { MigrationStatus } from './store/migrations.js';
export { type PostgresOptions, type PostgresStore, postgresStore } from './store/postgres/index.js';
export { type SqliteOptions, type SqliteStore, sqliteStore } from './store/sqlite/index.js';
export type { Store } from './store/store.js';
export type { CancelOutcome, ReconcileEffect } from './store/types.js';
export {
  type KindSubmitRequest,
  MAX_SUBMIT_MANY,
  type SubmitManyRequests,
  type SubmitManyResult,
  type SubmitManyResults,
  type SubmitOptions,
  type SubmitRequest,
  type SubmitResult,
  type SubmitTransaction,
} from './submit/requests.js';
