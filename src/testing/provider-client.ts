/**
 * @module testing/provider-client
 * A client for the HTTP provider stub that classifies every outcome the way a real provider
 * integration must (docs/effect-protocol.md):
 *
 * | what happened                                   | outcome          |
 * |-------------------------------------------------|------------------|
 * | 2xx                                             | the result       |
 * | 409 key reused with other parameters            | `EffectConflict` |
 * | 429, 503; connection refused (nothing was sent) | `Retryable`      |
 * | other 4xx                                       | `Permanent`      |
 * | 5xx other than 503; reset, timeout, abort after sending | `Ambiguous` |
 *
 * It is also the model for a real provider client in a handler.
 */
import { Ambiguous, EffectConflict, Permanent, Retryable } from '../core/errors/index.js';
import type { LookupResult } from '../effects/run-effect.js';
import type { Charge, Refund } from './provider-stub.js';

const REFUSED = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

function networkCode(error: unknown): string | undefined {
  let e: unknown = error;
  for (let i = 0; i < 4 && e; i++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

export class ProviderClient {
  constructor(readonly baseUrl: string) {}

  charge(params: Record<string, unknown>, key: string, signal: AbortSignal): Promise<Charge> {
    return this.post<Charge>('/v1/charges', params, key, signal);
  }

  refund(
    params: { charge: string; amount_cents: number },
    key: string,
    signal: AbortSignal,
  ): Promise<Refund> {
    return this.post<Refund>('/v1/refunds', params, key, signal);
  }

  /** `lookup` for `ctx.effect`: the stub's ledger is authoritative. */
  async lookupCharge(key: string, signal: AbortSignal): Promise<LookupResult<Charge>> {
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl}/v1/charges?key=${encodeURIComponent(key)}`, { signal });
    } catch {
      return { status: 'unknown' };
    }
    if (res.status === 404) return { status: 'absent' };
    if (res.ok) {
      const charge = (await res.json()) as Charge;
      return { status: 'committed', result: charge, reference: charge.id };
    }
    return { status: 'unknown' };
  }

  private async post<T>(path: string, body: unknown, key: string, signal: AbortSignal): Promise<T> {
    let res: Response;
    try {
      res = await fetch(`${this.baseUrl}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'idempotency-key': key },
        body: JSON.stringify(body),
        signal,
      });
    } catch (error) {
      const code = networkCode(error);
      if (code && REFUSED.has(code))
        throw new Retryable(`provider unreachable (${code})`, { cause: error, code: 'provider-unreachable' });
      throw new Ambiguous(`no answer from the provider after sending (${code ?? (error as Error).name})`, {
        cause: error,
        code: 'provider-no-answer',
      });
    }
    let payload: unknown;
    try {
      payload = await res.json();
    } catch (error) {
      if (res.ok)
        throw new Ambiguous('the provider answer was cut off', { cause: error, code: 'provider-no-answer' });
      payload = {};
    }
    if (res.ok) return payload as T;
    const message =
      (payload as { message?: string; error?: string }).message ??
      (payload as { error?: string }).error ??
      '';
    if (res.status === 409) throw new EffectConflict(`provider refused the key: ${message}`);
    if (res.status === 429 || res.status === 503)
      throw new Retryable(`provider answered ${res.status}`, { code: 'provider-unavailable' });
    if (res.status >= 400 && res.status < 500)
      throw new Permanent(`provider refused: ${message}`, { code: 'provider-refused' });
    throw new Ambiguous(`provider answered ${res.status}`, { code: 'provider-error' });
  }
}
