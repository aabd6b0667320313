/**
 * @module sluice
 * The engine: define kinds, submit operations with identity, inspect, cancel, redrive and
 * reconcile them, and run workers. One `Sluice` per process and store; many processes may share
 * a store.
 */
import { EventEmitter } from 'node:events';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import type BetterSqlite3 from 'better-sqlite3';
import type pg from 'pg';
import pino, { type Logger } from 'pino';
import { type ProviderBudgets, validateBudgets } from './admission/budgets.js';
import { Admission, type AdmissionConfig } from './admission/limits.js';
import { RetryAfterEstimator } from './admission/retry-after.js';
import { DEFAULT_RETRY_BUDGET, type RetryBudgetConfig } from './admission/retry-budget.js';
import { logLevel } from './config/inputs.js';
import { bounded, knownKeys, MAX_DURATION_MS, MAX_REQUEST_MS, MAX_TIMER_MS } from './core/bounds.js';
import { assertPlainJson, canonicalJson, digestOfCanonical } from './core/digest.js';
import {
  CancelRequested,
  CapacityExceeded,
  InputTooLarge,
  InvalidArgument,
  isSluiceError,
  isStoreError,
  OperationConflict,
  OperationExpired,
  OperationNotFound,
  type SluiceError,
  StoreError,
  UnknownKind,
  WaitTimeout,
} from './core/errors/index.js';
import { assertOperationId, assertTenant } from './core/identity.js';
import { ListCursors } from './core/list-cursor.js';
import { type Operation, toOperation } from './core/operation.js';
import { isTerminal, OPERATION_STATES, type OperationState } from './core/states.js';
import { isStoredText } from './core/stored-text.js';
import {
  deriveEffectKey,
  type EffectKeyFn,
  MAX_KEY_NAMESPACE_CHARS,
  namespacedEffectKey,
} from './effects/effect-key.js';
import { MAX_REFERENCE_CHARS } from './effects/run-effect.js';
import { createEvents, type SluiceEvents } from './observability/events.js';
import { DEFAULT_RETENTION, purgeAll, type RetentionPolicy, rescueAll } from './queue/maintenance.js';
import { Wakeup } from './queue/wakeup.js';
import { operationKey } from './runtime/attempt.js';
import { Batcher } from './runtime/batcher.js';
import { KIND_NAME, type Kind, type KindDefinition, resolveKind, validateInput } from './runtime/kinds.js';
import { Worker, type WorkerOptions } from './runtime/worker.js';
import type { Store } from './store/store.js';
import type {
  CancelOutcome,
  ReconcileEffect,
  ReconcileParams,
  SubmitOutcome,
  SubmitParams,
} from './store/types.js';

export interface SluiceOptions {
  store: Store;
  /** pino logger. Default: warnings and errors to stderr (`SLUICE_LOG_LEVEL` overrides). */
  logger?: Logger;
  /** Lease expiries after which an operation is a poison message (dead, `crash-loop`). Default 3. */
  maxLeaseExpiries?: number;
  /** How long terminal operations and tombstones are kept. Default 7 and 30 days. */
  retention?: Partial<RetentionPolicy>;
  /** The provider idempotency key of an effect. Change it only if you know why: it must be stable. */
  effectKey?: EffectKeyFn;
  /**
   * Derives every effect key from this too (1–200 printable characters): for stores whose
   * effects reach one provider account (staging and production on one account, two
   * applications), which would otherwise derive one key for two operations of one tenant and
   * id. An effect keeps the key its journal row was written with: a namespace set or changed
   * later applies to effects not begun yet. Default none (keys as they always were).
   */
  effectKeyNamespace?: string;
  /** Source of randomness for back-off jitter (tests). */
  random?: () => number;
  /** Workload classes: global queue bound and default per-tenant limits (admission/limits.ts). */
  classes?: AdmissionConfig['classes'];
  /** Per-tenant limits by class (`'*'` for all classes): running and waiting caps, weight. */
  tenants?: AdmissionConfig['tenants'];
  /** Spend budgets and call-rate caps per paid provider (admission/budgets.ts). */
  providers?: ProviderBudgets;
  /**
   * The service-wide retry budget, across all processes: retries at most `ratio` of first
   * attempts over `windowMs`, plus `floor`. Default `{ ratio: 0.1, floor: 10, windowMs: 60_000 }`;
   * `false` turns it off.
   */
  retryBudget?: Partial<RetryBudgetConfig> | false;
}

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

type AnySubmitRequest = SubmitRequest | KindSubmitRequest<unknown, unknown>;

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
const kindNameOf = (kind: unknown): string | undefined => {
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

/** A request checked and ready for the store. */
interface Prepared {
  params: SubmitParams;
  /** The tenant's waiting cap it was sent with, to estimate a retry after a refusal. */
  tenantMaxWaiting: number | null;
}

export interface ListRequest {
  tenant?: string;
  state?: OperationState;
  kind?: string;
  /** Opaque cursor from a previous page. */
  cursor?: string;
  /** 1–500. Default 50. */
  limit?: number;
}

export interface CancelResult {
  operation: Operation;
  /**
   * `cancelled`: it will never run (or stopped before any effect). `requested`: it is running
   * and its signal fired; it ends cancelled unless it finishes first. `too_late`: an effect had
   * begun or it had ended; it reports its own result.
   */
  cancel: CancelOutcome;
}

export type Include = 'attempts' | 'effects' | 'events';

/**
 * What `get` and `wait` take: an operation's tenant and id, the operation a submit answered, or
 * the tenant and id with the kind `define` returned (`{ tenant, id, kind: charge }`), which types
 * the answer as that kind's, as a submit given the kind does. A kind given is checked: an
 * operation of another kind is refused rather than handed back under the wrong types.
 */
export type OperationReference<Input = unknown, Result = unknown> =
  | { tenant: string; id: string; kind?: Kind<Input, Result> | string }
  | Operation<Input, Result>;
const INCLUDES: readonly Include[] = ['attempts', 'effects', 'events'];

/**
 * What one page of a listing carries at most, about: its operations' inputs, results and errors
 * as stored, the last one included whole. A page of 500 operations at the largest input and
 * result a kind may allow would otherwise be read, held and sent as hundreds of megabytes.
 */
export const LIST_PAGE_BYTES = 1024 ** 2;

/**
 * @example
 * ```ts
 * import { Sluice, sqliteStore, Permanent } from 'sluice';
 * import { z } from 'zod';
 *
 * const sluice = new Sluice({ store: sqliteStore({ path: './data/sluice.db' }) });
 * await sluice.migrate();
 * sluice.define('charge', {
 *   input: z.object({ invoice: z.number().int(), amount_cents: z.number().int().positive() }),
 *   async run(input, ctx) {
 *     return ctx.effect('charge', { call: ({ key, signal }) => provider.charge(input, key, signal) });
 *   },
 * });
 * const worker = sluice.worker();
 * worker.start();
 * await sluice.submit({ tenant: 'north', id: 'O7', kind: 'charge', input: { invoice: 7, amount_cents: 5000 } });
 * ```
 */
export class Sluice {
  readonly store: Store;
  readonly log: Logger;
  /** What the engine tells observers (metrics, tests): see observability/events.ts. */
  readonly events: SluiceEvents = createEvents();
  private readonly kinds = new Map<string, Kind>();
  /** Workers made by this engine and not stopped. */
  private readonly workers = new Set<Worker>();
  private readonly wakeup = new Wakeup();
  private readonly changes = new EventEmitter();
  private readonly submitter: Batcher<SubmitParams, SubmitOutcome>;
  private readonly effectKey: EffectKeyFn;
  private readonly retention: RetentionPolicy;
  private readonly maxLeaseExpiries: number;
  private readonly random: () => number;
  private readonly admission: Admission;
  private readonly providers: ProviderBudgets;
  private readonly retryBudget: RetryBudgetConfig | false;
  private readonly retryAfter = new RetryAfterEstimator();
  /** The store's cursor key, read once (core/list-cursor.ts). */
  private cursors: Promise<ListCursors> | undefined;

  constructor(options: SluiceOptions) {
    // A misspelt option left unread was its default without a word (`logLevel` is the
    // `SLUICE_LOG_LEVEL` variable, or a `logger`); a missing store failed later, in `migrate`.
    const store: unknown = (options as Partial<SluiceOptions> | null | undefined)?.store;
    if (typeof store !== 'object' || store === null || typeof (store as Store).migrate !== 'function')
      throw new InvalidArgument(
        'new Sluice needs a store: { store: sqliteStore({ path }) } or { store: postgresStore({ connectionString }) }',
      );
    knownKeys('new Sluice options', options, SLUICE_OPTION_KEYS);
    this.store = options.store;
    this.log = options.logger ?? pino({ name: 'sluice', level: logLevel('warn') }, pino.destination(2));
    this.effectKey = effectKeyOf(options);
    this.retention = retentionOf(options.retention);
    this.maxLeaseExpiries = bounded('maxLeaseExpiries', options.maxLeaseExpiries, 3, {
      min: 1,
      max: 1000,
      integer: true,
    });
    this.random = options.random ?? Math.random;
    this.submitter = new Batcher((items) => this.store.operationSubmitMany(items));
    this.admission = new Admission({ classes: options.classes, tenants: options.tenants });
    this.providers = options.providers ?? {};
    validateBudgets(this.providers);
    this.retryBudget = options.retryBudget === false ? false : retryBudgetOf(options.retryBudget);
    this.changes.setMaxListeners(0);
  }

  /** Applies the store's pending migrations. */
  migrate(): Promise<void> {
    return this.store.migrate();
  }

  /**
   * Defines an operation kind. Define every kind before `worker()`: a kind of a class that a
   * worker of this engine was made without is refused, since no worker would ever run it.
   *
   * @throws InvalidArgument a name, key, limit or handler that is not valid, or that class
   */
  define<Schema extends StandardSchemaV1, Result>(
    name: string,
    definition: KindDefinition<Schema, Result>,
  ): Kind<StandardSchemaV1.InferInput<Schema>, Awaited<Result>> {
    if (this.kinds.has(name)) throw new InvalidArgument(`kind ${name} is already defined`);
    const kind = resolveKind(name, definition as unknown as KindDefinition);
    // A worker claims only for the classes it was made with: the kind's operations would wait
    // for ever. A class a worker's `slots` name, even with 0 slots, is one it was told about.
    for (const worker of this.workers)
      if (!worker.classes.has(kind.class))
        throw new InvalidArgument(
          `kind ${name}: worker ${worker.id} was made before any kind of class ${kind.class} was defined ` +
            `and has no slots for it: define every kind before sluice.worker(), or name the class in its slots`,
        );
    this.kinds.set(name, kind);
    return kind as Kind<StandardSchemaV1.InferInput<Schema>, Awaited<Result>>;
  }

  kind(name: string): Kind | undefined {
    return this.kinds.get(name);
  }

  /** Every defined kind, in definition order (the HTTP API's body limit and OpenAPI document). */
  definedKinds(): Kind[] {
    return [...this.kinds.values()];
  }

  /**
   * Accepts an operation durably, or answers with the one already accepted under the id.
   * Checks run cheapest first and before anything is stored: identity, kind, JSON form, size,
   * schema; then, in the store's transaction, the existing record, tombstones and capacity.
   *
   * With `{ tx }`, runs inside your open transaction (see `SubmitOptions`). Given the kind
   * `define` returned rather than its name, the input is typed by its schema and the operation
   * answered by its handler's result.
   *
   * @throws OperationConflict the id was accepted with another input (nothing changed)
   * @throws OperationExpired the id belonged to an operation that was purged
   * @throws InputTooLarge, InputInvalid, InputNotJson, UnknownKind, InvalidArgument, CapacityExceeded
   */
  // By name first: TypeScript reports a call that fits neither against the last, and a typed
  // kind's wrong input should read as that, not as "a Kind is not a string".
  submit(request: SubmitRequest, options?: SubmitOptions): Promise<SubmitResult>;
  submit<Input, Result>(
    request: KindSubmitRequest<Input, Result>,
    options?: SubmitOptions,
  ): Promise<SubmitResult<Input, Result>>;
  async submit(request: AnySubmitRequest, options: SubmitOptions = {}): Promise<SubmitResult> {
    let result: SubmitResult;
    try {
      const prepared = await this.prepare(request);
      // Inside the caller's transaction the submit cannot join a batch: it commits with theirs.
      const outcome =
        options.tx === undefined
          ? await this.submitter.add(prepared.params)
          : (await this.store.operationSubmitMany([prepared.params], { tx: options.tx }))[0]!;
      result = this.answer(outcome, prepared);
    } catch (error) {
      this.noteRefusal(request, error);
      throw error;
    }
    this.noteAccepted(result);
    return result;
  }

  /**
   * Accepts many operations in one store call: one transaction, one commit (with `{ tx }`, inside
   * yours). Each request is checked as `submit` checks it and answered in its place: a refusal
   * (`ok: false`, with the error `submit` would throw) does not refuse the others. The call
   * itself rejects only when it cannot be made (not an array, more than `MAX_SUBMIT_MANY`
   * requests: `invalid-argument`), when a kind's input schema throws instead of answering, or when
   * the store fails; then nothing of it was accepted unless the store committed before failing:
   * send the same requests again; their ids make that safe.
   */
  async submitMany<Requests extends readonly AnySubmitRequest[]>(
    requests: SubmitManyRequests<Requests>,
    options: SubmitOptions = {},
  ): Promise<SubmitManyResults<Requests>> {
    if (!Array.isArray(requests)) throw new InvalidArgument('requests must be an array');
    if (requests.length > MAX_SUBMIT_MANY) {
      throw new InvalidArgument(`at most ${MAX_SUBMIT_MANY} requests in one call, got ${requests.length}`);
    }
    const results: SubmitManyResult[] = new Array(requests.length);
    const checked: Array<{ at: number; prepared: Prepared }> = [];
    for (const [at, request] of requests.entries()) {
      try {
        checked.push({ at, prepared: await this.prepare(request) });
      } catch (error) {
        results[at] = this.refusal(request, error);
      }
    }
    if (checked.length > 0) {
      const outcomes = await this.store.operationSubmitMany(
        checked.map((c) => c.prepared.params),
        options.tx === undefined ? {} : { tx: options.tx },
      );
      for (const [k, { at, prepared }] of checked.entries()) {
        try {
          const result = this.answer(outcomes[k]!, prepared);
          this.noteAccepted(result);
          results[at] = { ok: true, ...result };
        } catch (error) {
          results[at] = this.refusal(requests[at]!, error);
        }
      }
    }
    return results as SubmitManyResults<Requests>;
  }

  /** Everything a submit checks before the store, cheapest first: the store's item, or a throw. */
  private async prepare(request: AnySubmitRequest): Promise<Prepared> {
    if (typeof request !== 'object' || request === null) {
      throw new InvalidArgument('a submit request must be an object: { tenant, id, kind, input }');
    }
    const { tenant, id } = request;
    assertTenant(tenant);
    assertOperationId(id);
    const name = kindNameOf(request.kind);
    const kind = name === undefined ? undefined : this.kinds.get(name);
    if (!kind) throw new UnknownKind(name ?? String(request.kind));
    assertPlainJson(request.input);
    const inputJson = canonicalJson(request.input);
    const bytes = Buffer.byteLength(inputJson);
    if (bytes > kind.limits.maxInputBytes) throw new InputTooLarge(kind.limits.maxInputBytes, bytes);
    await validateInput(kind, request.input);
    let deadlineMs = kind.limits.deadlineMs;
    if (request.deadlineMs !== undefined) {
      // As the HTTP API bounds them (1 ms to 365 days): a time the stores can keep.
      const asked = bounded('deadlineMs', request.deadlineMs, 0, {
        min: 1,
        max: MAX_REQUEST_MS,
        integer: true,
      });
      deadlineMs = deadlineMs === null ? asked : Math.min(deadlineMs, asked);
    }
    bounded('delayMs', request.delayMs, 0, { min: 0, max: MAX_REQUEST_MS, integer: true });
    // Accepted, it would hold a waiting place until it failed `deadline-exceeded` unstarted.
    if (request.delayMs !== undefined && deadlineMs !== null && request.delayMs >= deadlineMs) {
      throw new InvalidArgument(
        `delayMs ${request.delayMs} starts the operation at or after its deadline, ${deadlineMs} ms after acceptance`,
      );
    }
    const tenantLimits = this.admission.tenantLimits(kind.class, tenant);
    const params: SubmitParams = {
      tenant,
      id,
      kind: kind.name,
      class: kind.class,
      digest: digestOfCanonical(kind.name, inputJson),
      inputJson,
      maxAttempts: kind.limits.maxAttempts,
      deadlineMs,
      delayMs: request.delayMs,
      limits: { ...tenantLimits, maxQueued: this.admission.maxQueued(kind.class) },
    };
    return { params, tenantMaxWaiting: tenantLimits.maxWaiting };
  }

  /** The store's answer to one item, as the caller sees it: the result, or the refusal thrown. */
  private answer(outcome: SubmitOutcome, { params, tenantMaxWaiting }: Prepared): SubmitResult {
    const { tenant, id } = params;
    switch (outcome.status) {
      case 'created':
        this.wakeup.notify(params.class);
        this.changed(tenant, id);
        return { operation: toOperation(outcome.row), created: true };
      case 'existing':
        return { operation: toOperation(outcome.row), created: false };
      case 'conflict':
        throw new OperationConflict(tenant, id);
      case 'expired':
        throw new OperationExpired(tenant, id);
      case 'rejected': {
        const cap =
          outcome.reason === 'tenant-queue-full' ? tenantMaxWaiting : this.admission.maxQueued(params.class);
        const retryAfterMs = this.retryAfter.estimate(
          params.class,
          outcome.waiting - (cap ?? 0) + 1,
          outcome.running,
          outcome.dueInMs,
        );
        throw new CapacityExceeded(
          outcome.reason,
          retryAfterMs,
          `${outcome.reason === 'tenant-queue-full' ? `tenant ${tenant}` : `class ${params.class}`} has ${outcome.waiting} ` +
            `operations waiting, the most it may; retry after ${retryAfterMs / 1000} s`,
        );
      }
    }
  }

  private noteAccepted({ operation: op, created }: SubmitResult): void {
    this.events.emit('submitted', { tenant: op.tenant, id: op.id, kind: op.kind, class: op.class, created });
  }

  private noteRefusal(request: AnySubmitRequest, error: unknown): void {
    // A store that failed refused nothing (it may even have committed): not an admission refusal,
    // which alerts would read as tenants being turned away during an outage.
    if (!isSluiceError(error) || isStoreError(error)) return;
    const kind = (typeof request === 'object' && request !== null && kindNameOf(request.kind)) || '';
    this.events.emit('rejected', {
      tenant: typeof request?.tenant === 'string' ? request.tenant : '',
      kind,
      class: this.kinds.get(kind)?.class ?? null,
      reason: error.code,
    });
  }

  /** A request of `submitMany` refused in its place; anything but a Sluice error is a fault, thrown. */
  private refusal(request: AnySubmitRequest, error: unknown): SubmitManyResult {
    if (!isSluiceError(error)) throw error;
    this.noteRefusal(request, error);
    return { ok: false, error };
  }

  /** The operation, or undefined. `include` adds its attempt history, effects and operator events. */
  async get<Input = unknown, Result = unknown>(
    ref: OperationReference<Input, Result>,
    options: { include?: Include[] } = {},
  ): Promise<Operation<Input, Result> | undefined> {
    // A misspelt part (`'attempt'`) would come back without a word, as though it were empty.
    for (const part of options.include ?? [])
      if (!INCLUDES.includes(part))
        throw new InvalidArgument(`include takes ${INCLUDES.join(', ')}, not ${JSON.stringify(part)}`);
    const expected = kindNameOf(ref.kind);
    const row = await this.store.operationGet(ref);
    if (!row) return undefined;
    // The answer is typed by the kind the caller named: one of another kind would lie about it.
    if (expected !== undefined && row.kind !== expected)
      throw new InvalidArgument(
        `operation ${ref.id} of tenant ${ref.tenant} is of kind ${row.kind}, not ${expected}`,
      );
    const inc = new Set(options.include ?? []);
    const [attempts, effects, events] = await Promise.all([
      inc.has('attempts') ? this.store.attemptList(ref) : undefined,
      inc.has('effects') ? this.store.effectList(ref) : undefined,
      inc.has('events') ? this.store.eventList(ref) : undefined,
    ]);
    // The types are the ones of the kind whose submit answered `ref`, the same operation.
    return toOperation(row, { attempts, effects, events }) as Operation<Input, Result>;
  }

  /** Operations in acceptance order, filtered, one page at a time. */
  async list(request: ListRequest = {}): Promise<{ operations: Operation[]; nextCursor: string | null }> {
    const limit = request.limit ?? 50;
    if (!Number.isInteger(limit) || limit < 1 || limit > 500)
      throw new InvalidArgument('limit must be 1–500');
    if (request.state !== undefined && !OPERATION_STATES.includes(request.state)) {
      throw new InvalidArgument(`state must be one of ${OPERATION_STATES.join(', ')}`);
    }
    // No kind outside the names a kind may have exists; and PostgreSQL refuses text holding NUL.
    if (request.kind !== undefined && !KIND_NAME.test(request.kind)) {
      throw new InvalidArgument(`kind must match ${KIND_NAME}`);
    }
    const cursors = await this.listCursors();
    let after = 0;
    if (request.cursor !== undefined) {
      const seq = cursors.decode(request.cursor);
      if (seq === undefined) throw new InvalidArgument('cursor is not valid');
      after = seq;
    }
    const rows = await this.store.operationList({
      tenant: request.tenant,
      state: request.state,
      kind: request.kind,
      after,
      limit: limit + 1,
      maxBytes: LIST_PAGE_BYTES,
    });
    // The page ends at `limit` operations, or at the first that brings their inputs, results and
    // errors to LIST_PAGE_BYTES; a row past it says whether another page follows.
    let size = 0;
    let bytes = 0;
    while (size < limit && size < rows.length && bytes < LIST_PAGE_BYTES) bytes += rows[size++]!.listedBytes;
    const page = rows.slice(0, size);
    const last = page[page.length - 1];
    return {
      operations: page.map((r) => toOperation(r)),
      nextCursor: rows.length > size && last ? cursors.encode(last.seq) : null,
    };
  }

  private listCursors(): Promise<ListCursors> {
    this.cursors ??= (async () => {
      const key = await this.store.secret('cursor');
      if (key === undefined) throw new StoreError('unknown', 'the store keeps no cursor key: migrate it');
      return new ListCursors(key);
    })().catch((error: unknown) => {
      this.cursors = undefined; // asked again next time: the store may have been down
      throw error;
    });
    return this.cursors;
  }

  /**
   * Asks for cancellation. A queued operation is cancelled at once; a running one has its
   * signal fired and ends `cancelled` only if no effect began; otherwise it is too late and the
   * operation reports its own result. Undoing a committed effect is a separate operation.
   */
  async cancel(ref: { tenant: string; id: string }, options: { by?: string } = {}): Promise<CancelResult> {
    // Kept in the history, as a redrive's is: bounded alike.
    if (options.by !== undefined) assertRecordedText('by', options.by, 200);
    const out = await this.store.operationCancel({ ...ref, by: options.by });
    if (!out) throw new OperationNotFound(ref.tenant, ref.id);
    if (out.outcome === 'requested') {
      for (const w of this.workers)
        w.stops.get(operationKey(ref.tenant, ref.id))?.abort(new CancelRequested(ref.id));
    }
    if (out.ended) {
      const { row } = out;
      this.events.emit('cancelled', {
        tenant: row.tenant,
        id: row.id,
        kind: row.kind,
        class: row.class,
        endToEndMs: (row.finishedAt ?? row.updatedAt) - row.createdAt,
      });
    }
    this.changed(ref.tenant, ref.id);
    return { operation: toOperation(out.row), cancel: out.outcome };
  }

  /** Moves a dead operation back to the queue with a fresh attempt count; recorded with who and why. */
  async redrive(
    ref: { tenant: string; id: string },
    who: { by: string; reason: string },
  ): Promise<Operation> {
    assertRecorded(who);
    const row = await this.store.operationRedrive({ ...ref, ...who });
    this.wakeup.notify(row.class);
    this.changed(ref.tenant, ref.id);
    return toOperation(row);
  }

  /**
   * Resolves an operation waiting in `needs_reconciliation` with what a person or reconciler
   * established at the provider: each effect's outcome, then requeue (the handler runs again;
   * journaled effects return their results), or an end state.
   */
  async reconcile(
    ref: { tenant: string; id: string },
    resolution: {
      by: string;
      reason: string;
      effects?: ReconcileEffect[];
      resolution: 'requeue' | 'succeeded' | 'failed';
      result?: unknown;
    },
  ): Promise<Operation> {
    assertRecorded(resolution);
    // Checked here, not only by the HTTP API's schema: a library caller's typo ('comitted') read
    // as `absent` by the store would have the charge sent again.
    if (!RESOLUTIONS.includes(resolution.resolution))
      throw new InvalidArgument(
        `resolution must be one of ${RESOLUTIONS.join(', ')}, not ${String(resolution.resolution)}`,
      );
    if (resolution.result !== undefined) {
      if (resolution.resolution !== 'succeeded')
        throw new InvalidArgument(
          `a result is kept only when the resolution is succeeded, not ${resolution.resolution}`,
        );
      assertPlainJson(resolution.result);
    }
    const effects: unknown = resolution.effects ?? [];
    if (!Array.isArray(effects)) throw new InvalidArgument('effects must be an array');
    for (const effect of effects) assertReconcileEffect(effect);
    const op = await this.store.operationGet(ref);
    if (!op) throw new OperationNotFound(ref.tenant, ref.id);
    // The effects of an operation in another state are not looked at: the store refuses it
    // (operation-state-invalid) as it would without them.
    if (op.state === 'needs_reconciliation') {
      const journal = await this.store.effectList(ref);
      // A mistyped name would be recorded as established while the real effect stayed pending.
      const known = new Set(journal.map((e) => e.name));
      const named = new Set<string>();
      for (const effect of effects as ReconcileEffect[]) {
        if (named.has(effect.name)) throw new InvalidArgument(`effect ${effect.name} is named twice`);
        named.add(effect.name);
        if (!known.has(effect.name)) {
          const list = [...known].join(', ') || 'none';
          throw new InvalidArgument(
            `operation ${ref.id} has no effect ${effect.name} (its effects: ${list})`,
          );
        }
      }
      // Ended with an effect's outcome still unknown, the operation would read succeeded or failed
      // over a possible charge, and the purge would later delete the only record of it.
      const unknown = journal.filter((e) => e.state === 'pending' && !named.has(e.name)).map((e) => e.name);
      if (resolution.resolution !== 'requeue' && unknown.length > 0)
        throw new InvalidArgument(
          `the outcome of effect ${unknown.join(', ')} is unknown: establish it at the provider and name it ` +
            `committed or absent, or requeue the operation, before ending it ${resolution.resolution}`,
        );
    }
    const row = await this.store.operationReconcile({ ...ref, ...resolution });
    if (row.state === 'queued') this.wakeup.notify(row.class);
    this.changed(ref.tenant, ref.id);
    return toOperation(row);
  }

  /**
   * Waits until the operation reaches a terminal state (or `until` holds). Local changes wake it
   * at once; changes made by other processes are seen by polling every `pollMs`.
   */
  async wait<Input = unknown, Result = unknown>(
    ref: OperationReference<Input, Result>,
    options: {
      timeoutMs?: number;
      pollMs?: number;
      until?: (op: Operation<Input, Result>) => boolean;
    } = {},
  ): Promise<Operation<Input, Result>> {
    // A NaN here would poll the store every millisecond, for ever.
    const timeoutMs = bounded('timeoutMs', options.timeoutMs, 30_000, { min: 0 });
    const pollMs = bounded('pollMs', options.pollMs, 100, { min: 1, max: MAX_TIMER_MS });
    const until = options.until ?? ((op: Operation<Input, Result>) => isTerminal(op.state));
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const op = await this.get<Input, Result>(ref);
      if (!op) throw new OperationNotFound(ref.tenant, ref.id);
      if (until(op)) return op;
      const left = deadline - performance.now();
      if (left <= 0) throw new WaitTimeout(ref.id, timeoutMs);
      await new Promise<void>((resolve) => {
        const event = operationKey(ref.tenant, ref.id);
        const done = () => {
          clearTimeout(timer);
          this.changes.off(event, done);
          resolve();
        };
        const timer = setTimeout(done, Math.min(left, pollMs));
        this.changes.on(event, done);
      });
    }
  }

  /** A worker pool bound to this engine. Call `start()` on it. */
  worker(options: WorkerOptions = {}): Worker {
    const worker = new Worker(
      {
        store: this.store,
        kinds: this.kinds,
        log: this.log,
        effectKey: this.effectKey,
        random: this.random,
        wakeup: this.wakeup,
        retention: this.retention,
        maxLeaseExpiries: this.maxLeaseExpiries,
        providers: this.providers,
        retryBudget: this.retryBudget,
        events: this.events,
        onSettled: (row, _report, durationMs) => {
          if (durationMs !== undefined) this.retryAfter.observe(row.class, durationMs);
          this.changed(row.tenant, row.id);
        },
        onStopped: (stopped) => this.workers.delete(stopped),
      },
      options,
    );
    this.workers.add(worker);
    return worker;
  }

  /** @internal Workers made by this engine and not stopped yet (tests). */
  get workerCount(): number {
    return this.workers.size;
  }

  /** Rescues expired leases now (workers also do it periodically). */
  async rescueExpiredLeases(): Promise<number> {
    const rescued = await rescueAll(this.store, this.maxLeaseExpiries);
    for (const r of rescued) {
      this.events.emit('rescued', r);
      this.changed(r.tenant, r.id);
    }
    if (rescued.length > 0) this.wakeup.notifyAll();
    return rescued.length;
  }

  /** Purges terminal operations past retention now (workers also do it periodically). */
  purgeExpired(): Promise<number> {
    return purgeAll(this.store, this.retention);
  }

  /** Stops every worker of this engine (gracefully) and closes the store. */
  async close(options: { graceMs?: number } = {}): Promise<void> {
    await Promise.all([...this.workers].map((w) => w.stop(options)));
    await this.submitter.idle();
    await this.store.close();
  }

  private changed(tenant: string, id: string): void {
    this.changes.emit(operationKey(tenant, id));
  }
}

const MAX_RETRY_RATIO = 1_000_000;
/** The largest count the stores keep as a 32-bit integer, as admission's caps. */
const MAX_CAP = 2 ** 31 - 1;

/** The retention policy with its defaults; a tombstone outlives the operation it replaces. */
function retentionOf(given: Partial<RetentionPolicy> | undefined): RetentionPolicy {
  // At most 100 years, as every duration the stores add to a time (core/bounds.ts).
  const terminalMs = bounded('retention.terminalMs', given?.terminalMs, DEFAULT_RETENTION.terminalMs, {
    min: 0,
    max: MAX_DURATION_MS,
  });
  const tombstoneMs = bounded('retention.tombstoneMs', given?.tombstoneMs, DEFAULT_RETENTION.tombstoneMs, {
    min: 0,
    max: MAX_DURATION_MS,
  });
  // Both count from the operation's end: a shorter tombstone would free the id when it is purged.
  if (tombstoneMs < terminalMs)
    throw new InvalidArgument('retention.tombstoneMs must be at least retention.terminalMs');
  return { terminalMs, tombstoneMs };
}

function retryBudgetOf(given: Partial<RetryBudgetConfig> | undefined): RetryBudgetConfig {
  const d = DEFAULT_RETRY_BUDGET;
  // `false` or an object: a misspelt key (`windowMS`) or another value (`'off'`) was the default.
  if (given !== undefined) knownKeys('retryBudget', given, RETRY_BUDGET_KEYS);
  const windowMs = bounded('retryBudget.windowMs', given?.windowMs, d.windowMs, {
    min: 1,
    // The stores keep a day of the budget's buckets.
    max: MAX_RETRY_WINDOW_MS,
    integer: true,
  });
  return {
    // A retry per first attempt a million times over is no budget; beyond, a typo.
    ratio: bounded('retryBudget.ratio', given?.ratio, d.ratio, { min: 0, max: MAX_RETRY_RATIO }),
    floor: bounded('retryBudget.floor', given?.floor, d.floor, { min: 0, max: MAX_CAP, integer: true }),
    windowMs,
    bucketMs: bounded('retryBudget.bucketMs', given?.bucketMs, d.bucketMs, {
      min: 1,
      max: windowMs,
      integer: true,
    }),
    // At 0 a denied retry asked the budget again at once, hundreds of times a second.
    deferMaxMs: bounded('retryBudget.deferMaxMs', given?.deferMaxMs, d.deferMaxMs, {
      min: MIN_RETRY_DEFER_MS,
      max: MAX_DURATION_MS,
      integer: true,
    }),
  };
}

/** The key derivation: the default, in a namespace, or the caller's own (not both). */
function effectKeyOf(options: SluiceOptions): EffectKeyFn {
  const ns = options.effectKeyNamespace;
  if (ns === undefined) return options.effectKey ?? deriveEffectKey;
  if (options.effectKey !== undefined)
    throw new InvalidArgument(
      'effectKeyNamespace and effectKey: give one, the namespace or your own derivation',
    );
  if (
    typeof ns !== 'string' ||
    ns.length === 0 ||
    ns.length > MAX_KEY_NAMESPACE_CHARS ||
    !/^[\x20-\x7e]+$/.test(ns)
  )
    throw new InvalidArgument(
      `effectKeyNamespace must be 1 to ${MAX_KEY_NAMESPACE_CHARS} printable ASCII characters`,
    );
  return namespacedEffectKey(ns);
}

const SLUICE_OPTION_KEYS = [
  'store',
  'logger',
  'maxLeaseExpiries',
  'retention',
  'effectKey',
  'effectKeyNamespace',
  'random',
  'classes',
  'tenants',
  'providers',
  'retryBudget',
] as const satisfies ReadonlyArray<keyof SluiceOptions>;

const RETRY_BUDGET_KEYS = [
  'ratio',
  'floor',
  'windowMs',
  'bucketMs',
  'deferMaxMs',
] as const satisfies ReadonlyArray<keyof RetryBudgetConfig>;
/** The longest retry budget window: the stores purge the budget's buckets after a day. */
const MAX_RETRY_WINDOW_MS = 86_400_000;
/** The shortest ceiling of a denied retry's wait. */
const MIN_RETRY_DEFER_MS = 100;

const RESOLUTIONS: ReadonlyArray<ReconcileParams['resolution']> = ['requeue', 'succeeded', 'failed'];

/** One effect's established outcome, as `reconcile` takes it (the HTTP API's schema, for callers of the library). */
function assertReconcileEffect(effect: unknown): asserts effect is ReconcileEffect {
  if (typeof effect !== 'object' || effect === null)
    throw new InvalidArgument('each effect must be an object');
  const e = effect as Record<string, unknown>;
  if (typeof e.name !== 'string' || e.name === '')
    throw new InvalidArgument('each effect needs its name, a non-empty string');
  if (e.outcome !== 'committed' && e.outcome !== 'absent')
    throw new InvalidArgument(
      `the outcome of effect ${e.name} must be committed or absent, not ${String(e.outcome)}`,
    );
  if (e.outcome === 'absent') {
    if (e.result !== undefined || (e.reference !== undefined && e.reference !== null))
      throw new InvalidArgument(`effect ${e.name} is absent: it has no result or reference to keep`);
    return;
  }
  if (e.reference !== undefined && e.reference !== null) {
    if (
      typeof e.reference !== 'string' ||
      e.reference.length > MAX_REFERENCE_CHARS ||
      !isStoredText(e.reference)
    )
      throw new InvalidArgument(
        `the reference of effect ${e.name} must be a string of at most ${MAX_REFERENCE_CHARS} characters, ` +
          'without NUL or a lone surrogate',
      );
  }
  // Handed back to the handler as the effect's result: plain JSON, as a provider's answer.
  if (e.result !== undefined) assertPlainJson(e.result);
}

/**
 * Who did an operator action and why, as the HTTP API bounds them: both are kept in the history.
 * NUL is refused: PostgreSQL's text cannot hold it, and SQLite's would, so the stores would differ.
 * So is a lone surrogate, which is not Unicode text: each store would keep another replacement.
 */
function assertRecorded(who: { by: unknown; reason: unknown }): void {
  assertRecordedText('by', who.by, 200);
  assertRecordedText('reason', who.reason, 2000);
}

function assertRecordedText(name: string, value: unknown, max: number): void {
  if (typeof value !== 'string' || value.trim() === '' || value.length > max || !isStoredText(value))
    throw new InvalidArgument(
      `${name} must be 1–${max} characters, not all blank, without NUL or a lone surrogate`,
    );
}
