/**
 * @module store/created-row
 * The rows a store has just created, built from what the caller sent. A new operation holds
 * nothing the caller did not give except its `seq` and the store's clock, and a new `pending`
 * journal row nothing but the clock, so the drivers read back only those instead of the whole
 * row: on PostgreSQL a whole operation row is 25 columns described and parsed on every submit,
 * the largest part of the client's cost of a one-at-a-time submit after the round trip itself.
 * The conformance suite compares the rows built here with the ones read back by key.
 */
import type { EffectBeginParams, EffectRow, OperationRow, SubmitParams } from './types.js';

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

/** The `pending` journal row an effect's begin has just written at the store's time `now`. */
export function createdEffectRow(p: EffectBeginParams, now: number): EffectRow {
  return {
    tenant: p.lease.tenant,
    id: p.lease.id,
    name: p.name,
    key: p.key,
    state: 'pending',
    provider: p.provider ?? null,
    cost: p.cost === undefined || p.cost === null ? null : Math.round(p.cost),
    firstSentAt: now,
    lastSentAt: now,
    sends: 1,
    committedAt: null,
    result: null,
    reference: null,
    error: null,
    epoch: p.lease.epoch,
  };
}
