/**
 * @module drill/client
 * The drill's HTTP client of the deployment's API: submit, read, cancel, and a submit whose
 * client walks away mid-request. It counts every refused submission by its problem code (the
 * sampler's "rejections by reason") and per tenant, since what a client sees is the point.
 */
import { request as httpRequest } from 'node:http';

/** The operation as the API answers it (the fields the drill reads). */
export interface OperationView {
  tenant: string;
  id: string;
  kind: string;
  state: string;
  digest: string;
  /** When the store accepted it: two records of one id would differ here, not in the digest. */
  createdAt: string;
  attempt: number;
  error: { code?: string; message?: string } | null;
  cancel: string | null;
}

export interface SubmitBody {
  kind: string;
  input: unknown;
  deadlineMs?: number;
  delayMs?: number;
}

export type SubmitAnswer =
  | { status: 202 | 200; operation: OperationView; replayed: boolean; code?: undefined }
  /** Refused (problem `code`), or `network-error` when no answer came. */
  | { status: number; code: string; operation?: undefined; replayed?: undefined };

export type CancelAnswer =
  | { status: 200; cancel: string; operation: OperationView }
  | { status: number; cancel?: undefined; operation?: undefined };

export class DrillClient {
  /** Refused submissions by reason, all tenants (cumulative). */
  readonly rejections: Record<string, number> = {};
  /** Refused submissions by tenant, then reason. */
  readonly rejectionsByTenant: Record<string, Record<string, number>> = {};

  constructor(
    readonly baseUrl: string,
    private readonly keys: Record<string, string>,
  ) {}

  private headers(tenant: string, extra: Record<string, string> = {}): Record<string, string> {
    const key = this.keys[tenant];
    if (!key) throw new Error(`no API key for tenant ${tenant}`);
    return { authorization: `Bearer ${key}`, ...extra };
  }

  private count(tenant: string, code: string): void {
    this.rejections[code] = (this.rejections[code] ?? 0) + 1;
    const t = this.rejectionsByTenant[tenant] ?? {};
    t[code] = (t[code] ?? 0) + 1;
    this.rejectionsByTenant[tenant] = t;
  }

  private fetch(path: string, init: RequestInit): Promise<Response> {
    return fetch(`${this.baseUrl}${path}`, init);
  }

  /** `POST /v1/operations` under `Idempotency-Key: id`. Refusals are counted, never thrown. */
  async submit(tenant: string, id: string, body: SubmitBody): Promise<SubmitAnswer> {
    let res: Response;
    try {
      res = await this.fetch('/v1/operations', {
        method: 'POST',
        headers: this.headers(tenant, { 'idempotency-key': id, 'content-type': 'application/json' }),
        body: JSON.stringify(body),
      });
    } catch {
      this.count(tenant, 'network-error');
      return { status: 0, code: 'network-error' };
    }
    const payload = (await res.json().catch(() => ({}))) as Record<string, unknown>;
    if (res.status === 202 || res.status === 200) {
      return {
        status: res.status,
        operation: payload as unknown as OperationView,
        replayed: res.headers.get('idempotent-replayed') === 'true',
      };
    }
    const code = typeof payload.code === 'string' ? payload.code : `http-${res.status}`;
    this.count(tenant, code);
    return { status: res.status, code };
  }

  /** `GET /v1/operations/{id}`; undefined when it does not exist (or on a network error). */
  async get(tenant: string, id: string): Promise<OperationView | undefined> {
    try {
      const res = await this.fetch(`/v1/operations/${encodeURIComponent(id)}`, {
        headers: this.headers(tenant),
      });
      if (res.status !== 200) {
        await res.body?.cancel();
        return undefined;
      }
      return (await res.json()) as OperationView;
    } catch {
      return undefined;
    }
  }

  /** `POST /v1/operations/{id}/cancel`. Status 0 when no answer came. */
  async cancel(tenant: string, id: string): Promise<CancelAnswer> {
    try {
      const res = await this.fetch(`/v1/operations/${encodeURIComponent(id)}/cancel`, {
        method: 'POST',
        headers: this.headers(tenant),
      });
      if (res.status !== 200) {
        await res.body?.cancel();
        return { status: res.status };
      }
      const body = (await res.json()) as { operation: OperationView; cancel: string };
      return { status: 200, cancel: body.cancel, operation: body.operation };
    } catch {
      return { status: 0 };
    }
  }

  /**
   * Sends a whole submit, then destroys the connection after `afterMs` without reading the
   * answer: a client that disconnects mid-request. Whether the operation was accepted is
   * unknown to it (the drill finds out by cancelling). Resolves once the socket is gone.
   */
  submitAndDisconnect(tenant: string, id: string, body: SubmitBody, afterMs: number): Promise<void> {
    const url = new URL('/v1/operations', this.baseUrl);
    const text = JSON.stringify(body);
    return new Promise((resolve) => {
      const req = httpRequest(url, {
        method: 'POST',
        headers: this.headers(tenant, {
          'idempotency-key': id,
          'content-type': 'application/json',
          'content-length': String(Buffer.byteLength(text)),
        }),
      });
      req.on('error', () => {});
      req.on('close', () => resolve());
      req.end(text, () => {
        setTimeout(() => req.destroy(), afterMs);
      });
    });
  }
}
