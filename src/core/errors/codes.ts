/**
 * @module core/errors/codes
 * Every code Sluice's own errors and operation records carry, in docs/errors.md's order: what a
 * `SluiceError`'s `code` and an operation's `error.code` may be, besides the codes a handler
 * gives its own errors (`Permanent(message, { code })`). The HTTP layer maps each to a status
 * (http/problem.ts), and the compiler checks that it maps every one and no other.
 */
export const SLUICE_ERROR_CODES = [
  'idempotency-key-reused',
  'operation-expired',
  'operation-not-found',
  'operation-state-invalid',
  'input-invalid',
  'input-not-json',
  'input-too-large',
  'kind-unknown',
  'invalid-argument',
  'tenant-queue-full',
  'class-queue-full',
  'budget-exhausted',
  'wait-timeout',
  'store-unavailable',
  'store-busy',
  'store-serialization',
  'store-statement-timeout',
  'store-unique-violation',
  'store-schema-newer',
  'store-not-migrated',
  'store-closed',
  'store-unknown',
  'permanent-failure',
  'retryable-failure',
  'ambiguous-outcome',
  'unclassified-error',
  'effect-key-conflict',
  'effect-outcome-unknown',
  'attempts-exhausted',
  'crash-loop',
  'deadline-exceeded',
  'retry-budget-exhausted',
  'temp-limit-exceeded',
  'provider-call-limit-exceeded',
  'attempt-timeout',
  'attempt-ended',
  'lease-lost',
  'cancel-requested',
  'worker-shutdown',
  'lease-expired',
  'result-not-json',
  'result-too-large',
  'effect-result-not-json',
  'effect-result-too-large',
  'lookup-answer-invalid',
  'reconciled-failed',
  'effect-failed',
] as const;

/** A code of Sluice's own (`SLUICE_ERROR_CODES`). */
export type SluiceErrorCode = (typeof SLUICE_ERROR_CODES)[number];
