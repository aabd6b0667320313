/**
 * @module http/problem
 * The one place where an error becomes an HTTP response. Every error code — the engine's
 * (docs/errors.md) and the HTTP layer's own — maps here to a status and an RFC 9457 problem
 * (`application/problem+json`) whose `type` is the stable URI `https://sluice.dev/problems/<code>`.
 * Routes and hooks only throw; fastify's error handler, not-found handler, framework-error hook
 * and client-error handler all end here.
 *
 * The HTTP layer's own refusals are `ApiError`s: a `SluiceError` with an HTTP code, so the
 * same guards and the same table apply. Details of 5xx errors (a database message, a stack) are
 * logged, never sent.
 */
import { STATUS_CODES } from 'node:http';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { isSluiceError, SluiceError, type SluiceErrorCode } from '../core/errors/index.js';

export const PROBLEM_TYPE_BASE = 'https://sluice.dev/problems/';
export const PROBLEM_CONTENT_TYPE = 'application/problem+json';

/** One failing field: `pointer` (JSON Pointer into the body, RFC 6901 as a URI fragment) or `parameter`. */
export interface FieldError {
  pointer?: string;
  parameter?: string;
  detail: string;
}

export interface Problem {
  type: string;
  title: string;
  status: number;
  detail: string;
  instance?: string;
  /** The bare code, the last segment of `type`. */
  code: string;
  [extension: string]: unknown;
}

interface ProblemSpec {
  status: number;
  title: string;
  /** Default `Retry-After` when the error does not carry its own estimate. */
  retryAfterMs?: number;
  /** An attempt outcome that lives in an operation's `error`; never an HTTP error (500 if it ever escapes). */
  outcomeOnly?: true;
}

/** The HTTP layer's own refusals. Its codes are in `PROBLEMS` below, like every other code. */
export class ApiError extends SluiceError {
  readonly retryAfterMs: number | undefined;
  readonly errors: FieldError[] | undefined;
  readonly headers: Record<string, string> | undefined;
  constructor(
    code: HttpProblemCode | 'invalid-argument',
    message: string,
    extra: { retryAfterMs?: number; errors?: FieldError[]; headers?: Record<string, string> } = {},
  ) {
    const status = PROBLEMS[code]!.status;
    super(code, message, { retryable: status >= 500 || status === 429 });
    this.retryAfterMs = extra.retryAfterMs;
    this.errors = extra.errors;
    this.headers = extra.headers;
  }
}

const STORE_RETRY_MS = 2000;

/** Codes the HTTP layer raises itself (ApiError), in addition to the engine's. */
const HTTP_PROBLEMS = {
  unauthorized: { status: 401, title: 'Missing or unknown API key' },
  forbidden: { status: 403, title: 'This key may not do that' },
  'not-found': { status: 404, title: 'Not found' },
  'method-not-allowed': { status: 405, title: 'The route does not take this method' },
  'idempotency-key-missing': { status: 400, title: 'Idempotency-Key header is required' },
  'idempotency-key-invalid': { status: 400, title: 'Idempotency-Key header is malformed' },
  'body-malformed': { status: 400, title: 'The body is not valid JSON' },
  'body-too-deep': { status: 400, title: 'The body is nested too deeply' },
  'number-out-of-range': { status: 400, title: 'A number in the body cannot be represented exactly' },
  'bad-request': { status: 400, title: 'Bad request' },
  'url-invalid': { status: 400, title: 'The URL is malformed' },
  'request-timeout': { status: 408, title: 'The request took too long to arrive' },
  'body-too-large': { status: 413, title: 'The body is larger than the server accepts' },
  'uri-too-long': { status: 414, title: 'A path segment is too long' },
  'unsupported-media-type': { status: 415, title: 'The body must be application/json' },
  'request-invalid': { status: 422, title: 'The request body does not match its schema' },
  'header-too-large': { status: 431, title: 'The request headers are too large' },
  'tenant-too-many-requests': {
    status: 429,
    title: 'The tenant has too many requests in progress',
    retryAfterMs: 1000,
  },
  'too-many-listings': {
    status: 429,
    title: 'Too many listings in progress for this tenant or admin key',
    retryAfterMs: 1000,
  },
  'shutting-down': { status: 503, title: 'The server is shutting down', retryAfterMs: 1000 },
  'not-ready': { status: 503, title: 'The store does not answer', retryAfterMs: STORE_RETRY_MS },
  'internal-error': { status: 500, title: 'Internal server error' },
} as const satisfies Record<string, ProblemSpec>;

export type HttpProblemCode = keyof typeof HTTP_PROBLEMS;

const OUTCOME = { status: 500, title: 'An attempt outcome escaped to the API', outcomeOnly: true } as const;

/** The engine's codes, in docs/errors.md order: every one of them, and no other (`satisfies`). */
const ENGINE_PROBLEMS = {
  'idempotency-key-reused': {
    status: 422,
    title: 'The Idempotency-Key was already used with another request',
  },
  'operation-expired': { status: 422, title: 'The operation under this key finished and was purged' },
  'operation-not-found': { status: 404, title: 'No such operation' },
  'operation-state-invalid': { status: 409, title: "The operation's state does not allow this" },
  'input-invalid': { status: 422, title: "The input does not match the kind's schema" },
  'input-not-json': { status: 422, title: 'The input is not plain JSON' },
  'input-too-large': { status: 413, title: "The input is larger than the kind's limit" },
  'kind-unknown': { status: 422, title: 'No such operation kind' },
  'invalid-argument': { status: 400, title: 'An argument is out of range' },
  'tenant-queue-full': { status: 429, title: 'The tenant has too many operations waiting' },
  'class-queue-full': { status: 503, title: 'The service has too many operations waiting' },
  'budget-exhausted': { status: 429, title: 'A spend or call budget is exhausted' },
  'wait-timeout': { status: 503, title: 'The awaited state was not reached in time', retryAfterMs: 1000 },
  'store-unavailable': { status: 503, title: 'The store is unavailable', retryAfterMs: STORE_RETRY_MS },
  'store-busy': { status: 503, title: 'The store is busy', retryAfterMs: STORE_RETRY_MS },
  'store-serialization': { status: 503, title: 'The store hit a conflict', retryAfterMs: STORE_RETRY_MS },
  'store-statement-timeout': { status: 503, title: 'The store timed out', retryAfterMs: STORE_RETRY_MS },
  'store-unique-violation': { status: 500, title: 'The store refused a duplicate' },
  'store-schema-newer': { status: 500, title: "The store's schema is newer than this build" },
  'store-not-migrated': {
    status: 503,
    title: 'The store is not migrated to this build',
    retryAfterMs: STORE_RETRY_MS,
  },
  // Only a process shutting down meets it (the service closes its store after its server): to
  // the client, the server going away, for another (or this one restarted) to answer.
  'store-closed': { status: 503, title: 'The server has closed its store', retryAfterMs: 1000 },
  'store-unknown': { status: 500, title: 'The store failed' },
  // Attempt and operation outcomes (docs/errors.md, second table): they describe how an
  // operation ended and appear in its `error`; no API call raises them.
  'permanent-failure': OUTCOME,
  'retryable-failure': OUTCOME,
  'ambiguous-outcome': OUTCOME,
  'unclassified-error': OUTCOME,
  'effect-key-conflict': OUTCOME,
  'effect-outcome-unknown': OUTCOME,
  'attempts-exhausted': OUTCOME,
  'crash-loop': OUTCOME,
  'deadline-exceeded': OUTCOME,
  'retry-budget-exhausted': OUTCOME,
  'temp-limit-exceeded': OUTCOME,
  'provider-call-limit-exceeded': OUTCOME,
  'attempt-timeout': OUTCOME,
  'attempt-ended': OUTCOME,
  'lease-lost': OUTCOME,
  'cancel-requested': OUTCOME,
  'worker-shutdown': OUTCOME,
  'lease-expired': OUTCOME,
  'result-not-json': OUTCOME,
  'result-too-large': OUTCOME,
  'effect-result-not-json': OUTCOME,
  'effect-result-too-large': OUTCOME,
  'lookup-answer-invalid': OUTCOME,
  'reconciled-failed': OUTCOME,
  'effect-failed': OUTCOME,
} satisfies Record<SluiceErrorCode, ProblemSpec>;

/**
 * Every code, its status and title: the engine's, then the HTTP layer's own (a test checks that
 * every code of docs/errors.md is here).
 */
export const PROBLEMS: Record<string, ProblemSpec> & Record<SluiceErrorCode | HttpProblemCode, ProblemSpec> =
  {
    ...ENGINE_PROBLEMS,
    ...HTTP_PROBLEMS,
  };

/** The codes a client can actually receive (everything but attempt outcomes). */
export function problemCodes(): string[] {
  return Object.entries(PROBLEMS)
    .filter(([, spec]) => !spec.outcomeOnly)
    .map(([code]) => code);
}

export const problemType = (code: string): string => PROBLEM_TYPE_BASE + code;

/** Fastify's own errors, by their code. */
const FASTIFY_CODES: Record<string, HttpProblemCode> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'body-too-large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported-media-type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'body-malformed',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'body-malformed',
  FST_ERR_CTP_INVALID_JSON_BODY: 'body-malformed',
  FST_ERR_BAD_URL: 'url-invalid',
  FST_ERR_MAX_PARAM_LENGTH: 'uri-too-long',
  FST_ERR_NOT_FOUND: 'not-found',
};

/** Clearer words than fastify's for the refusals clients meet most. */
const FASTIFY_DETAILS: Partial<Record<HttpProblemCode, string>> = {
  'body-too-large': 'the body is larger than this server accepts; it was not read',
  'unsupported-media-type': 'send the body as application/json',
};

interface AjvError {
  instancePath: string;
  keyword: string;
  params: Record<string, unknown>;
  message?: string;
}

/** RFC 6901: `~` → `~0`, `/` → `~1`. */
export function jsonPointer(path: ReadonlyArray<string | number>): string {
  return path.map((seg) => `/${String(seg).replaceAll('~', '~0').replaceAll('/', '~1')}`).join('');
}

function validationErrors(context: string, errors: AjvError[]): FieldError[] {
  return errors.map((e) => {
    const missing = e.keyword === 'required' ? `/${String(e.params.missingProperty)}` : '';
    const extra = e.keyword === 'additionalProperties' ? `/${String(e.params.additionalProperty)}` : '';
    const where = `${e.instancePath}${missing}${extra}`;
    const detail = e.message ?? e.keyword;
    if (context === 'body') return { pointer: `#${where}`, detail };
    return { parameter: where.replace(/^\//, '') || context, detail };
  });
}

export interface ProblemResponse {
  status: number;
  headers: Record<string, string>;
  body: Problem;
}

/** Maps anything thrown to its problem. The only function that decides a status from an error. */
export function toProblem(error: unknown, instance?: string): ProblemResponse {
  let code: string;
  let detail: string;
  const extensions: Record<string, unknown> = {};
  const headers: Record<string, string> = {};
  let retryAfterMs: number | undefined;

  const fastify = error as { code?: unknown; statusCode?: unknown; validation?: unknown; message?: string };
  if (isSluiceError(error)) {
    code = Object.hasOwn(PROBLEMS, error.code) ? error.code : 'internal-error';
    detail = error.message;
    if (error instanceof ApiError) {
      if (error.errors) extensions.errors = error.errors;
      if (error.headers) Object.assign(headers, error.headers);
      retryAfterMs = error.retryAfterMs;
    }
    const e = error as unknown as Record<string, unknown>;
    if (error.code === 'input-invalid' && Array.isArray(e.issues)) {
      extensions.errors = (e.issues as Array<{ path: Array<string | number>; message: string }>).map((i) => ({
        pointer: `#/input${jsonPointer(i.path)}`,
        detail: i.message,
      }));
      if (typeof e.omitted === 'number' && e.omitted > 0) extensions.errorsOmitted = e.omitted;
    }
    if (error.code === 'input-too-large') {
      extensions.limitBytes = e.limitBytes;
      extensions.actualBytes = e.actualBytes;
    }
    if (error.code === 'operation-state-invalid') extensions.state = e.state;
    if (typeof e.retryAfterMs === 'number') retryAfterMs = e.retryAfterMs;
  } else if (fastify?.code === 'FST_ERR_VALIDATION' && Array.isArray(fastify.validation)) {
    const context = String((error as { validationContext?: unknown }).validationContext ?? 'body');
    code = context === 'body' ? 'request-invalid' : 'invalid-argument';
    detail = fastify.message ?? 'the request is invalid';
    extensions.errors = validationErrors(context, fastify.validation as AjvError[]);
  } else if (typeof fastify?.code === 'string' && Object.hasOwn(FASTIFY_CODES, fastify.code)) {
    code = FASTIFY_CODES[fastify.code]!;
    detail = FASTIFY_DETAILS[code as HttpProblemCode] ?? fastify.message ?? PROBLEMS[code]!.title;
  } else if (
    typeof fastify?.statusCode === 'number' &&
    fastify.statusCode >= 400 &&
    fastify.statusCode < 500
  ) {
    const byStatus: Record<number, HttpProblemCode> = {
      404: 'not-found',
      408: 'request-timeout',
      413: 'body-too-large',
      415: 'unsupported-media-type',
    };
    code = byStatus[fastify.statusCode] ?? 'bad-request';
    detail = fastify.message ?? PROBLEMS[code]!.title;
  } else {
    code = 'internal-error';
    detail = '';
  }

  const spec = PROBLEMS[code]!;
  if (spec.status >= 500 && !(error instanceof ApiError)) {
    // Never send a database message, a stack or an unexpected error's text; the log has them.
    detail =
      code === 'internal-error'
        ? 'the server failed to answer; the error is in its log'
        : `${spec.title}; retry later`;
  }
  retryAfterMs ??= spec.retryAfterMs;
  if (retryAfterMs !== undefined && (spec.status === 429 || spec.status === 503)) {
    headers['retry-after'] = String(Math.max(1, Math.ceil(retryAfterMs / 1000)));
  }
  const body: Problem = {
    type: problemType(code),
    title: spec.title,
    status: spec.status,
    detail,
    ...(instance === undefined ? {} : { instance }),
    code,
    ...extensions,
  };
  return { status: spec.status, headers, body };
}

/** Sends the problem for `error`; logs the cause of a 5xx. */
export function sendProblem(request: FastifyRequest, reply: FastifyReply, error: unknown): FastifyReply {
  const problem = toProblem(error, safeInstance(pathOf(request.url)));
  request.problemCode = problem.body.code;
  if (problem.status >= 500 && !(error instanceof ApiError)) {
    // 503: the store is struggling (expected, retryable); 500: a bug.
    const level = problem.status === 503 ? 'warn' : 'error';
    request.log[level]({ err: error, problem: problem.body.code }, 'request failed');
  }
  reply.code(problem.status);
  for (const [name, value] of Object.entries(problem.headers)) reply.header(name, value);
  // A refusal sent before the body has been read (a 401, 403, 429 or 503 from the hooks, a 415
  // or 413 before reading) ends the connection: kept alive, Node would go on to read and discard
  // the whole body the request declared, however large, for a client it has just refused. A
  // request that declares no body is complete once its headers are in, and stays kept alive.
  // (`complete` is undefined for `inject`, whose body is already in memory.)
  if (request.raw.complete === false) reply.header('connection', 'close');
  // Set here too: a problem raised before routing (a malformed URL) skips the onSend hook.
  setCommonHeaders(reply);
  return reply.type(PROBLEM_CONTENT_TYPE).send(JSON.stringify(problem.body));
}

/**
 * What every answer carries. `/v1/` answers are a tenant's data, never to be stored by a cache;
 * so is every answer, since the path a route was matched by is not the path as sent
 * (`/%761/operations/O7` is routed as `/v1/operations/O7`), and the public routes' answers (the
 * metrics, the probes) go stale at once anyway. Every answer is JSON or plain text, and
 * operations echo inputs and results a tenant chose: no browser may guess a type it would run
 * (OWASP's REST headers).
 */
export function setCommonHeaders(reply: FastifyReply): void {
  reply.header('cache-control', 'no-store');
  reply.header('x-content-type-options', 'nosniff');
}

/**
 * A request target's path, without its query (which may carry anything). HTTP/1.1 servers must
 * accept the absolute form (`GET http://host/v1/…`, RFC 9112 §3.2.2), which fastify routes as the
 * path it names: read as it came, a wrong method would lose its 405.
 */
export function pathOf(url: string): string {
  if (!url.startsWith('/')) {
    try {
      return new URL(url).pathname;
    } catch {
      return '';
    }
  }
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
}

/**
 * The path, bounded. RFC 9457 §3.1.5 has `instance` be a URI reference: the cut keeps whole
 * `%XX` escapes, and says it cut with an ellipsis escaped as one (a bare `…` is not allowed there).
 */
function safeInstance(path: string): string {
  if (path.length <= 1024) return path;
  return `${path.slice(0, 1024).replace(/%[0-9A-Fa-f]?$/, '')}%E2%80%A6`;
}

/**
 * For the raw socket, where fastify is not involved (a header overflow, a request timeout). The
 * request may not have been parsed far enough to know its path, so every raw answer carries what
 * a `/v1/` answer does.
 */
export function rawProblemResponse(code: HttpProblemCode): string {
  const { status, body } = toProblem(new ApiError(code, PROBLEMS[code].title));
  const text = JSON.stringify(body);
  return (
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n` +
    `Content-Type: ${PROBLEM_CONTENT_TYPE}\r\nContent-Length: ${Buffer.byteLength(text)}\r\n` +
    'Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n' +
    `Connection: close\r\n\r\n${text}`
  );
}
