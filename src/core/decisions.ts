/**
 * @module core/decisions
 * Pure rules that decide where an operation goes when an attempt ends without the worker's
 * word (its lease expired) and how a requested end is adjusted by what the journal knows.
 * Both drivers call these, so SQLite and PostgreSQL park operations identically.
 */
import type { ErrorRecord } from './errors/index.js';
import type { OperationState } from './states.js';

export interface ExpiredLeaseFacts {
  attempt: number;
  maxAttempts: number;
  /** Lease expiries including this one. */
  leaseExpiries: number;
  deadlineAt: number | null;
  cancelRequested: boolean;
  /** An effect is committed or may have happened: a cancel can no longer stop the operation. */
  pastNoReturn: boolean;
  /** Some effect's outcome is unknown (journal row still `pending`). */
  hasPendingEffect: boolean;
  now: number;
}

export interface Decision {
  to: OperationState;
  error: ErrorRecord | null;
}

/**
 * After a lease expiry: cancel if asked and no effect may have happened; a poison operation (too many
 * expiries) is dead-lettered; an operation past its deadline stops (waiting for reconciliation
 * if an effect's outcome is unknown); one out of attempts is dead-lettered; else redelivered.
 */
export function afterLeaseExpiry(facts: ExpiredLeaseFacts, maxLeaseExpiries: number): Decision {
  if (facts.cancelRequested && !facts.pastNoReturn) return { to: 'cancelled', error: null };
  if (facts.leaseExpiries >= maxLeaseExpiries) {
    return {
      to: 'dead',
      error: {
        code: 'crash-loop',
        message: `the lease expired ${facts.leaseExpiries} times: the operation keeps killing or hanging its worker`,
      },
    };
  }
  if (facts.deadlineAt !== null && facts.now >= facts.deadlineAt)
    return endAtDeadline(facts.hasPendingEffect);
  if (facts.attempt >= facts.maxAttempts) {
    return {
      to: 'dead',
      error: {
        code: 'attempts-exhausted',
        message: `all ${facts.maxAttempts} attempts ended without success`,
      },
    };
  }
  return { to: 'queued', error: null };
}

/** What the attempt row of an attempt whose lease expired holds as its error. */
export function leaseExpiredError(owner: string | null): ErrorRecord {
  return { code: 'lease-expired', message: `lease held by ${owner} expired` };
}

/** The end of an operation whose deadline passed: `failed`, unless an effect's outcome is unknown. */
export function endAtDeadline(hasPendingEffect: boolean): Decision {
  return hasPendingEffect
    ? {
        to: 'needs_reconciliation',
        error: {
          code: 'deadline-exceeded',
          message:
            'the deadline passed while an effect’s outcome was unknown: reconcile it with the provider',
        },
      }
    : { to: 'failed', error: { code: 'deadline-exceeded', message: 'the operation passed its deadline' } };
}

/**
 * A `failed` end is never reported while an effect's outcome is unknown: that would hide a
 * charge that may exist. It becomes `needs_reconciliation` instead.
 */
export function adjustFailure(requested: OperationState, hasPendingEffect: boolean): OperationState {
  return requested === 'failed' && hasPendingEffect ? 'needs_reconciliation' : requested;
}
