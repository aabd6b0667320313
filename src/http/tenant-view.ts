/**
 * @module http/tenant-view
 * What a tenant key is shown of an operation: all of it but what describes the service from the
 * inside. An admin key, the CLI and the logs see everything; for a tenant key:
 *
 * - The service's workers. A worker's id is its `id` option (by default host name and process id)
 *   and a random tag of its own, which say how the service is deployed (machine and pod names):
 *   the lease's and the attempts' `worker` are null, and a lease-expired error, whose message
 *   names the worker that held the lease, says so without it.
 * - The text of errors nobody wrote for the client. An `unclassified-error` is whatever a handler
 *   let escape (`ENOENT: … open '/srv/payments/…'`, a socket's address), a `store-*` error a
 *   database's message (`relation "billing_internal.ledger_v2" does not exist`): their message is
 *   a fixed sentence and their `details` are left out, the code kept. The same rule reaches them
 *   where other records carry them: an `attempts-exhausted` message and every `details.lastError`,
 *   each attempt's and each effect's error, an event's `detail.previousError`. An error a handler
 *   raised on purpose with a code of its own (`Permanent('card-declined', …)`) is meant for the
 *   client and shown as it is, as are Sluice's own codes, whose messages Sluice writes. (The HTTP
 *   API's own 5xx answers follow the same rule: a database message is logged, never sent.)
 * - Who acted. An event's `by` is a person or a key slot inside the service (an operator's email,
 *   a login, `admin#2`), theirs to audit; the tenant is shown that an operator acted (`operator`)
 *   and why (`reason`), and its own keys' actions as its own (`tenant:<tenant>`).
 */
import { type ErrorRecord, STORE_ERROR_CODES } from '../core/errors/index.js';
import type { EventView, Operation } from '../core/operation.js';
import type { Principal } from './auth.js';

const LEASE_EXPIRED = 'the lease expired: its worker stopped renewing it (crashed, hung or cut off)';
export const UNCLASSIFIED_MESSAGE =
  "the handler failed with an error it did not classify; the service's operators can read its message";
export const STORE_MESSAGE = "a database call failed; the service's operators can read its message";
/** What a tenant reads as `by` of an event it did not cause. */
export const OPERATOR = 'operator';

const EXHAUSTED = /^(all \d+ attempts failed; last: )/;

/** An operation as the HTTP API serves it: the lease's worker may be hidden. */
export type OperationView = Omit<Operation, 'lease'> & {
  lease: { worker: string | null; expiresAt: string } | null;
};

/** An operation as `principal` may see it: unchanged for an admin key. */
export function operationFor(principal: Principal, op: Operation): OperationView {
  if (principal.kind === 'admin') return op;
  const view: OperationView = { ...op, error: errorFor(op.error) };
  if (op.lease) view.lease = { ...op.lease, worker: null };
  if (op.attempts) view.attempts = op.attempts.map((a) => ({ ...a, worker: null, error: errorFor(a.error) }));
  if (op.effects) view.effects = op.effects.map((e) => ({ ...e, error: errorFor(e.error) }));
  if (op.events) view.events = op.events.map((e) => eventFor(principal.id, e));
  return view;
}

function eventFor(self: string, event: EventView): EventView {
  const by = event.by === self ? event.by : OPERATOR;
  const detail = event.detail as { previousError?: unknown } | null;
  if (detail === null || typeof detail !== 'object' || !isRecord(detail.previousError))
    return { ...event, by };
  return { ...event, by, detail: { ...detail, previousError: errorFor(detail.previousError) } };
}

/** An error record as a tenant key reads it (see the module header). */
export function errorFor(error: ErrorRecord | null): ErrorRecord | null {
  if (error === null) return null;
  if (error.code === 'lease-expired') return { ...error, message: LEASE_EXPIRED };
  if (error.code === 'unclassified-error' || STORE_ERROR_CODES.has(error.code)) {
    const { details: _hidden, ...kept } = error;
    return { ...kept, message: error.code === 'unclassified-error' ? UNCLASSIFIED_MESSAGE : STORE_MESSAGE };
  }
  const details = error.details as { lastError?: unknown } | undefined;
  if (details === null || typeof details !== 'object' || !isRecord(details.lastError)) return error;
  const last = errorFor(details.lastError)!;
  if (last === details.lastError) return error;
  const out: ErrorRecord = { ...error, details: { ...details, lastError: last } };
  // The message repeats the last error's; rebuilt from the shown one, or left without it.
  if (error.code === 'attempts-exhausted') {
    const head = EXHAUSTED.exec(error.message)?.[1] ?? 'all attempts failed; last: ';
    out.message = head + last.message;
  }
  return out;
}

function isRecord(value: unknown): value is ErrorRecord {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as ErrorRecord).code === 'string' &&
    typeof (value as ErrorRecord).message === 'string'
  );
}
