/**
 * @module store/created-row
 * The row of an operation a submit has just created, built from what the submit sent. A new
 * operation holds nothing the caller did not give except its `seq` and the store's clock, so the
 * drivers read back only those (`RETURNING seq`, the store's `now`) instead of the whole row:
 * on PostgreSQL a whole row is 25 columns described and parsed on every submit, the largest part
 * of the client's cost of a one-at-a-time submit after the round trip itself. The conformance
 * suite compares the row built here with the one read back by key.
 */
import type { OperationRow, SubmitParams } from './types.js';

/** What the store decided: the new row's `seq` and its times (epoch milliseconds). */
export interface CreatedKeys {
  seq: number;
  createdAt: number;
  runAfter: number;
  deadlineAt: number | null;
}

export function createdRow(p: SubmitParams, k: CreatedKeys): OperationRow {
  return {
    seq: k.seq,
    tenant: p.tenant,
    id: p.id,
    kind: p.kind,
    class: p.class,
    digest: p.digest,
    // A copy of the stored text's value, as a row read back would hold: never the caller's object.
    input: JSON.parse(p.inputJson),
    state: 'queued',
    attempt: 0,
    maxAttempts: p.maxAttempts,
    epoch: 0,
    runAfter: k.runAfter,
    deadlineAt: k.deadlineAt,
    createdAt: k.createdAt,
    updatedAt: k.createdAt,
    startedAt: null,
    finishedAt: null,
    leaseOwner: null,
    leaseExpiresAt: null,
    leaseExpiries: 0,
    effectStartedAt: null,
    cancel: null,
    cancelRequestedAt: null,
    result: null,
    error: null,
  };
}
