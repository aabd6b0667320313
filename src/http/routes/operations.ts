/**
 * @module http/routes/operations
 * The tenant's operations: submit (with `Idempotency-Key`), read one, list, cancel.
 *
 * Submit answers `202 Accepted` + `Location` only once the engine has made the record durable,
 * and a retry with the same key and the same `{kind, input}` answers `200` with that operation
 * as it is now and `Idempotent-Replayed: true` — never a second operation, however many arrive
 * at once (the store's transaction decides). Every refusal before acceptance stores nothing,
 * so the client may retry the same key once the cause is fixed.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { OperationNotFound } from '../../core/errors/index.js';
import type { Operation } from '../../core/operation.js';
import type { OperationState } from '../../core/states.js';
import type { Include, Sluice } from '../../sluice.js';
import { pollAfterSeconds } from '../poll-hint.js';
import { ApiError } from '../problem.js';
import { listedTenantFor, principalOf, tenantFor } from '../route-config.js';
import {
  cancelQuerySchema,
  cancelResponseSchema,
  getQuerySchema,
  idempotencyKeyHeaderSchema,
  listQuerySchema,
  listResponseSchema,
  noQuerySchema,
  OPERATION_ID_PATTERN,
  operationIdParamsSchema,
  operationSchema,
  QUOTED_OPERATION_ID_PATTERN,
  submitBodySchema,
} from '../schemas.js';
import { StoreClock } from '../store-clock.js';
import type { TenantListings } from '../tenant-listings.js';
import { operationFor } from '../tenant-view.js';

export const operationPath = (id: string) => `/v1/operations/${encodeURIComponent(id)}`;

const KEY = new RegExp(OPERATION_ID_PATTERN);
const QUOTED = new RegExp(QUOTED_OPERATION_ID_PATTERN);

/**
 * The operation id an `Idempotency-Key` header names. The IETF draft defines the header as a
 * structured-field string (RFC 8941): `Idempotency-Key: "8e03978e-40d5"`, quotes included, `\"`
 * and `\\` escaped; many clients (and Stripe's) send the key bare. A value that begins and ends
 * with a quote is read as the draft's string, unquoted; any other is the id as it came. Undefined
 * when the header is missing, repeated, or a quoted string that is not one of an id's.
 */
export function operationIdOfKey(key: unknown): string | undefined {
  if (typeof key !== 'string') return undefined;
  if (key.length < 2 || !key.startsWith('"') || !key.endsWith('"')) return key;
  return QUOTED.test(key) ? key.slice(1, -1).replace(/\\(["\\])/g, '$1') : undefined;
}

/** Checked before the body is read: a request without a usable key is refused at once. */
export function checkIdempotencyKey(request: FastifyRequest): void {
  const key = request.headers['idempotency-key'];
  if (key === undefined) {
    throw new ApiError('idempotency-key-missing', 'send the operation id as the Idempotency-Key header', {
      errors: [{ parameter: 'Idempotency-Key', detail: 'required' }],
    });
  }
  const id = operationIdOfKey(key);
  if (id === undefined || !KEY.test(id)) {
    throw new ApiError(
      'idempotency-key-invalid',
      'the Idempotency-Key must be 1–255 visible ASCII characters (no spaces), sent once, bare or as a quoted string',
      { errors: [{ parameter: 'Idempotency-Key', detail: 'must be 1–255 visible ASCII characters' }] },
    );
  }
  // URLs resolve `.` and `..` as path steps (RFC 3986 §5.2.4), percent-encoded or not: no URL
  // could name such an operation, so no `Location` could point at it.
  if (id === '.' || id === '..') {
    throw new ApiError(
      'idempotency-key-invalid',
      `the Idempotency-Key ${key} cannot name a URL path segment`,
      {
        errors: [{ parameter: 'Idempotency-Key', detail: 'must not be . or ..' }],
      },
    );
  }
}

interface SubmitBody {
  kind: string;
  input: unknown;
  deadlineMs?: number;
  delayMs?: number;
}

export function operationRoutes(
  app: FastifyInstance,
  deps: { sluice: Sluice; accepting: () => boolean; listings?: TenantListings },
): void {
  const { sluice } = deps;
  const clock = new StoreClock(sluice.store);

  app.post(
    '/v1/operations',
    {
      schema: {
        summary: 'Submit an operation',
        description:
          'Accepts the operation durably under the Idempotency-Key, or answers with the operation already ' +
          'accepted under it. Same key and same {kind, input}: 200 with that operation as it is now. Same key ' +
          'and another input: 422 `idempotency-key-reused`. `deadlineMs` and `delayMs` are not part of the ' +
          'comparison.',
        operationId: 'submitOperation',
        tags: ['operations'],
        headers: idempotencyKeyHeaderSchema,
        querystring: noQuerySchema,
        body: submitBodySchema,
        response: {
          202: { ...operationSchema, description: 'Accepted: the record is durable. `Location` names it.' },
          200: {
            ...operationSchema,
            description:
              'A replay: the operation already accepted under this key, with `Idempotent-Replayed: true`.',
          },
        },
      },
      config: {
        auth: 'tenant',
        inputByKind: true,
        problems: [
          'idempotency-key-missing',
          'idempotency-key-invalid',
          'idempotency-key-reused',
          'operation-expired',
          'kind-unknown',
          'input-invalid',
          'input-not-json',
          'input-too-large',
          'invalid-argument',
          'tenant-queue-full',
          'class-queue-full',
          'store-unavailable',
          'shutting-down',
        ],
      },
      onRequest: async (request) => {
        if (!deps.accepting()) {
          throw new ApiError('shutting-down', 'this server is shutting down and accepts no new operations');
        }
        checkIdempotencyKey(request);
      },
    },
    async (request: FastifyRequest, reply: FastifyReply) => {
      const principal = principalOf(request);
      if (principal.kind !== 'tenant') throw new ApiError('forbidden', 'submitting needs a tenant key');
      const id = operationIdOfKey(request.headers['idempotency-key'])!;
      const body = request.body as SubmitBody;
      const { operation, created } = await sluice.submit({
        tenant: principal.tenant,
        id,
        kind: body.kind,
        input: body.input,
        deadlineMs: body.deadlineMs,
        delayMs: body.delayMs,
      });
      reply.header('location', operationPath(id));
      if (!created) reply.header('idempotent-replayed', 'true');
      await setPollHint(reply, operation, clock);
      return reply.code(created ? 202 : 200).send(operationFor(principal, operation));
    },
  );

  app.get(
    '/v1/operations/:id',
    {
      schema: {
        summary: 'Get an operation',
        description:
          'State, attempt count, result or error, and cancel outcome; `include` adds the attempt history, ' +
          "the effect journal and operator actions. Another tenant's operation is 404.",
        operationId: 'getOperation',
        tags: ['operations'],
        params: operationIdParamsSchema,
        querystring: getQuerySchema,
        response: { 200: { ...operationSchema, description: 'The operation.' } },
      },
      config: { auth: 'any', problems: ['operation-not-found', 'invalid-argument', 'store-unavailable'] },
    },
    async (request, reply) => {
      const tenant = tenantFor(request);
      const { id } = request.params as { id: string };
      const include = (request.query as { include?: string }).include?.split(',') as Include[] | undefined;
      const op = await sluice.get({ tenant, id }, { include });
      if (!op) throw new OperationNotFound(tenant, id);
      await setPollHint(reply, op, clock);
      return operationFor(principalOf(request), op);
    },
  );

  app.get(
    '/v1/operations',
    {
      schema: {
        summary: 'List operations',
        description:
          "The tenant's own operations in acceptance order, one page at a time: at most `limit`, and about " +
          '1 MiB of inputs, results and errors. An admin key names the tenant (`tenant`), or names none to list every ' +
          "tenant's operations waiting for an operator: `state=dead` or `state=needs_reconciliation` (any other state " +
          'without a tenant is `400 invalid-argument`). By default, at most 2 listings of a tenant (or of an admin key) ' +
          'in progress on a server (`http.maxListingsPerTenant`): one more is `429 too-many-listings`.',
        operationId: 'listOperations',
        tags: ['operations'],
        querystring: listQuerySchema,
        response: { 200: { ...listResponseSchema, description: 'One page.' } },
      },
      config: { auth: 'any', problems: ['invalid-argument', 'too-many-listings', 'store-unavailable'] },
    },
    async (request) => {
      const q = request.query as { state?: OperationState; kind?: string; cursor?: string; limit?: number };
      const tenant = listedTenantFor(request, q.state);
      const principal = principalOf(request);
      const list = async () => {
        const page = await sluice.list({
          tenant,
          state: q.state,
          kind: q.kind,
          cursor: q.cursor,
          limit: q.limit,
        });
        return { ...page, operations: page.operations.map((op) => operationFor(principal, op)) };
      };
      return deps.listings ? deps.listings.run(principal, list) : list();
    },
  );

  app.post(
    '/v1/operations/:id/cancel',
    {
      schema: {
        summary: 'Cancel an operation',
        description:
          'A queued operation is cancelled at once; a running one has its signal fired and ends cancelled ' +
          'only if no effect began; otherwise it is too late and it reports its own result. No body.',
        operationId: 'cancelOperation',
        tags: ['operations'],
        params: operationIdParamsSchema,
        querystring: cancelQuerySchema,
        response: { 200: { ...cancelResponseSchema, description: 'The operation and the cancel outcome.' } },
      },
      config: { auth: 'any', problems: ['operation-not-found', 'store-unavailable'] },
    },
    async (request) => {
      const tenant = tenantFor(request);
      const { id } = request.params as { id: string };
      const principal = principalOf(request);
      const out = await sluice.cancel({ tenant, id }, { by: principal.id });
      return { ...out, operation: operationFor(principal, out.operation) };
    },
  );
}

/** Counted on the store's clock, the one `runAfter` is on, not this host's. */
async function setPollHint(reply: FastifyReply, op: Operation, clock: StoreClock): Promise<void> {
  // Only a queued operation's hint reads the clock: it counts to the operation's `runAfter`.
  const seconds = pollAfterSeconds(op, op.state === 'queued' ? await clock.now() : 0);
  if (seconds !== undefined) reply.header('retry-after', String(seconds));
}
