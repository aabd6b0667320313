/**
 * @module runtime/context
 * What a handler receives besides its input: who it runs for, the attempt's `AbortSignal`, the
 * time it has left, the effect journal and tracked temporary directories.
 *
 * `signal` fires at the earliest of: the attempt timeout, the operation's deadline, a cancel
 * request (only while no effect has begun), the loss of the lease, and worker shutdown. Its
 * `reason` is the typed error saying which.
 */
import type { Logger } from 'pino';
import { type EffectOptions, type EffectRuntime, runEffect } from '../effects/run-effect.js';

export interface AttemptHooks {
  effectRuntime: EffectRuntime;
  tempDir(): string;
  remainingMs(): number;
}

export class OperationContext {
  readonly tenant: string;
  readonly id: string;
  readonly kind: string;
  /** 1 for the first attempt. */
  readonly attempt: number;
  readonly signal: AbortSignal;
  /** The operation's deadline (epoch ms, store clock), or null. */
  readonly deadline: number | null;
  readonly log: Logger;
  readonly #hooks: AttemptHooks;

  /** @internal */
  constructor(
    fields: {
      tenant: string;
      id: string;
      kind: string;
      attempt: number;
      signal: AbortSignal;
      deadline: number | null;
      log: Logger;
    },
    hooks: AttemptHooks,
  ) {
    this.tenant = fields.tenant;
    this.id = fields.id;
    this.kind = fields.kind;
    this.attempt = fields.attempt;
    this.signal = fields.signal;
    this.deadline = fields.deadline;
    this.log = fields.log;
    this.#hooks = hooks;
  }

  /** Milliseconds left before the signal fires for time (attempt timeout or deadline). */
  remainingMs(): number {
    return this.#hooks.remainingMs();
  }

  /**
   * Performs an external effect at most once per operation, whatever crashes or retries happen
   * (see docs/effect-protocol.md). The result must be plain JSON: it is journaled.
   *
   * @example
   * ```ts
   * const charge = await ctx.effect('charge', {
   *   call: ({ key, signal }) => provider.charge({ idempotencyKey: key, amount }, { signal }),
   *   retentionMs: 24 * 3600_000,
   * });
   * ```
   */
  effect<T>(name: string, options: EffectOptions<T>): Promise<T> {
    return runEffect(this.#hooks.effectRuntime, name, options);
  }

  /** A fresh directory for this attempt, removed when the attempt ends, however it ends. */
  async tempDir(): Promise<string> {
    return this.#hooks.tempDir();
  }
}
