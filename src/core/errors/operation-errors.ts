/**
 * @module core/errors/operation-errors
 * Errors about an operation's identity and state, raised by submit, cancel, redrive, reconcile.
 */
import { engineMade } from './engine-made.js';
import { hasCode, SluiceError } from './sluice-error.js';

/** The id was already accepted with different material inputs (another digest). Nothing changed. */
export class OperationConflict extends SluiceError {
  readonly tenant: string;
  readonly id: string;
  constructor(tenant: string, id: string) {
    super('idempotency-key-reused', `operation ${id} of tenant ${tenant} was accepted with different inputs`);
    this.tenant = tenant;
    this.id = id;
    // A refusal of a call: the engine's own, wherever it is made (core/errors/engine-made.ts).
    engineMade(this);
  }
}
export const isOperationConflict = (e: unknown): e is OperationConflict =>
  hasCode(e, 'idempotency-key-reused');

/** The id belonged to an operation that finished and was purged; it is never run again. */
export class OperationExpired extends SluiceError {
  constructor(tenant: string, id: string) {
    super(
      'operation-expired',
      `operation ${id} of tenant ${tenant} finished and its record was purged; use a new id to run it again`,
    );
    engineMade(this);
  }
}
export const isOperationExpired = (e: unknown): e is OperationExpired => hasCode(e, 'operation-expired');

export class OperationNotFound extends SluiceError {
  constructor(tenant: string, id: string) {
    super('operation-not-found', `no operation ${id} for tenant ${tenant}`);
  }
}
export const isOperationNotFound = (e: unknown): e is OperationNotFound => hasCode(e, 'operation-not-found');

/** An operator action that the operation's current state does not allow (e.g. redrive of a queued one). */
export class InvalidStateTransition extends SluiceError {
  readonly state: string;
  constructor(action: string, state: string, id: string) {
    super('operation-state-invalid', `cannot ${action} operation ${id} in state ${state}`);
    this.state = state;
  }
}
export const isInvalidStateTransition = (e: unknown): e is InvalidStateTransition =>
  hasCode(e, 'operation-state-invalid');
