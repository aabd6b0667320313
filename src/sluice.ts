/**
 * @module sluice
 * The engine: define kinds, submit operations with identity, inspect, cancel, redrive and
 * reconcile them, and run workers. One `Sluice` per process and store; many processes may share
 * a store.
 */
import { EventEmitter } from 'node:events';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { Logger } from 'pino';
import type { ProviderBudgets } from './admission/budgets.js';
import type { Admission } from './admission/limits.js';
import { RetryAfterEstimator } from './admission/retry-after.js';
import type { RetryBudgetConfig } from './admission/retry-budget.js';
import { engineSettings, type SluiceOptions } from './config/engine-options.js';
import { bounded, MAX_TIMER_MS } from './core/bounds.js';
import {
  CancelRequested,
  InvalidArgument,
  isSluiceError,
  isStoreError,
  OperationConflict,
  OperationExpired,
  OperationNotFound,
  type SluiceError,
  StoreError,
  WaitTimeout,
} from './core/errors/index.js';
import { assertOperationId, assertTenant } from './core/identity.js';
import { ListCursors } from './core/list-cursor.js';
import { type Operation, toOperation } from './core/operation.js';
import { isTerminal, OPERATION_STATES, type OperationState } from './core/states.js';
import { assertRecorded, assertRecordedText, MAX_BY_CHARS } from './core/stored-text.js';
import type { EffectKeyFn } from './effects/effect-key.js';
import {
  assertEffectsEstablished,
  assertReconcileRequest,
  type ReconcileRequest,
} from './effects/reconcile-checks.js';
import { createEvents, type SluiceEvents } from './observability/events.js';
import { purgeAll, type RetentionPolicy, rescueAll } from './queue/maintenance.js';
import { Wakeup } from './queue/wakeup.js';
import { operationKey } from './runtime/attempt.js';
import { Batcher } from './runtime/batcher.js';
import { KIND_NAME, type Kind, type KindDefinition, resolveKind } from './runtime/kinds.js';
import { Worker, type WorkerOptions } from './runtime/worker.js';
import type { Store } from './store/store.js';
import type { CancelOutcome, SubmitOutcome, SubmitParams } from './store/types.js';
import { capacityRefusal, type Prepared, prepareSubmit } from './submit/prepare.js';
import {
  type AnySubmitRequest,
  type KindSubmitRequest,
  kindNameOf,
  MAX_SUBMIT_MANY,
  type SubmitManyRequests,
  type SubmitManyResult,
  type SubmitManyResults,
  type SubmitOptions,
  type SubmitRequest,
  type SubmitResult,
} from './submit/requests.js';

export interface ListRequest {
  tenant?: string;
  state?: OperationState;
  kind?: string;
  /** Opaque cursor from a previous page. */
  cursor?: string;
  /** 1–500. Default 50. */
  limit?: number;
}

/** The most operations one `redriveMany` call takes. */
export const MAX_REDRIVE_MANY = 100;

/** One operation's answer in `redriveMany`: queued again, or the error `redrive` would have thrown. */
export type RedriveManyResult =
  | { tenant: string; id: string; ok: true; operation: Operation }
  | { tenant: string; id: string; ok: false; error: SluiceError };

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
    const settings = engineSettings(options);
    this.store = settings.store;
    this.log = settings.log;
    this.effectKey = settings.effectKey;
    this.retention = settings.retention;
    this.maxLeaseExpiries = settings.maxLeaseExpiries;
    this.random = settings.random;
    this.admission = settings.admission;
    this.providers = settings.providers;
    this.retryBudget = settings.retryBudget;
    this.submitter = new Batcher((items) => this.store.operationSubmitMany(items));
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

  private prepare(request: AnySubmitRequest): Promise<Prepared> {
    return prepareSubmit(request, this.kinds, this.admission);
  }

  /** The store's answer to one item, as the caller sees it: the result, or the refusal thrown. */
  private answer(outcome: SubmitOutcome, prepared: Prepared): SubmitResult {
    const { tenant, id } = prepared.params;
    switch (outcome.status) {
      case 'created':
        this.wakeup.notify(prepared.params.class);
        this.changed(tenant, id);
        return { operation: toOperation(outcome.row), created: true };
      case 'existing':
        return { operation: toOperation(outcome.row), created: false };
      case 'conflict':
        throw new OperationConflict(tenant, id);
      case 'expired':
        throw new OperationExpired(tenant, id);
      case 'rejected':
        throw capacityRefusal(outcome, prepared, this.admission, this.retryAfter);
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
    if (options.by !== undefined) assertRecordedText('by', options.by, MAX_BY_CHARS);
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
   * Redrives many dead operations, each as `redrive` does, one after another, all recorded with
   * the same who and why: the dead letters an outage left, once its cause is fixed. Each is
   * answered in its place: one that is not `dead` (any more), not there, or not a valid reference
   * is refused (`ok: false`) without refusing the others. The call itself rejects when it cannot
   * be made (not an array, more than `MAX_REDRIVE_MANY`, who or why not valid: nothing redriven)
   * or when the store fails; then those before the failure were redriven: send the same
   * references again, and those answer `operation-state-invalid` (they are queued).
   *
   * Like `redrive`, it is not held to the tenants' waiting caps: an operator's decision.
   */
  async redriveMany(
    refs: ReadonlyArray<{ tenant: string; id: string }>,
    who: { by: string; reason: string },
  ): Promise<RedriveManyResult[]> {
    if (!Array.isArray(refs)) throw new InvalidArgument('refs must be an array of { tenant, id }');
    if (refs.length > MAX_REDRIVE_MANY)
      throw new InvalidArgument(`at most ${MAX_REDRIVE_MANY} operations in one call, got ${refs.length}`);
    assertRecorded(who);
    const results: RedriveManyResult[] = [];
    for (const ref of refs as unknown[]) {
      const { tenant, id } = (typeof ref === 'object' && ref !== null ? ref : {}) as Record<string, unknown>;
      try {
        assertTenant(tenant);
        assertOperationId(id);
        results.push({ tenant, id, ok: true, operation: await this.redrive({ tenant, id }, who) });
      } catch (error) {
        if (!isSluiceError(error) || isStoreError(error)) throw error;
        const text = (v: unknown) => (typeof v === 'string' ? v : '');
        results.push({ tenant: text(tenant), id: text(id), ok: false, error });
      }
    }
    return results;
  }

  /**
   * Resolves an operation waiting in `needs_reconciliation` with what a person or reconciler
   * established at the provider: each effect's outcome, then requeue (the handler runs again;
   * journaled effects return their results), or an end state.
   */
  async reconcile(ref: { tenant: string; id: string }, resolution: ReconcileRequest): Promise<Operation> {
    const effects = assertReconcileRequest(resolution);
    const op = await this.store.operationGet(ref);
    if (!op) throw new OperationNotFound(ref.tenant, ref.id);
    // The effects of an operation in another state are not looked at: the store refuses it
    // (operation-state-invalid) as it would without them.
    if (op.state === 'needs_reconciliation')
      assertEffectsEstablished(ref, await this.store.effectList(ref), effects, resolution.resolution);
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
