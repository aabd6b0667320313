/**
 * @module submit/requests
 * What a submit takes and answers, as the library's callers type it: a request by kind name, or
 * by the kind `define` returned, whose schema then types the input at compile time and whose
 * handler types the operation answered.
 */
import type BetterSqlite3 from 'better-sqlite3';
import type pg from 'pg';
import type { SluiceError } from '../core/errors/index.js';
import type { Operation } from '../core/operation.js';
import type { Kind } from '../runtime/kinds.js';

export interface SubmitRequest {
  tenant: string;
  /** The client's idempotency key for this operation. */
  id: string;
  kind: string;
  input: unknown;
  /** Shorter overall deadline than the kind's, in milliseconds from acceptance. */
  deadlineMs?: number;
  /** Do not start before this many milliseconds from acceptance. */
  delayMs?: number;
}

/**
 * A submit of a kind `define` returned: its input is checked at compile time against the kind's
 * schema, and the operation answered carries the handler's result type.
 */
export interface KindSubmitRequest<Input, Result> extends Omit<SubmitRequest, 'kind' | 'input'> {
  kind: Kind<Input, Result>;
  input: NoInfer<Input>;
}

export type AnySubmitRequest = SubmitRequest | KindSubmitRequest<unknown, unknown>;

/**
 * The requests of a `submitMany`, each typed as `submit` types it: one given a kind `define`
 * returned has its input checked against that kind's schema, in an array literal or one a `map`
 * made alike.
 */
export type SubmitManyRequests<Requests extends readonly AnySubmitRequest[]> = Requests & {
  [K in keyof Requests]: Requests[K] extends { kind: infer Given } ? ByKind<Given> : SubmitRequest;
};
/** Distributed over a `kind` that is a union (`charge | 'charge'`, one array's elements merged). */
type ByKind<Given> =
  Given extends Kind<infer Input, infer Result> ? KindSubmitRequest<Input, Result> : SubmitRequest;

/** A request's kind: the name given, or the name of the kind given (one of another engine's too). */
export const kindNameOf = (kind: unknown): string | undefined => {
  if (typeof kind === 'string') return kind;
  const name = typeof kind === 'object' && kind !== null ? (kind as Partial<Kind>).name : undefined;
  return typeof name === 'string' ? name : undefined;
};

/**
 * A transaction of your own for a submit to join: a `pg` client (a `Client`, or a `PoolClient`
 * from `pool.connect()`, not the pool) after `BEGIN` (awaited), or a better-sqlite3 `Database` of your own
 * after `BEGIN IMMEDIATE`. One that is not inside a transaction is refused (`invalid-argument`):
 * its submit would commit whatever the transaction you meant did.
 */
export type SubmitTransaction = pg.ClientBase | BetterSqlite3.Database;

export interface SubmitOptions {
  /**
   * Submit inside your own open transaction: the operation is accepted if and only if it commits
   * (a `pg` client after `BEGIN` for PostgreSQL; for SQLite, a better-sqlite3 `Database` of your
   * own on the same file, not the store's, after `BEGIN IMMEDIATE`: a transaction begun deferred
   * that has read cannot wait for another writer and fails `store-serialization`). The outbox
   * pattern, without an outbox.
   */
  tx?: SubmitTransaction;
}

export interface SubmitResult<Input = unknown, Result = unknown> {
  operation: Operation<Input, Result>;
  /** False when the id was already accepted with the same input: this is that operation. */
  created: boolean;
}

/** The most requests one `submitMany` call takes. */
export const MAX_SUBMIT_MANY = 1000;

/** One request's answer in `submitMany`: its result, or the error `submit` would have thrown. */
export type SubmitManyResult<Input = unknown, Result = unknown> =
  | ({ ok: true } & SubmitResult<Input, Result>)
  | { ok: false; error: SluiceError };

/** The answers of a `submitMany`, each typed by its request's kind as `submit`'s answer is. */
export type SubmitManyResults<Requests extends readonly unknown[]> = {
  -readonly [K in keyof Requests]: Requests[K] extends { kind: infer Given }
    ? AnswerOf<Given>
    : SubmitManyResult;
};
type AnswerOf<Given> =
  Given extends Kind<infer Input, infer Result> ? SubmitManyResult<Input, Result> : SubmitManyResult;
