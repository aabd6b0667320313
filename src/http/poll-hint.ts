/**
 * @module http/poll-hint
 * When a client polling an operation should look again: the `Retry-After` of a `202` to a submit
 * and of a `GET` of an operation that has not ended (RFC 9110 §10.2.3; the status-monitor pattern
 * of long-running operations). An operation due later (a `delayMs`, a retry's back-off, a
 * deferral to a budget window) is worth a look when it is due; one waiting or running now, in a
 * second. Advice only: an answer without it is an operation that has ended.
 */
import type { Operation } from '../core/operation.js';
import { isTerminal } from '../core/states.js';

/** Seconds until an operation not yet ended is worth another look; undefined once it has ended. */
export function pollAfterSeconds(
  op: Pick<Operation, 'state' | 'runAfter'>,
  nowMs: number,
): number | undefined {
  if (isTerminal(op.state)) return undefined;
  const dueInMs = op.state === 'queued' ? Date.parse(op.runAfter) - nowMs : 0;
  return Math.max(1, Math.ceil(dueInMs / 1000));
}
