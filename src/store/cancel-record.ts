/**
 * @module store/cancel-record
 * When a cancel goes in an operation's history: when it changed something. A cancel repeated
 * (the same answer, already marked), or of an operation that had ended, adds no event: a tenant
 * calling cancel in a loop could otherwise grow one operation's history without bound, and the
 * history is read whole.
 */
import type { CancelOutcome } from './types.js';

export function isNewCancel(op: { state: unknown; cancel?: unknown }, outcome: CancelOutcome): boolean {
  return (op.state === 'queued' || op.state === 'running') && op.cancel !== outcome;
}
