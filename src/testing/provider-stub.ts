/**
 * @module testing/provider-stub
 * A payment provider with the seed's contract: the same idempotency key with the same
 * parameters returns the same charge for a window (24 h by default, on an injectable clock);
 * the same key with other parameters is refused; after the window the key is forgotten and a
 * request under it would charge again — which is exactly why Sluice never retries blindly then.
 *
 * It counts every call and keeps a ledger of every charge, so a test can prove "one charge per
 * operation". Failures can be injected: `unavailable` (503, nothing committed), `drop` (commit,
 * then lose the response: the ambiguous case), `hang` (never answers until released or aborted).
 */
import { createHash } from 'node:crypto';
import { type Clock, systemClock } from '../core/clock.js';
import { canonicalJson } from '../core/digest.js';
import { Ambiguous, EffectConflict, Permanent, Retryable } from '../core/errors/index.js';
import type { LookupResult } from '../effects/run-effect.js';

export interface Charge {
  id: string;
  key: string;
  params: Record<string, unknown>;
  amount_cents: number;
  createdAt: number;
  refunded_cents: number;
}

export interface Refund {
  id: string;
  key: string;
  charge: string;
  amount_cents: number;
  createdAt: number;
}

export type FailureMode = 'unavailable' | 'drop' | 'hang';

export interface ProviderStubOptions {
  clock?: Clock;
  /** How long a key is honoured. Default 24 h. */
  windowMs?: number;
  /** Fixed delay before each answer. Default 0. */
  latencyMs?: number;
  /** Names the nth charge (1-based). Default `ch_<n>`. */
  chargeId?: (n: number) => string;
}

interface KeyEntry {
  digest: string;
  resultId: string;
  at: number;
}

const digestOf = (params: unknown) => createHash('sha256').update(canonicalJson(params)).digest('hex');

/**
 * An in-process payment provider for tests, with the contract Sluice's effects are built for:
 * a charge under a key it has seen with the same parameters returns the same charge (for
 * `windowMs`, 24 h by default), with other parameters is refused; failures are injected with
 * `failNext` (`unavailable`, `drop` after committing, `hang`), and `ledger()` lists every charge
 * made.
 */
export class ProviderStub {
  readonly clock: Clock;
  windowMs: number;
  latencyMs: number;
  private readonly chargeId: (n: number) => string;
  /** Charge requests received, whatever their outcome. */
  calls = 0;
  /** Lookups received. */
  lookups = 0;
  /** Refund requests received. */
  refundCalls = 0;
  private readonly charges: Charge[] = [];
  private readonly refunds: Refund[] = [];
  // Indexes: a benchmark makes tens of thousands of charges, and a scan per call would dominate.
  private readonly chargeById = new Map<string, Charge>();
  private readonly refundById = new Map<string, Refund>();
  private readonly chargesByKey = new Map<string, Charge[]>();
  private readonly keys = new Map<string, KeyEntry>();
  private failures: Array<{ mode: FailureMode; left: number }> = [];
  private hangs = new Set<() => void>();
  private holding = false;

  constructor(options: ProviderStubOptions = {}) {
    this.clock = options.clock ?? systemClock;
    this.windowMs = options.windowMs ?? 86_400_000;
    this.latencyMs = options.latencyMs ?? 0;
    this.chargeId = options.chargeId ?? ((n) => `ch_${n}`);
  }

  /** Make the next `count` requests fail with `mode`. Queued after earlier injections. */
  failNext(count: number, mode: FailureMode = 'unavailable'): void {
    if (count > 0) this.failures.push({ mode, left: count });
  }

  /** Every request hangs until `release()` (or its signal aborts). */
  hold(): void {
    this.holding = true;
  }

  /** Ends `hold()` and lets hanging requests fail as lost (the caller sees them as ambiguous). */
  release(): void {
    this.holding = false;
    for (const h of [...this.hangs]) h();
  }

  reset(): void {
    this.failures = [];
    this.release();
  }

  /** Every charge ever made, in order. */
  ledger(): Charge[] {
    return this.charges.map((c) => ({ ...c, params: { ...c.params } }));
  }

  refundLedger(): Refund[] {
    return this.refunds.map((r) => ({ ...r }));
  }

  /** Charges made under `key` (more than one means a double charge). */
  chargesFor(key: string): Charge[] {
    return [...(this.chargesByKey.get(key) ?? [])];
  }

  /** Keys with more than one charge: the invariant Sluice exists to keep at zero. */
  doubleCharges(): string[] {
    const counts = new Map<string, number>();
    for (const c of this.charges) counts.set(c.key, (counts.get(c.key) ?? 0) + 1);
    return [...counts].filter(([, n]) => n > 1).map(([k]) => k);
  }

  /** Creates (or, for a known key, returns) a charge. */
  async charge(args: {
    key: string;
    params: Record<string, unknown>;
    signal?: AbortSignal;
  }): Promise<Charge> {
    this.calls++;
    return this.perform(args.signal, () => {
      const amount = args.params.amount_cents;
      if (typeof amount !== 'number' || !Number.isInteger(amount) || amount <= 0) {
        throw new Permanent('amount_cents must be a positive integer', { code: 'provider-invalid-request' });
      }
      const id = this.idempotent(args.key, args.params, () => {
        const charge: Charge = {
          id: this.chargeId(this.charges.length + 1),
          key: args.key,
          params: { ...args.params },
          amount_cents: amount,
          createdAt: this.clock.now(),
          refunded_cents: 0,
        };
        this.charges.push(charge);
        this.chargeById.set(charge.id, charge);
        this.chargesByKey.set(charge.key, [...(this.chargesByKey.get(charge.key) ?? []), charge]);
        return charge.id;
      });
      return { ...this.chargeById.get(id)! };
    });
  }

  /** Refunds up to the charge's unrefunded amount. */
  async refund(args: {
    key: string;
    charge: string;
    amount_cents: number;
    signal?: AbortSignal;
  }): Promise<Refund> {
    this.refundCalls++;
    return this.perform(args.signal, () => {
      const params = { charge: args.charge, amount_cents: args.amount_cents };
      const id = this.idempotent(args.key, params, () => {
        const charge = this.chargeById.get(args.charge);
        if (!charge) throw new Permanent(`no charge ${args.charge}`, { code: 'provider-no-such-charge' });
        if (args.amount_cents <= 0 || charge.refunded_cents + args.amount_cents > charge.amount_cents) {
          throw new Permanent('refund exceeds the charge', { code: 'provider-refund-too-large' });
        }
        charge.refunded_cents += args.amount_cents;
        const refund: Refund = {
          id: `re_${this.refunds.length + 1}`,
          key: args.key,
          charge: args.charge,
          amount_cents: args.amount_cents,
          createdAt: this.clock.now(),
        };
        this.refunds.push(refund);
        this.refundById.set(refund.id, refund);
        return refund.id;
      });
      return { ...this.refundById.get(id)! };
    });
  }

  /**
   * Authoritative: the charge made under `key`, if any, from the permanent ledger, in the
   * provider's own words (`charge`). For `ctx.effect`'s `lookup`, use `lookupResult`.
   */
  async lookup(key: string): Promise<{ status: 'committed'; charge: Charge } | { status: 'absent' }> {
    this.lookups++;
    const charge = this.chargesByKey.get(key)?.at(-1);
    return charge ? { status: 'committed', charge: { ...charge } } : { status: 'absent' };
  }

  /**
   * `lookup` as `ctx.effect` takes it: `lookup: ({ key }) => stub.lookupResult(key)`. The charge
   * is the `result` and its id the `reference`; `lookup`'s own answer, which names it `charge`,
   * is no answer to the engine (`lookup-answer-invalid`).
   */
  async lookupResult(key: string): Promise<LookupResult<Charge>> {
    const found = await this.lookup(key);
    return found.status === 'committed'
      ? { status: 'committed', result: found.charge, reference: found.charge.id }
      : found;
  }

  private idempotent(key: string, params: unknown, create: () => string): string {
    const now = this.clock.now();
    const digest = digestOf(params);
    const entry = this.keys.get(key);
    if (entry && now - entry.at < this.windowMs) {
      if (entry.digest !== digest) {
        throw new EffectConflict(`idempotency key ${key} was used with different parameters`);
      }
      return entry.resultId;
    }
    const resultId = create();
    this.keys.set(key, { digest, resultId, at: now });
    return resultId;
  }

  private async perform<T>(signal: AbortSignal | undefined, commit: () => T): Promise<T> {
    signal?.throwIfAborted();
    if (this.latencyMs > 0) await this.sleep(this.latencyMs, signal);
    const failure = this.failures[0];
    const mode = failure?.mode;
    if (failure && --failure.left <= 0) this.failures.shift();
    if (mode === 'unavailable') throw new Retryable('503 from provider', { code: 'provider-unavailable' });
    if (mode === 'hang' || this.holding) {
      await this.hang(signal);
      throw new Ambiguous('the provider did not answer', { code: 'provider-timeout' });
    }
    const result = commit();
    if (mode === 'drop')
      throw new Ambiguous('the connection was lost after the request was sent', {
        code: 'provider-response-lost',
      });
    return result;
  }

  private hang(signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.hangs.delete(done);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      this.hangs.add(done);
      signal?.addEventListener('abort', done, { once: true });
    });
  }

  private sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve();
      }, ms);
      const onAbort = () => {
        clearTimeout(timer);
        reject(new Ambiguous('aborted while the request was in flight', { code: 'provider-timeout' }));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
    });
  }
}
