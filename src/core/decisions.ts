/**
 * @module core/decisions
 * Pure rules that decide where an operation goes when an attempt ends without the worker's
 * word (its lease expired) and how a requested end is adjusted by what the journal knows.
 * Both drivers call these, so SQLite and PostgreSQL park operations identically.
 */
import { type ErrorRecord, MAX_ERROR_DETAILS_BYTES, MAX_MESSAGE_CHARS } from './errors/index.js';
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
  /** The names of the operation's effects that happened (journal rows `committed`). */
  effectsHappened?: readonly string[];
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
  const decision = expiryDecision(facts, maxLeaseExpiries);
  return decision.error && (decision.to === 'failed' || decision.to === 'dead')
    ? { to: decision.to, error: notingEffectsHappened(decision.error, facts.effectsHappened ?? []) }
    : decision;
}

function expiryDecision(facts: ExpiredLeaseFacts, maxLeaseExpiries: number): Decision {
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

/** The most effect names an error's message lists; `details.effectsHappened` has them all. */
const NAMES_IN_MESSAGE = 5;

/**
 * An operation that ends `failed` or `dead` after some of its effects happened says which: a charge
 * that went through before a deadline, or a permanent error, must not read as if nothing had
 * happened, since a new operation for the same work would charge again (its key is another). The
 * names go in `details.effectsHappened` (beside the details an object already holds) and in the
 * message; the journal has the rest (result, reference). Without any, the record is returned as it is.
 */
export function notingEffectsHappened(error: ErrorRecord, names: readonly string[]): ErrorRecord {
  if (names.length === 0) return error;
  const shown = names.slice(0, NAMES_IN_MESSAGE).join(', ');
  const more = names.length > NAMES_IN_MESSAGE ? ` and ${names.length - NAMES_IN_MESSAGE} more` : '';
  const note = ` (after ${names.length === 1 ? 'an effect' : 'effects'} that happened: ${shown}${more})`;
  const held = error.details;
  const happened = { effectsHappened: [...names] };
  let details: unknown =
    held === undefined || held === null
      ? happened
      : typeof held === 'object' && !Array.isArray(held)
        ? { ...(held as Record<string, unknown>), ...happened }
        : { detail: held, ...happened };
  // Kept within the bounds every record keeps (core/errors/sluice-error.ts).
  if (Buffer.byteLength(JSON.stringify(details)) > MAX_ERROR_DETAILS_BYTES)
    details = { ...happened, omitted: "the error's own details, to keep the record within its size" };
  return {
    ...error,
    message: error.message.slice(0, Math.max(0, MAX_MESSAGE_CHARS - note.length)) + note,
    details,
  };
}
