/**
 * @module http/server
 * `buildServer()`: the HTTP API of `sluice serve` on fastify. This module wires the pieces —
 * keys (auth.ts), the one JSON parser (json-body.ts), the one error mapping (problem.ts), the
 * routes (routes/), metrics and the OpenAPI document — and owns the request lifecycle:
 *
 *   accepting    a connection over `maxConnections` is closed as it arrives, unanswered
 *   routing      a malformed path (400 url-invalid), a path segment too long (414), no route
 *   onRequest    no Host → 400; shutting down? → 503; the key → principal (401/403); the
 *                tenant's requests in progress (429); route checks (the Idempotency-Key,
 *                accepting) — all before a byte of the body is read
 *   parsing      no Content-Encoding but `identity` (else 415), only `application/json` (else
 *                415), at most `bodyLimit` bytes (else 413, before reading), depth and number
 *                range scanned, then parsed (else 400). `100 Continue` is sent, to a client that
 *                asks for it, only here: when the body is first read
 *   validation   the route's JSON Schemas, strict (422 for a body, 400 for a query)
 *   handler      the engine; its errors map to problems in problem.ts. A listing first counts
 *                against its caller's listings in progress (429, tenant-listings.ts)
 *   onResponse   one log line (never a body, never a header) and the HTTP metrics
 *
 * A refusal sent before the body has been read closes the connection (problem.ts), so the body
 * of a refused request is never read.
 *
 * Request logs carry method, route, status, time, tenant and operation id; fastify's own
 * per-request logging (which would print the request object) is off.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import Fastify, { type FastifyInstance, type FastifyRequest, LogController } from 'fastify';
import type { Logger } from 'pino';
import { bounded } from '../core/bounds.js';
import { InvalidArgument } from '../core/errors/index.js';
import { createMetrics, type Metrics } from '../observability/metrics.js';
import { DEFAULT_LIMITS } from '../runtime/kinds.js';
import type { Worker } from '../runtime/worker.js';
import type { Sluice } from '../sluice.js';
import { type AuthConfig, KeyRing } from './auth.js';
import { DEFAULT_MAX_JSON_DEPTH, registerJsonParser } from './json-body.js';
import { methodsAt, recordRoutes } from './openapi.js';
import { ApiError, PROBLEMS, pathOf, rawProblemResponse, sendProblem, setCommonHeaders } from './problem.js';
import type { AuthMode } from './route-config.js';
import { adminRoutes } from './routes/admin.js';
import { dashboardRoutes } from './routes/dashboard.js';
import { operationIdOfKey, operationRoutes } from './routes/operations.js';
import { overviewRoutes } from './routes/overview.js';
import { serviceRoutes } from './routes/service.js';
import { tenantRoutes } from './routes/tenants.js';
import { coerceQuery, type JsonSchema, OPERATION_ID_PATTERN, TENANT_PATTERN } from './schemas.js';
import { DEFAULT_MAX_LISTINGS_PER_TENANT, TenantListings } from './tenant-listings.js';
import { DEFAULT_MAX_REQUESTS_PER_TENANT, TenantRequests } from './tenant-requests.js';

/** One of the server's caps: a whole number from 1 to 1,000,000, its default, or `false` for none. */
function capOf(name: string, value: number | false | undefined, fallback: number): number | undefined {
  if (value === false) return undefined;
  return bounded(name, value, fallback, { min: 1, max: 1_000_000, integer: true });
}

export interface ServerOptions {
  sluice: Sluice;
  /** Keys: `'sha256:<hex>'` or plaintext (hashed at build, never kept or logged). */
  auth: AuthConfig;
  /** Largest request body. Default: the largest kind `maxInputBytes` + 4 KiB of framing. */
  bodyLimitBytes?: number;
  /** From `createMetrics()`. Default: a new registry. */
  metrics?: Metrics;
  /** pino. Default: the engine's logger. Request logs never include bodies or headers. */
  logger?: Logger;
  /** False while shutting down: `POST /v1/operations` → 503 + `Retry-After`, `/readyz` → 503. */
  accepting?: () => boolean;
  /** This process's workers, for metrics (running per class, temp bytes). */
  workers?: () => Worker[];
  /** Deepest JSON nesting accepted in a body. Default 64. */
  maxJsonDepth?: number;
  /** Who may read `/metrics`: anyone (default; bind the port privately) or admin keys. */
  metricsAuth?: 'none' | 'admin';
  /**
   * Requests one tenant may have in progress at once on this server (http/tenant-requests.ts);
   * more are refused with `429 tenant-too-many-requests`. Default 64; `false` for no cap.
   */
  maxRequestsPerTenant?: number | false;
  /**
   * Listings (`GET /v1/operations`) one tenant, or one admin key across tenants, may have in
   * progress at once on this server (http/tenant-listings.ts); more are refused with `429
   * too-many-listings`. Default 2; `false` for no cap.
   */
  maxListingsPerTenant?: number | false;
  /**
   * Connections the server holds open at once, authenticated or not; one more is closed as soon
   * as it is accepted (Node's `server.maxConnections`). Default 1,000 (`DEFAULT_MAX_CONNECTIONS`).
   */
  maxConnections?: number;
  /** Time for a whole request to arrive (slow clients). Default 30 s. */
  requestTimeoutMs?: number;
  /**
   * False: only the routes that describe the process (`/healthz`, `/readyz`, `/metrics`,
   * `/openapi.json`), for a worker-only process that is scraped. Default true.
   */
  api?: boolean;
  /**
   * Serve the dashboard at `/dashboard` (with the API only): a page that holds no data and reads
   * the API with the key an operator types in (docs/operations.md, "The dashboard"). Default true.
   */
  dashboard?: boolean;
  /**
   * A connection on which nothing has moved, either way, for this long is closed: a client that
   * stops reading its answers. Default twice `requestTimeoutMs` and a second (61 s), so that a
   * request that stops arriving is first answered `408`. Between requests, the keep-alive timeout
   * (`KEEP_ALIVE_TIMEOUT_MS`) applies instead.
   */
  connectionTimeoutMs?: number;
}

/** How often Node checks open connections' request and header timeouts. */
const CHECK_INTERVAL_MS = 1000;

/**
 * How long an idle keep-alive connection, its last answer sent, waits for the next request;
 * advertised as `Keep-Alive: timeout=72`, and Node closes it a second later (73 s) so that a
 * client reusing it at the last moment is not cut off. Longer than the 60 s idle timeout of the
 * usual load balancers and proxies: the one in front closes an idle connection first, and never
 * sends a request on one the server is closing (fastify's default, set here so that it is ours).
 */
export const KEEP_ALIVE_TIMEOUT_MS = 72_000;

/**
 * Connections held at once, by default. Each is a file descriptor, and a process out of them
 * fails at everything that opens one: the store's files and connections, a handler's temp files
 * and subprocesses, and new clients, which then wait unanswered. Node raises its descriptor limit
 * to the hard one when it starts, and the usual hard limits are 4,096 and up (524,288 under
 * systemd, 1,048,576 in Docker); 1,000 leaves the rest of a 4,096 limit to the process's own work.
 * Behind a proxy, which reuses its connections, a server needs far fewer. One over the cap is
 * closed at once: refused, not left waiting for a descriptor.
 */
export const DEFAULT_MAX_CONNECTIONS = 1000;

/** Bytes a body may have beyond the input itself: `kind`, `deadlineMs`, whitespace. */
export const BODY_FRAMING_BYTES = 4096;

export function defaultBodyLimit(sluice: Sluice): number {
  const kinds = sluice.definedKinds();
  const largest =
    kinds.length === 0 ? DEFAULT_LIMITS.maxInputBytes : Math.max(...kinds.map((k) => k.limits.maxInputBytes));
  return largest + BODY_FRAMING_BYTES;
}

/**
 * Builds the API server (not listening yet). Define every kind before calling it: the default
 * body limit and the OpenAPI document come from them.
 *
 * @example
 * ```ts
 * const app = await buildServer({
 *   sluice,
 *   auth: { tenants: { north: [process.env.NORTH_KEY!] }, admin: ['sha256:9f86d0…'] },
 *   accepting: () => !stopping,
 *   workers: () => [worker],
 * });
 * await app.listen({ port: 8080, host: '127.0.0.1' });
 * ```
 */
export async function buildServer(options: ServerOptions): Promise<FastifyInstance> {
  const { sluice } = options;
  // Checked, not passed through: a route's auth mode the hook below does not know would let any
  // key read the metrics, whose gauges name tenants and their spend.
  const metricsAuth = options.metricsAuth ?? 'none';
  if (metricsAuth !== 'none' && metricsAuth !== 'admin')
    throw new InvalidArgument(`metricsAuth must be 'none' or 'admin', not ${JSON.stringify(metricsAuth)}`);
  if (options.dashboard !== undefined && typeof options.dashboard !== 'boolean')
    throw new InvalidArgument(`dashboard must be true or false, not ${JSON.stringify(options.dashboard)}`);
  const keys = new KeyRing(options.auth);
  const accepting = options.accepting ?? (() => true);
  const metrics = options.metrics ?? createMetrics();
  const logger = (options.logger ?? sluice.log).child({ component: 'http' });
  const bodyLimit = options.bodyLimitBytes ?? defaultBodyLimit(sluice);
  const requestTimeout = options.requestTimeoutMs ?? 30_000;

  const app = Fastify({
    loggerInstance: logger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    // Operation ids are up to 255 characters; percent-encoded, up to three times that.
    routerOptions: { maxParamLength: 1024 },
    // Every GET route answers HEAD too (RFC 9110 §9.1: GET and HEAD are never optional).
    exposeHeadRoutes: true,
    // The server answers 503 itself while closing (below), as a problem.
    return503OnClosing: false,
    requestTimeout,
    // The request and header timeouts end once a request has arrived, and the keep-alive timeout
    // starts only once an answer has been sent: a client that sends requests and never reads the
    // answers held its connection, and every answer not yet sent, in memory for ever.
    // The default leaves a stalled request time for its 408: Node notices a request timeout only at
    // its next check, up to CHECK_INTERVAL_MS late.
    connectionTimeout: options.connectionTimeoutMs ?? 2 * requestTimeout + CHECK_INTERVAL_MS,
    keepAliveTimeout: KEEP_ALIVE_TIMEOUT_MS,
    http: {
      // Node checks the request and header timeouts of open connections only this often
      // (30 s by default), so a 30 s limit fired after 30–60 s, headers after up to 90.
      connectionsCheckingInterval: CHECK_INTERVAL_MS,
      headersTimeout: requestTimeout,
      // Answered below as a problem, instead of Node's bare 400.
      requireHostHeader: false,
    },
    // allErrors stays off: with it, ajv makes an error object for every failing element of a
    // crafted body before answering, however many (docs/http-api.md, "Why request-invalid names
    // one field"); off, the check stops at the first failure, which is the one reported.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, allErrors: false } },
    frameworkErrors: (error, request, reply) => {
      sendProblem(request, reply, error);
      // Raised before routing (a bad percent-encoding, a path over the limit): the onResponse
      // hook, which counts and logs every request, does not run for it.
      refused(request.method, reply.statusCode, request.problemCode ?? undefined);
    },
    // Errors Node's HTTP parser raises before fastify sees a request: headers over the limit
    // (16 KiB), a request that took too long, garbage. Answered as problems, then closed.
    // Closed, not half-closed: a client that stalled (a 408) does not close its side, and until
    // its socket closes, its request's answer has not closed either, which holds the tenant's
    // place among its requests in progress (tenant-requests.ts) until the connection timeout.
    clientErrorHandler: (error, socket) => {
      const code = (error as { code?: string }).code;
      if (code === 'ECONNRESET' || socket.destroyed) return;
      const problem =
        code === 'HPE_HEADER_OVERFLOW'
          ? 'header-too-large'
          : code === 'ERR_HTTP_REQUEST_TIMEOUT'
            ? 'request-timeout'
            : 'bad-request';
      if (socket.writable) socket.end(rawProblemResponse(problem), () => socket.destroy());
      else socket.destroy();
      refused('unparsed', PROBLEMS[problem].status, problem);
    },
  }) as unknown as FastifyInstance;

  /** A request answered before it reached a route, counted and logged as the hook does the rest. */
  function refused(method: string, status: number, problem: string | undefined): void {
    metrics.observeHttp({ method, route: 'unmatched', status, seconds: 0, problem });
    logger.info({ method, route: 'unmatched', status, problem }, 'request');
  }

  // Node answers `Expect: 100-continue` with `100 Continue` as soon as it has the headers, unless
  // the server handles `checkContinue`: the client would send its body, however large, before it
  // is told it has no key. Here it is sent once the body is first read, which is after every
  // check that needs no body (the hooks, the content type and encoding, the declared length);
  // a request refused before then is answered without it, and its connection closed.
  app.server.on('checkContinue', (request: IncomingMessage, response: ServerResponse) => {
    request.once('resume', () => {
      if (!response.headersSent) response.writeContinue();
    });
    app.routing(request, response);
  });

  const routes = recordRoutes(app);
  app.decorateRequest('principal', null);
  app.decorateRequest('problemCode', null);
  if (keys.size === 0) logger.warn('no API keys are configured: every /v1/ route will answer 401');
  registerJsonParser(app, { maxDepth: options.maxJsonDepth ?? DEFAULT_MAX_JSON_DEPTH });

  const maxRequests = capOf(
    'maxRequestsPerTenant',
    options.maxRequestsPerTenant,
    DEFAULT_MAX_REQUESTS_PER_TENANT,
  );
  const tenantRequests = maxRequests === undefined ? undefined : new TenantRequests(maxRequests);
  const maxListings = capOf(
    'maxListingsPerTenant',
    options.maxListingsPerTenant,
    DEFAULT_MAX_LISTINGS_PER_TENANT,
  );
  const listings = maxListings === undefined ? undefined : new TenantListings(maxListings);
  // No `false` here: a process needs a bound on its descriptors whatever else it is given.
  app.server.maxConnections = bounded('maxConnections', options.maxConnections, DEFAULT_MAX_CONNECTIONS, {
    min: 1,
    max: 1_000_000,
    integer: true,
  });
  watchDroppedConnections(app, logger);
  let closing = false;
  app.addHook('preClose', async () => {
    closing = true;
  });

  app.addHook('onRequest', async (request, reply) => {
    if (
      request.headers.host === undefined &&
      request.raw.httpVersionMajor === 1 &&
      request.raw.httpVersionMinor >= 1
    ) {
      throw new ApiError('bad-request', 'an HTTP/1.1 request must carry a Host header (RFC 9112 §3.2)');
    }
    if (closing && request.routeOptions.url !== '/healthz') {
      throw new ApiError('shutting-down', 'the server is shutting down');
    }
    const mode: AuthMode = request.routeOptions.config?.auth ?? 'none';
    if (mode === 'none') return;
    // Node keeps the first of two Authorization headers; a proxy may keep the last. Two are refused.
    if (headerCount(request.raw.rawHeaders, 'authorization') > 1) {
      throw new ApiError('unauthorized', 'send one Authorization header, not several', {
        headers: { 'www-authenticate': 'Bearer realm="sluice", error="invalid_request"' },
      });
    }
    const principal = keys.authenticate(request.headers.authorization);
    if (mode === 'tenant' && principal.kind !== 'tenant') {
      throw new ApiError('forbidden', 'this route needs a tenant key');
    }
    // Any other mode than `any` asks for an admin key: a mode this hook does not know fails closed.
    if (mode !== 'tenant' && mode !== 'any' && mode !== 'key' && principal.kind !== 'admin') {
      throw new ApiError('forbidden', 'this route needs an admin key');
    }
    request.principal = principal;
    if (principal.kind === 'tenant') tenantRequests?.enter(principal.tenant, reply);
  });

  app.addHook('preValidation', async (request) => {
    // No body at all (and so no Content-Type) is the empty body a JSON one would be: 400, not the
    // schema's 422 for a body of the wrong shape.
    if (request.body === undefined && request.routeOptions.schema?.body !== undefined)
      throw new ApiError('body-malformed', 'the body is empty; this route expects a JSON object');
    const schema = request.routeOptions.schema?.querystring as JsonSchema | undefined;
    if (schema && request.query && typeof request.query === 'object') {
      coerceQuery(schema, request.query as Record<string, unknown>);
    }
  });

  app.addHook('onSend', async (_request, reply, payload) => {
    setCommonHeaders(reply);
    return payload;
  });

  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched';
    const problem = request.problemCode ?? undefined;
    metrics.observeHttp({
      method: request.method,
      route,
      status: reply.statusCode,
      seconds: reply.elapsedTime / 1000,
      problem,
    });
    request.log.info(
      {
        method: request.method,
        route,
        status: reply.statusCode,
        ms: Math.round(reply.elapsedTime * 10) / 10,
        tenant: tenantLabel(request),
        operation: operationIdOf(request),
        problem,
      },
      'request',
    );
  });

  app.setErrorHandler((error, request, reply) => sendProblem(request, reply, error));
  app.setNotFoundHandler((request, reply) => {
    const path = pathOf(request.url);
    // A path that exists under other methods is a 405 naming them (RFC 9110 §15.5.6), not a 404.
    const allowed = methodsAt(routes, path);
    sendProblem(
      request,
      reply,
      allowed.length > 0
        ? new ApiError('method-not-allowed', `${path} takes ${allowed.join(', ')}, not ${request.method}`, {
            headers: { allow: allowed.join(', ') },
          })
        : new ApiError('not-found', `no route ${request.method} ${path}`),
    );
  });

  const unbind = metrics.bind({ sluice, workers: options.workers });
  app.addHook('onClose', async () => unbind());
  try {
    if (options.api !== false) {
      operationRoutes(app, { sluice, accepting, listings });
      adminRoutes(app, { sluice });
      tenantRoutes(app, { sluice });
      overviewRoutes(app, { sluice });
      if (options.dashboard !== false) dashboardRoutes(app);
    }
    serviceRoutes(app, { sluice, metrics, accepting, routes, metricsAuth });
    await app.ready();
  } catch (error) {
    unbind();
    throw error;
  }
  return app;
}

/** How often, at most, connections closed over `maxConnections` are logged (one line with their count). */
const DROP_LOG_INTERVAL_MS = 60_000;

/**
 * Logs the connections Node closed for being over `maxConnections`: a flood of them is what the
 * cap is for, and a line for each would be a flood of log lines too.
 */
function watchDroppedConnections(app: FastifyInstance, logger: Logger): void {
  let dropped = 0;
  let loggedAt = Number.NEGATIVE_INFINITY;
  app.server.on('drop', () => {
    dropped++;
    const now = performance.now();
    if (now - loggedAt < DROP_LOG_INTERVAL_MS) return;
    logger.warn(
      { dropped, maxConnections: app.server.maxConnections },
      'connections closed on arrival: the server holds maxConnections already',
    );
    loggedAt = now;
    dropped = 0;
  });
}

const LOGGABLE_ID = new RegExp(OPERATION_ID_PATTERN);
const LOGGABLE_TENANT = new RegExp(TENANT_PATTERN);

function tenantLabel(request: FastifyRequest): string | undefined {
  const p = request.principal;
  if (!p) return undefined;
  if (p.kind === 'tenant') return p.tenant;
  // An admin key's `?tenant=` is what the client sent: logged, as ids are, only if the API would
  // accept it (an array for `?tenant=a&tenant=b`, a newline, a megabyte are refused, and not logged).
  const named = (request.query as { tenant?: unknown } | undefined)?.tenant;
  return typeof named === 'string' && LOGGABLE_TENANT.test(named) ? named : undefined;
}

function operationIdOf(request: FastifyRequest): string | undefined {
  const params = request.params as { id?: string } | undefined;
  const id = params?.id ?? operationIdOfKey(request.headers['idempotency-key']);
  // Only an id the API could accept is logged: a refused one may hold anything a client sent
  // (control characters decoded from the path, a megabyte-long header), which a log line should
  // not carry; the line's problem code says why it was refused.
  return typeof id === 'string' && LOGGABLE_ID.test(id) ? id : undefined;
}

/** How many times a header appears in Node's raw list (names at even indexes, any case). */
function headerCount(raw: readonly string[], name: string): number {
  let n = 0;
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) n++;
  return n;
}
