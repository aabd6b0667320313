/**
 * @module core/errors/capacity-errors
 * Admission refusals and budget exhaustion: the service is protecting itself or a paid
 * provider. Nothing was stored; the client may retry the same id after `retryAfterMs`.
 */
import { hasCode, SluiceError } from './sluice-error.js';

export type CapacityReason = 'tenant-queue-full' | 'class-queue-full';

export class CapacityExceeded extends SluiceError {
  readonly reason: CapacityReason;
  readonly retryAfterMs: number;
  constructor(reason: CapacityReason, retryAfterMs: number, message: string) {
    super(reason, message, { retryable: true });
    this.reason = reason;
    this.retryAfterMs = retryAfterMs;
  }
  get details(): unknown {
    return { retryAfterMs: this.retryAfterMs };
  }
}
export const isCapacityExceeded = (e: unknown): e is CapacityExceeded =>
  hasCode(e, 'tenant-queue-full') || hasCode(e, 'class-queue-full');

/** A helper's wait for an operation's state ran out of time. */
export class WaitTimeout extends SluiceError {
  constructor(id: string, timeoutMs: number) {
    super('wait-timeout', `operation ${id} did not reach the awaited state within ${timeoutMs} ms`, {
      retryable: true,
    });
  }
}
export const isWaitTimeout = (e: unknown): e is WaitTimeout => hasCode(e, 'wait-timeout');

/**
 * One operation went over a per-operation limit (temporary storage, provider calls). The work is
 * stopped, not merely reported: retrying the same input would go over again, so it is permanent.
 */
export class OperationLimitExceeded extends SluiceError {
  readonly limit: 'temp-bytes' | 'provider-calls';
  constructor(limit: 'temp-bytes' | 'provider-calls', message: string) {
    super(limit === 'temp-bytes' ? 'temp-limit-exceeded' : 'provider-call-limit-exceeded', message);
    this.limit = limit;
  }
}
export const isOperationLimitExceeded = (e: unknown): e is OperationLimitExceeded =>
  hasCode(e, 'temp-limit-exceeded') || hasCode(e, 'provider-call-limit-exceeded');
