/**
 * @module core/errors/interruptions
 * Reasons an attempt's `ctx.signal` fires. Interruption is not failure: a shutdown or a lost
 * lease does not consume an attempt, a cancel ends the operation `cancelled`, and only the
 * attempt timeout and the overall deadline are failures of the attempt itself.
 */
import { hasCode, SluiceError } from './sluice-error.js';

/** This worker's lease is gone (expired and taken by another worker); its writes are refused. */
export class LeaseLost extends SluiceError {
  constructor(id: string) {
    super('lease-lost', `the lease on operation ${id} was lost; another worker may own it now`, {
      retryable: true,
    });
  }
}
export const isLeaseLost = (e: unknown): e is LeaseLost => hasCode(e, 'lease-lost');

/** The operation's overall deadline passed. It is not retried. */
export class DeadlineExceeded extends SluiceError {
  constructor(id: string) {
    super('deadline-exceeded', `operation ${id} passed its deadline`);
  }
}
export const isDeadlineExceeded = (e: unknown): e is DeadlineExceeded => hasCode(e, 'deadline-exceeded');

/**
 * One attempt ran longer than the kind's attempt timeout. Retried like any retryable failure.
 * `detail`, if given, says what else the timeout found (an effect still under way).
 */
export class AttemptTimeout extends SluiceError {
  constructor(id: string, timeoutMs: number, detail?: string) {
    super(
      'attempt-timeout',
      `attempt on operation ${id} exceeded its ${timeoutMs} ms timeout${detail ? `; ${detail}` : ''}`,
      { retryable: true },
    );
  }
}
export const isAttemptTimeout = (e: unknown): e is AttemptTimeout => hasCode(e, 'attempt-timeout');

/** A client asked to cancel, and no effect had begun. */
export class CancelRequested extends SluiceError {
  constructor(id: string) {
    super('cancel-requested', `operation ${id} was cancelled`);
  }
}
export const isCancelRequested = (e: unknown): e is CancelRequested => hasCode(e, 'cancel-requested');

/** The worker is stopping; the operation goes back to the queue without using an attempt. */
export class WorkerShutdown extends SluiceError {
  constructor() {
    super('worker-shutdown', 'the worker is shutting down', { retryable: true });
  }
}
export const isWorkerShutdown = (e: unknown): e is WorkerShutdown => hasCode(e, 'worker-shutdown');

/**
 * The attempt is over: what its handler left running (a helper call, an effect's call it did not
 * await) was stopped, and nothing new may start in its name (an effect, a temporary folder).
 */
export class AttemptEnded extends SluiceError {
  constructor() {
    super('attempt-ended', 'the attempt ended while this call was still running; it was stopped');
  }
}
export const isAttemptEnded = (e: unknown): e is AttemptEnded => hasCode(e, 'attempt-ended');
