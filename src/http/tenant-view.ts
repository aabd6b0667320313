/**
 * @module http/tenant-view
 * What a tenant key is shown of an operation: all of it but the identities of the service's
 * workers. A worker's id is its `id` option (by default host name and process id) and a random tag
 * of its own, which say how the service is deployed (machine and pod names); they are the operator's to read, with an admin key, the
 * CLI or the logs. For a tenant key the lease's and the attempts' `worker` are null, and a
 * lease-expired error, whose message names the worker that held the lease, says so without it.
 */
import type { ErrorRecord } from '../core/errors/index.js';
import type { Operation } from '../core/operation.js';
import type { Principal } from './auth.js';

const LEASE_EXPIRED = 'the lease expired: its worker stopped renewing it (crashed, hung or cut off)';

/** An operation as the HTTP API serves it: the lease's worker may be hidden. */
export type OperationView = Omit<Operation, 'lease'> & {
  lease: { worker: string | null; expiresAt: string } | null;
};

/** An operation as `principal` may see it: unchanged for an admin key. */
export function operationFor(principal: Principal, op: Operation): OperationView {
  if (principal.kind === 'admin') return op;
  const view: OperationView = { ...op, error: withoutWorker(op.error) };
  if (op.lease) view.lease = { ...op.lease, worker: null };
  if (op.attempts)
    view.attempts = op.attempts.map((a) => ({ ...a, worker: null, error: withoutWorker(a.error) }));
  return view;
}

function withoutWorker(error: ErrorRecord | null): ErrorRecord | null {
  return error?.code === 'lease-expired' ? { ...error, message: LEASE_EXPIRED } : error;
}
