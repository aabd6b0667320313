/**
 * @module testing/provider-server
 * The provider stub over HTTP on loopback, so tests, the demo and the drill exercise real
 * sockets: a dropped response is a destroyed connection, a hang is a request that never
 * answers.
 *
 * | route | meaning |
 * |---|---|
 * | `POST /v1/charges` (header `Idempotency-Key`, body `{amount_cents, …}`) | charge; 200 with the charge, 409 key reused with other parameters, 400 invalid, 503 injected |
 * | `GET /v1/charges?key=K` | lookup: 200 with the charge, 404 when none exists under K |
 * | `POST /v1/refunds` (header `Idempotency-Key`, body `{charge, amount_cents}`) | refund |
 * | `GET /ledger` | every charge and refund, with call counters |
 * | `POST /control` (body `{failNext?, mode?, latencyMs?, hold?, release?, reset?}`) | inject failures |
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  isAmbiguous,
  isEffectConflict,
  isPermanent,
  isRetryable,
  isSluiceError,
} from '../core/errors/index.js';
import { type FailureMode, ProviderStub, type ProviderStubOptions } from './provider-stub.js';

export interface ProviderServerOptions extends ProviderStubOptions {
  port?: number;
  host?: string;
  /** Use an existing stub (to share its ledger with in-process checks). */
  stub?: ProviderStub;
}

export interface ProviderServer {
  readonly url: string;
  readonly stub: ProviderStub;
  close(): Promise<void>;
}

const MAX_BODY = 65_536;

function readBody(req: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new Error('body too large'));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => {
      try {
        resolve(chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : {});
      } catch {
        reject(new Error('bad json'));
      }
    });
    req.on('error', reject);
  });
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export async function startProviderServer(options: ProviderServerOptions = {}): Promise<ProviderServer> {
  const stub = options.stub ?? new ProviderStub(options);
  const server: Server = createServer((req, res) => {
    void handle(stub, req, res).catch((error) => {
      if (!res.headersSent) send(res, 500, { error: 'stub-error', message: String(error) });
    });
  });
  server.keepAliveTimeout = 1000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const { port, address } = server.address() as AddressInfo;
  return {
    url: `http://${address}:${port}`,
    stub,
    close: () =>
      new Promise<void>((resolve) => {
        stub.release();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function handle(stub: ProviderStub, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const url = new URL(req.url ?? '/', 'http://stub');
  const abort = new AbortController();
  // A client that gives up (its deadline) closes the socket: stop hanging for it.
  res.on('close', () => abort.abort());

  if (req.method === 'GET' && url.pathname === '/ledger') {
    return send(res, 200, {
      calls: stub.calls,
      lookups: stub.lookups,
      refundCalls: stub.refundCalls,
      charges: stub.ledger(),
      refunds: stub.refundLedger(),
      doubleCharges: stub.doubleCharges(),
    });
  }
  if (req.method === 'POST' && url.pathname === '/control') {
    const body = (await readBody(req)) as {
      failNext?: number;
      mode?: FailureMode;
      latencyMs?: number;
      hold?: boolean;
      release?: boolean;
      reset?: boolean;
    };
    if (body.reset) stub.reset();
    if (body.release) stub.release();
    if (body.hold) stub.hold();
    if (typeof body.latencyMs === 'number') stub.latencyMs = body.latencyMs;
    if (typeof body.failNext === 'number') stub.failNext(body.failNext, body.mode ?? 'unavailable');
    return send(res, 200, { ok: true, latencyMs: stub.latencyMs });
  }
  if (req.method === 'GET' && url.pathname === '/v1/charges') {
    const key = url.searchParams.get('key') ?? '';
    const found = await stub.lookup(key);
    return found.status === 'committed'
      ? send(res, 200, found.charge)
      : send(res, 404, { error: 'no-such-charge' });
  }
  const isCharge = req.method === 'POST' && url.pathname === '/v1/charges';
  const isRefund = req.method === 'POST' && url.pathname === '/v1/refunds';
  if (isCharge || isRefund) {
    const key = req.headers['idempotency-key'];
    if (typeof key !== 'string' || key.length === 0)
      return send(res, 400, { error: 'idempotency-key-missing' });
    let body: Record<string, unknown>;
    try {
      body = (await readBody(req)) as Record<string, unknown>;
    } catch (error) {
      return send(res, 400, { error: 'bad-request', message: String(error) });
    }
    try {
      const result = isCharge
        ? await stub.charge({ key, params: body, signal: abort.signal })
        : await stub.refund({
            key,
            charge: String(body.charge),
            amount_cents: Number(body.amount_cents),
            signal: abort.signal,
          });
      return send(res, 200, result);
    } catch (error) {
      if (isEffectConflict(error))
        return send(res, 409, { error: 'idempotency-key-reused', message: error.message });
      if (isPermanent(error)) return send(res, 400, { error: error.code, message: error.message });
      if (isRetryable(error)) return send(res, 503, { error: 'unavailable' });
      if (isAmbiguous(error)) {
        // The charge may exist, but the client never hears: drop the connection.
        res.socket?.destroy();
        return;
      }
      return send(res, 500, { error: isSluiceError(error) ? error.code : 'stub-error' });
    }
  }
  send(res, 404, { error: 'not-found' });
}
