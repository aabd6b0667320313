/**
 * @module http/schemas
 * The JSON Schemas of the API: fastify validates requests with them and serializes responses
 * with them, and the OpenAPI document (http/openapi.ts) is generated from the same objects, so
 * the document cannot drift from what the routes accept and return.
 *
 * Validation is strict: no type coercion and no silent removal of unknown body fields (a body
 * that names a `tenant` is refused, not trimmed). Query integers are converted from their text
 * by `coerceQuery` below, driven by these schemas.
 */
import { OPERATION_STATES } from '../core/states.js';
import { MAX_BY_CHARS, MAX_REASON_CHARS } from '../core/stored-text.js';
import { KIND_NAME } from '../runtime/kinds.js';
import { MAX_REDRIVE_MANY } from '../sluice.js';

export type JsonSchema = Record<string, unknown>;

/** 1–255 visible ASCII characters: the operation id and Idempotency-Key rule (core/identity.ts). */
export const OPERATION_ID_PATTERN = '^[\\x21-\\x7e]{1,255}$';
/** An id as the IETF draft sends `Idempotency-Key`: an RFC 8941 string, `\"` and `\\` escaped. */
export const QUOTED_OPERATION_ID_PATTERN = '^"(?:[\\x21\\x23-\\x5b\\x5d-\\x7e]|\\\\[\\x22\\x5c]){1,255}"$';
export const TENANT_PATTERN = '^[\\x21-\\x7e]{1,128}$';
/**
 * Free text the store keeps as text (an operator's `by` and `reason`, a provider reference):
 * anything but NUL, which PostgreSQL's text cannot hold (a 500 from the store otherwise), and a
 * lone surrogate, which is not Unicode text: each store would keep another replacement for it.
 * (In Unicode mode a surrogate pair is one code point, of another category than Cs.)
 */
const TEXT_PATTERN = '^[^\\u0000\\p{Cs}]*$';
/** Not blank: what an operator's `by` and `reason` must hold besides (the engine's rule too). */
const NOT_BLANK = { pattern: '\\S' };

const nullable = (schema: JsonSchema): JsonSchema => ({
  ...schema,
  type: [schema.type as string, 'null'],
});
const dateTime = { type: 'string', format: 'date-time' } as const;

export const errorRecordSchema: JsonSchema = {
  type: 'object',
  description:
    'A classified failure; codes in docs/errors.md. For a tenant key, an `unclassified-error` or a store error (`store-unavailable`, …) reads as a fixed sentence, its `details` left out.',
  required: ['code', 'message'],
  properties: {
    code: { type: 'string' },
    message: { type: 'string' },
    outcome: { type: 'string', enum: ['permanent', 'retryable', 'ambiguous', 'interrupted'] },
    details: {},
  },
};

const attemptSchema: JsonSchema = {
  type: 'object',
  required: ['attempt', 'startedAt', 'endedAt', 'outcome', 'error', 'retryDelayMs', 'worker'],
  properties: {
    attempt: { type: 'integer' },
    startedAt: dateTime,
    endedAt: dateTime,
    outcome: { type: 'string' },
    error: nullable(errorRecordSchema),
    retryDelayMs: { type: ['integer', 'null'] },
    worker: {
      type: ['string', 'null'],
      description:
        'The worker that ran the attempt; null for a tenant key, which is not shown how the service is deployed.',
    },
  },
};

const effectSchema: JsonSchema = {
  type: 'object',
  required: [
    'name',
    'key',
    'state',
    'provider',
    'firstSentAt',
    'sends',
    'committedAt',
    'reference',
    'result',
    'error',
  ],
  properties: {
    name: { type: 'string' },
    key: { type: 'string', description: 'The provider idempotency key: stable forever.' },
    state: { type: 'string', enum: ['pending', 'absent', 'committed', 'failed'] },
    provider: { type: ['string', 'null'] },
    firstSentAt: dateTime,
    sends: { type: 'integer' },
    committedAt: nullable(dateTime),
    reference: { type: ['string', 'null'] },
    result: {},
    error: nullable(errorRecordSchema),
  },
};

const eventSchema: JsonSchema = {
  type: 'object',
  required: ['at', 'action', 'by', 'reason', 'detail'],
  properties: {
    at: dateTime,
    action: { type: 'string' },
    by: {
      type: 'string',
      description:
        'Who acted; a tenant key reads `operator` unless it was one of its own keys (`tenant:<tenant>`).',
    },
    reason: { type: 'string' },
    detail: {},
  },
};

/** The public view of an operation (core/operation.ts `Operation`). */
export const operationSchema: JsonSchema = {
  type: 'object',
  required: [
    'tenant',
    'id',
    'kind',
    'class',
    'state',
    'digest',
    'input',
    'attempt',
    'maxAttempts',
    'createdAt',
    'updatedAt',
    'runAfter',
    'deadlineAt',
    'finishedAt',
    'result',
    'error',
    'cancel',
    'lease',
  ],
  properties: {
    tenant: { type: 'string' },
    id: { type: 'string', description: 'The Idempotency-Key it was submitted with.' },
    kind: { type: 'string' },
    class: { type: 'string' },
    state: { type: 'string', enum: [...OPERATION_STATES] },
    digest: { type: 'string', description: 'SHA-256 of the RFC 8785 canonical JSON of {kind, input}.' },
    input: {},
    attempt: { type: 'integer', description: 'Attempts started in the current attempt count.' },
    maxAttempts: { type: 'integer' },
    createdAt: dateTime,
    updatedAt: dateTime,
    runAfter: dateTime,
    deadlineAt: nullable(dateTime),
    finishedAt: nullable(dateTime),
    result: { description: "The handler's result once succeeded; null before." },
    error: nullable(errorRecordSchema),
    cancel: {
      type: ['string', 'null'],
      enum: ['requested', 'too_late', null],
      description: '`requested`: a cancel is pending; `too_late`: an effect had begun, the operation ran on.',
    },
    lease: {
      type: ['object', 'null'],
      required: ['worker', 'expiresAt'],
      properties: {
        worker: {
          type: ['string', 'null'],
          description: 'The worker holding the lease; null for a tenant key.',
        },
        expiresAt: dateTime,
      },
    },
    attempts: { type: 'array', items: attemptSchema, description: 'With `?include=attempts`.' },
    effects: { type: 'array', items: effectSchema, description: 'With `?include=effects`.' },
    events: { type: 'array', items: eventSchema, description: 'With `?include=events`: operator actions.' },
  },
};

export const fieldErrorSchema: JsonSchema = {
  type: 'object',
  required: ['detail'],
  properties: {
    pointer: { type: 'string', description: 'JSON Pointer (as a URI fragment) into the body.' },
    parameter: { type: 'string', description: 'The query or path parameter.' },
    detail: { type: 'string' },
  },
};

/** RFC 9457 problem details, with Sluice's extensions. */
export const problemSchema: JsonSchema = {
  type: 'object',
  required: ['type', 'title', 'status', 'detail', 'code'],
  properties: {
    type: { type: 'string', format: 'uri', description: '`https://sluice.dev/problems/<code>`: stable.' },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    instance: { type: 'string' },
    code: { type: 'string', description: 'The last segment of `type`.' },
    errors: {
      type: 'array',
      items: fieldErrorSchema,
      description:
        'Failing fields: the failing paths of the input for `input-invalid` (the first 50); the first ' +
        'failing field for `request-invalid` and `invalid-argument` (see docs/http-api.md).',
    },
    errorsOmitted: {
      type: 'integer',
      description: '`input-invalid`: how many failing paths `errors` leaves out beyond its first 50.',
    },
    limitBytes: { type: 'integer' },
    actualBytes: { type: 'integer' },
    state: { type: 'string' },
  },
  additionalProperties: true,
};

/** POST /v1/operations body. Kinds' own input schemas refine `input` in the OpenAPI document. */
export const submitBodySchema: JsonSchema = {
  type: 'object',
  required: ['kind', 'input'],
  additionalProperties: false,
  properties: {
    kind: { type: 'string', minLength: 1, maxLength: 64 },
    input: { description: "The operation's input, validated against the kind's schema." },
    deadlineMs: {
      type: 'integer',
      minimum: 1,
      maximum: 31_536_000_000,
      description: "An overall deadline shorter than the kind's, in ms from acceptance.",
    },
    delayMs: {
      type: 'integer',
      minimum: 0,
      maximum: 31_536_000_000,
      description: 'Do not start before this many ms from acceptance.',
    },
  },
};

export const idempotencyKeyHeaderSchema: JsonSchema = {
  type: 'object',
  required: ['idempotency-key'],
  properties: {
    'idempotency-key': {
      type: 'string',
      // Bare, or the draft's quoted string (routes/operations.ts operationIdOfKey).
      pattern: `^(?:${OPERATION_ID_PATTERN.slice(1, -1)}|${QUOTED_OPERATION_ID_PATTERN.slice(1, -1)})$`,
      // URLs resolve them as path steps: no URL could name such an operation (routes/operations.ts).
      not: { enum: ['.', '..', '"."', '".."'] },
      description:
        "The operation's id, chosen by the client: 1–255 visible ASCII characters, not `.` or `..`; bare " +
        '(`Idempotency-Key: order-7`) or as the IETF draft sends it, a structured-field string ' +
        '(`Idempotency-Key: "order-7"`, the same id). Retrying with the same key and the same input ' +
        'answers with the same operation.',
    },
  },
};

export const operationIdParamsSchema: JsonSchema = {
  type: 'object',
  required: ['id'],
  properties: { id: { type: 'string', pattern: OPERATION_ID_PATTERN, description: 'The operation id.' } },
};

export const adminTenantQuerySchema: JsonSchema = {
  type: 'object',
  required: ['tenant'],
  additionalProperties: false,
  properties: { tenant: { type: 'string', pattern: TENANT_PATTERN, description: "The operation's tenant." } },
};

const adminTenantOptional = {
  type: 'string',
  pattern: TENANT_PATTERN,
  description: 'Admin keys only: the tenant to act for. A tenant key always acts for its own.',
};

export const getQuerySchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    include: {
      type: 'string',
      pattern: '^(attempts|effects|events)(,(attempts|effects|events))*$',
      description: 'Comma-separated: `attempts`, `effects`, `events`.',
    },
    tenant: adminTenantOptional,
  },
};

export const listQuerySchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    state: { type: 'string', enum: [...OPERATION_STATES] },
    kind: { type: 'string', pattern: KIND_NAME.source, description: 'A kind name.' },
    cursor: {
      type: 'string',
      pattern: '^[A-Za-z0-9_-]{1,64}$',
      description: '`nextCursor` of the previous page: opaque, made by this deployment.',
    },
    limit: { type: 'integer', minimum: 1, maximum: 500, default: 50 },
    tenant: {
      ...adminTenantOptional,
      description:
        "Admin keys only: the tenant whose operations to list. Without it, every tenant's, for `state=dead` or " +
        '`state=needs_reconciliation` only. A tenant key always lists its own.',
    },
  },
};

export const cancelQuerySchema: JsonSchema = {
  type: 'object',
  additionalProperties: false,
  properties: { tenant: adminTenantOptional },
};

export const listResponseSchema: JsonSchema = {
  type: 'object',
  required: ['operations', 'nextCursor'],
  properties: {
    operations: { type: 'array', items: operationSchema },
    nextCursor: {
      type: ['string', 'null'],
      description:
        'Pass as `cursor` for the next page; null at the end. A page ends at `limit` operations, or at the ' +
        'first that brings its inputs, results and errors to about 1 MiB: read on while it is not null.',
    },
  },
};

export const cancelResponseSchema: JsonSchema = {
  type: 'object',
  required: ['operation', 'cancel'],
  properties: {
    operation: operationSchema,
    cancel: {
      type: 'string',
      enum: ['cancelled', 'requested', 'too_late'],
      description:
        '`cancelled`: it will never run; `requested`: running, its signal fired, it ends cancelled unless an ' +
        'effect begins first; `too_late`: an effect had begun or it had ended: it reports its own result.',
    },
  },
};

const who = {
  by: {
    type: 'string',
    minLength: 1,
    maxLength: MAX_BY_CHARS,
    pattern: TEXT_PATTERN,
    allOf: [NOT_BLANK],
    description:
      "Who acts (recorded), not blank, without NUL or a lone surrogate. Default: the admin key's identity, `admin#<n>`.",
  },
  reason: {
    type: 'string',
    minLength: 1,
    maxLength: MAX_REASON_CHARS,
    pattern: TEXT_PATTERN,
    allOf: [NOT_BLANK],
    description: 'Why (recorded), not blank, without NUL or a lone surrogate.',
  },
};

export const redriveBodySchema: JsonSchema = {
  type: 'object',
  required: ['reason'],
  additionalProperties: false,
  properties: who,
};

/** POST /v1/redrives: dead operations of any tenants, named one by one. */
export const redriveManyBodySchema: JsonSchema = {
  type: 'object',
  required: ['operations', 'reason'],
  additionalProperties: false,
  properties: {
    operations: {
      type: 'array',
      minItems: 1,
      maxItems: MAX_REDRIVE_MANY,
      items: {
        type: 'object',
        required: ['tenant', 'id'],
        additionalProperties: false,
        properties: {
          tenant: { type: 'string', pattern: TENANT_PATTERN },
          id: { type: 'string', pattern: OPERATION_ID_PATTERN },
        },
      },
      description: `The operations to redrive, 1 to ${MAX_REDRIVE_MANY}, each \`{tenant, id}\`, redriven in this order.`,
    },
    ...who,
  },
};

export const redriveManyResponseSchema: JsonSchema = {
  type: 'object',
  required: ['results'],
  properties: {
    results: {
      type: 'array',
      description: 'One per operation named, in its place.',
      items: {
        type: 'object',
        required: ['tenant', 'id', 'ok'],
        properties: {
          tenant: { type: 'string' },
          id: { type: 'string' },
          ok: { type: 'boolean', description: 'True: queued again, with a fresh attempt count.' },
          state: { type: 'string', description: 'With `ok`: the state it is in now, `queued`.' },
          code: {
            type: 'string',
            description:
              'Without `ok`: why it was not redriven, `operation-not-found` or `operation-state-invalid` (it is ' +
              'not `dead`, for example already queued by an earlier call).',
          },
          detail: { type: 'string', description: 'Without `ok`: the refusal in words.' },
        },
      },
    },
  },
};

export const reconcileBodySchema: JsonSchema = {
  type: 'object',
  required: ['reason', 'resolution'],
  additionalProperties: false,
  properties: {
    ...who,
    resolution: {
      type: 'string',
      enum: ['requeue', 'succeeded', 'failed'],
      description: '`requeue` runs the handler again (journaled effects return their recorded results).',
    },
    effects: {
      type: 'array',
      maxItems: 100,
      description: 'What was established at the provider, per effect.',
      items: {
        type: 'object',
        required: ['name', 'outcome'],
        additionalProperties: false,
        properties: {
          name: { type: 'string', minLength: 1, maxLength: 100 },
          outcome: { type: 'string', enum: ['committed', 'absent'] },
          result: {},
          reference: { type: ['string', 'null'], maxLength: 500, pattern: TEXT_PATTERN },
        },
      },
    },
    result: { description: 'With `resolution: succeeded`: the operation result.' },
  },
};

/**
 * The query of a `/v1/` route that takes none: a parameter sent anyway (a typo, a `?tenant=` on
 * usage, whose tenant is in the path) is refused like an unknown one elsewhere, not ignored.
 */
export const noQuerySchema: JsonSchema = { type: 'object', additionalProperties: false, properties: {} };

export const usageParamsSchema: JsonSchema = {
  type: 'object',
  required: ['tenant'],
  properties: { tenant: { type: 'string', pattern: TENANT_PATTERN } },
};

export const usageResponseSchema: JsonSchema = {
  type: 'object',
  required: ['tenant', 'classes', 'budgets'],
  properties: {
    tenant: { type: 'string' },
    classes: {
      type: 'array',
      description: "The tenant's operations per workload class, across all processes.",
      items: {
        type: 'object',
        required: ['class', 'running', 'waiting'],
        properties: {
          class: { type: 'string' },
          running: { type: 'integer' },
          waiting: { type: 'integer' },
        },
      },
    },
    budgets: {
      type: 'array',
      description: "The tenant's spend per paid provider in the current window.",
      items: {
        type: 'object',
        required: ['provider', 'windowStart', 'windowEnd', 'reserved', 'committed'],
        properties: {
          provider: { type: 'string' },
          windowStart: dateTime,
          windowEnd: nullable(dateTime),
          reserved: {
            type: 'number',
            description: 'Units reserved by effects whose outcome is not known yet.',
          },
          committed: { type: 'number', description: 'Units spent by committed effects.' },
        },
      },
    },
  },
};

/** `GET /v1/me`: what the presented key is. */
export const meResponseSchema: JsonSchema = {
  type: 'object',
  required: ['role', 'tenant'],
  additionalProperties: false,
  properties: {
    role: { type: 'string', enum: ['tenant', 'admin'] },
    tenant: {
      type: ['string', 'null'],
      description: "A tenant key's tenant; null for an admin key, which acts for none.",
    },
  },
};

const classCounts = {
  class: { type: 'string' },
  waiting: { type: 'integer', description: 'Queued, due now or later.' },
  running: { type: 'integer' },
};

/** `GET /v1/queues`: the store's queue counters across every tenant (admin). */
export const queuesResponseSchema: JsonSchema = {
  type: 'object',
  required: ['classes', 'queues', 'queuesLeftOut', 'awaitingOperator'],
  additionalProperties: false,
  properties: {
    classes: {
      type: 'array',
      description: 'Every class the store knows, in name order, across all tenants and processes.',
      items: { type: 'object', required: ['class', 'waiting', 'running'], properties: classCounts },
    },
    queues: {
      type: 'array',
      description:
        'The (class, tenant) pairs with an operation waiting or running, the most waiting first (then the most ' +
        'running, then by class and tenant), at most 500.',
      items: {
        type: 'object',
        required: ['class', 'tenant', 'waiting', 'running'],
        properties: { ...classCounts, tenant: { type: 'string' } },
      },
    },
    queuesLeftOut: { type: 'integer', description: 'Pairs holding work beyond the 500 listed.' },
    awaitingOperator: {
      type: 'object',
      required: ['dead', 'needsReconciliation'],
      additionalProperties: false,
      description:
        "Every tenant's operations waiting for an operator, each state counted up to 10,000 (10,000 means at " +
        'least that many): `dead`, to redrive; `needsReconciliation`, to reconcile.',
      properties: { dead: { type: 'integer' }, needsReconciliation: { type: 'integer' } },
    },
  },
};

export const statusSchema: JsonSchema = {
  type: 'object',
  required: ['status'],
  properties: { status: { type: 'string' } },
};

/**
 * Turns query-string integers (text on the wire) into numbers where the schema says `integer`,
 * so validation can stay strict (no coercion elsewhere, in particular not in bodies).
 */
export function coerceQuery(schema: JsonSchema, query: Record<string, unknown>): void {
  const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
  for (const [name, prop] of Object.entries(props)) {
    const value = query[name];
    if (prop.type === 'integer' && typeof value === 'string' && /^-?\d{1,16}$/.test(value)) {
      query[name] = Number(value);
    }
  }
}
