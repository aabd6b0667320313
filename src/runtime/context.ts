/**
 * @module runtime/context
 * What a handler receives besides its input: who it runs for, the attempt's `AbortSignal`, the
 * time it has left, the effect journal, tracked temporary directories, and helpers that carry the
 * deadline and cancellation into HTTP (`fetch`), subprocesses (`exec`) and PostgreSQL
 * (`pgQuery`). See docs/handlers.md.
 *
 * `signal` fires at the earliest of: the attempt timeout, the operation's deadline, a cancel
 * request (only while no effect has begun), the loss of the lease, and worker shutdown. Its
 * `reason` is the typed error saying which.
 */
import type { Logger } from 'pino';
import { engineMade } from '../core/errors/engine-made.js';
import { AttemptEnded } from '../core/errors/index.js';
import { type InflightEffects, refused } from '../effects/inflight.js';
import {
  assertEffectCall,
  type EffectOptions,
  type EffectRuntime,
  runEffect,
} from '../effects/run-effect.js';
import { loggedEffect } from './helpers/effect-log.js';
import { type ExecOptions, type ExecResult, exec } from './helpers/exec.js';
import { boundFetch } from './helpers/fetch.js';
import { type PgClientLike, type PgPoolLike, type PgQueryResult, pgQuery } from './helpers/pg-query.js';
import type { AttemptScope } from './helpers/scope.js';
import type { LazyLog } from './lazy-log.js';

export interface AttemptHooks {
  effectRuntime: EffectRuntime;
  /** The attempt's effects under way: one run per name at a time, awaited by the end. */
  effects: InflightEffects;
  tempDir(): string;
  /** Whether the attempt is over: a leftover callback's `tempDir()` is then refused. */
  ended?(): boolean;
  remainingMs(): number;
  /** What the helpers started in this attempt, stopped when it ends (helpers/scope.ts). */
  scope: AttemptScope;
}

export class OperationContext {
  readonly tenant: string;
  readonly id: string;
  readonly kind: string;
  /** 1 for the first attempt. */
  readonly attempt: number;
  /** The operation's deadline (epoch ms, store clock), or null. */
  readonly deadline: number | null;
  readonly #logs: LazyLog;
  readonly #hooks: AttemptHooks;
  readonly #stop: { readonly signal: AbortSignal };

  /** @internal */
  constructor(
    fields: {
      tenant: string;
      id: string;
      kind: string;
      attempt: number;
      /** The attempt's stop (runtime/attempt-stop.ts): its signal is made when first read. */
      stop: { readonly signal: AbortSignal };
      deadline: number | null;
      logs: LazyLog;
    },
    hooks: AttemptHooks,
  ) {
    this.tenant = fields.tenant;
    this.id = fields.id;
    this.kind = fields.kind;
    this.attempt = fields.attempt;
    this.#stop = fields.stop;
    this.deadline = fields.deadline;
    this.#logs = fields.logs;
    this.#hooks = hooks;
  }

  /** The attempt's logger: its lines carry tenant, operation, attempt and kind. */
  get log(): Logger {
    return this.#logs.log;
  }

  /** Fires when the attempt must stop; `reason` is the typed error saying why (docs/handlers.md). */
  get signal(): AbortSignal {
    return this.#stop.signal;
  }

  /** Milliseconds left before the signal fires for time (attempt timeout or deadline). */
  remainingMs(): number {
    return this.#hooks.remainingMs();
  }

  /**
   * Performs an external effect at most once per operation, whatever crashes or retries happen
   * (see docs/effect-protocol.md). The result must be plain JSON, or `record` makes it so: it is
   * journaled, and what a later attempt gets back. A second
   * call of the same name while the first is under way gets the first's result.
   *
   * @example
   * ```ts
   * const charge = await ctx.effect('charge', {
   *   call: ({ key, signal }) => provider.charge({ idempotencyKey: key, amount }, { signal }),
   *   retentionMs: 24 * 3600_000,
   * });
   * ```
   */
  effect<T, R = T>(name: string, options: EffectOptions<T, R>): Promise<R> {
    // Before a call of the same name under way is joined: a wrong call is refused, not hidden.
    try {
      assertEffectCall(name, options as EffectOptions<unknown, unknown>);
    } catch (error) {
      return Promise.reject(error);
    }
    const runtime = this.#hooks.effectRuntime;
    // A second call of the same name while the first runs joins it (effects/inflight.ts).
    return this.#hooks.effects.run(name, () =>
      loggedEffect(
        this.#logs,
        name,
        () => runtime.effectKey(name),
        () => runEffect(runtime, name, options),
      ),
    );
  }

  /**
   * A fresh directory for this attempt, removed when the attempt ends, however it ends. Once the
   * attempt is over it is refused (`AttemptEnded`), and the refusal logged: the callback that asks
   * then (a timer the handler left behind) seldom awaits it, and its rejection, unhandled, would
   * take the whole process down. Whoever awaits it still hears of the refusal.
   */
  tempDir(): Promise<string> {
    if (this.#hooks.ended?.()) {
      this.#logs.log.warn('ctx.tempDir was called after its attempt ended: refused');
      return refused(engineMade(new AttemptEnded()));
    }
    try {
      return Promise.resolve(this.#hooks.tempDir());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * The global `fetch`, stopped at the earliest of the attempt's signal, the time left and the
   * caller's own signal (`init.signal`). Stopped, the request is torn down and the promise
   * rejects with the typed reason (`AttemptTimeout`, `DeadlineExceeded`, `CancelRequested`…).
   * A request that must happen at most once goes inside `ctx.effect`.
   *
   * @example
   * ```ts
   * const res = await ctx.fetch(`https://api.example.com/rates/${input.currency}`);
   * if (res.status >= 500) throw new Retryable(`rates: ${res.status}`);
   * ```
   */
  fetch(input: string | URL | Request, init?: RequestInit): Promise<Response> {
    const scope = this.#hooks.scope;
    return scope.guard(boundFetch(scope, input, init), 'fetch');
  }

  /**
   * Runs a program (no shell) as a subprocess bound to the attempt: when the signal fires, its
   * whole process group gets `SIGTERM`, then `SIGKILL` after `killGraceMs` (2 s), and the call
   * rejects with the typed reason once the group is gone. Resolves with the exit code or signal
   * and the output, captured up to `maxOutputBytes` (1 MiB) per stream or written to files in a
   * temp directory. Whatever the handler does, no subprocess outlives its attempt.
   *
   * @example
   * ```ts
   * const { code, stderr } = await ctx.exec('pg_dump', ['--file', 'dump.sql', url], { cwd: 'temp' });
   * if (code !== 0) throw new Retryable(`pg_dump exited ${code}: ${stderr.slice(0, 500)}`);
   * ```
   */
  exec(command: string, args?: readonly string[], options?: ExecOptions): Promise<ExecResult> {
    const scope = this.#hooks.scope;
    const tempDir = () => this.#hooks.tempDir();
    return scope.guard(exec({ scope, tempDir }, command, args, options), 'exec');
  }

  /**
   * One PostgreSQL statement on a node-postgres pool or client, with `statement_timeout` set to
   * the time the attempt has left (`SET LOCAL`, inside a transaction: the setting never leaks
   * into the pool), and cancelled on the server the moment the attempt's signal fires.
   *
   * @example
   * ```ts
   * const { rows } = await ctx.pgQuery<{ total: string }>(
   *   pool, 'SELECT sum(amount_cents) AS total FROM invoices WHERE tenant = $1', [ctx.tenant]);
   * ```
   */
  pgQuery<R = Record<string, unknown>>(
    db: PgPoolLike | PgClientLike,
    text: string,
    values?: readonly unknown[],
  ): Promise<PgQueryResult<R>> {
    const scope = this.#hooks.scope;
    return scope.guard(pgQuery<R>(scope, db, text, values), 'pgQuery');
  }
}
