/**
 * @module http/openapi
 * The OpenAPI 3.1 document, generated from the routes as fastify registered them: their
 * validation schemas (params, query, headers, body), their response schemas, their auth mode
 * and the problem codes they declare, plus each kind's input schema. Nothing is written twice,
 * so the document lists exactly the routes that exist and accepts exactly what they accept.
 *
 * Kinds: the submit body's `input` becomes a `oneOf` over kinds (discriminated by `kind`), each
 * with the kind's input schema from its validator's Standard JSON Schema interface (zod 4,
 * among others), as a component of its own. A validator without one documents `input` as `{}`
 * with a description.
 *
 * What the server answers before any route runs is documented too: every 401's `WWW-Authenticate`
 * challenge, and the 405 (with `Allow`) a listed path answers to a method it does not take.
 */
import { readFileSync } from 'node:fs';
import { STATUS_CODES } from 'node:http';
import { isDeepStrictEqual } from 'node:util';
import type { StandardJSONSchemaV1 } from '@standard-schema/spec';
import type { FastifyContextConfig, RouteOptions } from 'fastify';
import type { Kind } from '../runtime/kinds.js';
import { PROBLEM_CONTENT_TYPE, PROBLEMS, problemType } from './problem.js';
import type { AuthMode } from './route-config.js';
import { type JsonSchema, operationSchema, problemSchema } from './schemas.js';

export interface RouteRecord {
  method: string;
  url: string;
  schema: JsonSchema;
  config: FastifyContextConfig;
}

/** The methods the routes take at a concrete path, for a 405's `Allow` (empty: no such path). */
export function methodsAt(routes: readonly RouteRecord[], path: string): string[] {
  const methods = new Set<string>();
  for (const route of routes) {
    const pattern = route.url
      .split('/')
      .map((part) => (part.startsWith(':') ? '[^/]+' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
      .join('/');
    if (new RegExp(`^${pattern}$`).test(path)) methods.add(route.method);
  }
  return [...methods].sort();
}

/** Registers an `onRoute` hook that records every route; call before any route is added. */
export function recordRoutes(app: {
  addHook(name: 'onRoute', hook: (route: RouteOptions) => void): unknown;
}) {
  const routes: RouteRecord[] = [];
  app.addHook('onRoute', (route) => {
    const methods = Array.isArray(route.method) ? route.method : [route.method];
    for (const method of methods) {
      routes.push({
        method: String(method).toUpperCase(),
        url: route.url,
        schema: (route.schema ?? {}) as JsonSchema,
        config: (route.config ?? {}) as FastifyContextConfig,
      });
    }
  });
  return routes;
}

interface PackageInfo {
  version: string;
  license?: string;
}

let packageInfo: PackageInfo | undefined;
function readPackage(): PackageInfo {
  if (packageInfo) return packageInfo;
  try {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      version?: string;
      license?: string;
    };
    packageInfo = { version: pkg.version ?? '0.0.0', license: pkg.license };
  } catch {
    packageInfo = { version: '0.0.0' };
  }
  return packageInfo;
}

/** npm's `license` is an SPDX expression, which is what OpenAPI 3.1's `identifier` takes. */
function license(): JsonSchema {
  const spdx = readPackage().license;
  return spdx ? { license: { name: spdx, identifier: spdx } } : {};
}

/** The kind's input schema as JSON Schema 2020-12, when its validator can say. */
export function kindInputSchema(kind: Kind): JsonSchema {
  const std = kind.schema['~standard'] as Partial<StandardJSONSchemaV1.Props>;
  const note = `At most ${kind.limits.maxInputBytes} bytes as canonical JSON. Class \`${kind.class}\`.`;
  try {
    const converted = std.jsonSchema?.input({ target: 'draft-2020-12' });
    if (converted && typeof converted === 'object') {
      const { $schema: _ignored, ...schema } = converted as JsonSchema;
      return { ...schema, description: [schema.description, note].filter(Boolean).join(' ') };
    }
  } catch {
    // Some schemas cannot be expressed in JSON Schema (transforms, custom checks): fall through.
  }
  return {
    description: `Validated by the kind's ${kind.schema['~standard'].vendor} schema, which offers no JSON Schema. ${note}`,
  };
}

const isObject = (value: unknown): value is JsonSchema =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const mapValues = (object: JsonSchema, f: (value: unknown) => unknown): JsonSchema =>
  Object.fromEntries(Object.entries(object).map(([key, value]) => [key, f(value)]));

/** Keywords whose value is a schema or an array of schemas (JSON Schema 2020-12 and draft 7). */
const SUBSCHEMAS = new Set([
  'items',
  'additionalItems',
  'prefixItems',
  'contains',
  'additionalProperties',
  'unevaluatedItems',
  'unevaluatedProperties',
  'propertyNames',
  'not',
  'if',
  'then',
  'else',
  'allOf',
  'anyOf',
  'oneOf',
  'contentSchema',
]);
/** Keywords whose value is an object of schemas: their keys are names, not keywords. */
const SUBSCHEMA_MAPS = new Set([
  'properties',
  'patternProperties',
  'dependentSchemas',
  'dependencies',
  '$defs',
  'definitions',
]);

/**
 * A schema with every `$ref` passed through `ref`, walking only where schemas are (a `const`, an
 * `enum` or a property named `$ref` is data). `$id` and `$schema` are dropped: once the schema
 * sits in the document, references beneath an `$id` would resolve against it, not the document.
 */
function rewriteRefs(schema: unknown, ref: (target: string) => string): unknown {
  if (Array.isArray(schema)) return schema.map((item) => rewriteRefs(item, ref));
  if (!isObject(schema)) return schema;
  const out: JsonSchema = {};
  for (const [key, value] of Object.entries(schema)) {
    if (key === '$id' || key === '$schema') continue;
    if (key === '$ref' && typeof value === 'string') out[key] = ref(value);
    else if (SUBSCHEMAS.has(key)) out[key] = rewriteRefs(value, ref);
    else if (SUBSCHEMA_MAPS.has(key) && isObject(value))
      out[key] = mapValues(value, (sub) => rewriteRefs(sub, ref));
    else out[key] = value;
  }
  return out;
}

/** One step of a JSON Pointer in a URI fragment (RFC 6901 §6), as the key it names. */
function pointerStep(step: string): string | undefined {
  try {
    return decodeURIComponent(step).replaceAll('~1', '/').replaceAll('~0', '~');
  } catch {
    return undefined;
  }
}

/** A component name (OpenAPI's `^[a-zA-Z0-9.\-_]+$`) for a `$defs` entry, not yet taken. */
function freeName(base: string, taken: Set<string>): string {
  let name = base;
  for (let n = 2; taken.has(name); n++) name = `${base}_${n}`;
  taken.add(name);
  return name;
}

const schemaRef = (name: string) => `#/components/schemas/${name}`;

/**
 * A kind's input schema as components: its own, `Submit.<kind>.Input`, and one per entry of its
 * top-level `$defs` (or draft 7 `definitions`), `Submit.<kind>.Input.<name>`. Copied as it came,
 * its `#` would name the whole document and its `#/$defs/…` a place no OpenAPI tool looks; so
 * each reference is pointed at the component now holding its target. Kind names have no capitals:
 * no kind's components can take another's names, whatever their `$defs` are called.
 */
function kindInputComponents(kind: Kind, components: Record<string, JsonSchema>): string {
  const { $defs, definitions, ...root } = kindInputSchema(kind);
  const self = `Submit.${kind.name}.Input`;
  const hoisted = new Map<string, { name: string; schema: unknown }>();
  const taken = new Set([self]);
  for (const [where, defs] of [
    ['$defs', $defs],
    ['definitions', definitions],
  ] as const) {
    if (!isObject(defs)) continue;
    for (const [key, schema] of Object.entries(defs)) {
      const name = freeName(`${self}.${key.replace(/[^A-Za-z0-9._-]/g, '_')}`, taken);
      hoisted.set(`${where}/${key}`, { name, schema });
    }
  }
  const ref = (target: string): string => {
    // Another document, or a plain-name anchor: not this schema's to resolve.
    if (target !== '#' && !target.startsWith('#/')) return target;
    const [where = '', key = '', ...rest] = target.slice(2).split('/');
    const def = hoisted.get(`${where}/${pointerStep(key)}`);
    if (def) return [schemaRef(def.name), ...rest].join('/');
    return target === '#' ? schemaRef(self) : `${schemaRef(self)}${target.slice(1)}`;
  };
  components[self] = rewriteRefs(root, ref) as JsonSchema;
  for (const { name, schema } of hoisted.values()) components[name] = rewriteRefs(schema, ref) as JsonSchema;
  return schemaRef(self);
}

/** Schemas written once under `components.schemas`, referred to wherever a response has them. */
const NAMED_SCHEMAS: Record<string, JsonSchema> = { Operation: operationSchema };

/** `schema` with each named schema in it replaced by a reference, registering what it refers to. */
function named(schema: unknown, components: Record<string, JsonSchema>): unknown {
  for (const [name, known] of Object.entries(NAMED_SCHEMAS)) {
    if (isDeepStrictEqual(schema, known)) {
      components[name] = known;
      return { $ref: schemaRef(name) };
    }
  }
  if (Array.isArray(schema)) return schema.map((item) => named(item, components));
  return isObject(schema) ? mapValues(schema, (value) => named(value, components)) : schema;
}

const toOpenApiPath = (url: string) => url.replace(/:([A-Za-z0-9_]+)/g, '{$1}');

/** Schemas without the keys fastify uses and OpenAPI places elsewhere. */
function bare(schema: JsonSchema): JsonSchema {
  const { description: _d, ...rest } = schema;
  return rest;
}

function parameters(schema: JsonSchema, where: 'path' | 'query' | 'header'): JsonSchema[] {
  const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((schema.required as string[] | undefined) ?? []);
  return Object.entries(props)
    .filter(([name]) => !(where === 'header' && name === 'authorization'))
    .map(([name, prop]) => ({
      name: where === 'header' ? headerName(name) : name,
      in: where,
      required: where === 'path' || required.has(name),
      ...(typeof prop.description === 'string' ? { description: prop.description } : {}),
      schema: bare(prop),
    }));
}

const headerName = (name: string) =>
  name.replace(/(^|-)([a-z])/g, (_m, dash: string, c: string) => dash + c.toUpperCase());

const STORE_PROBLEMS = [
  'store-unavailable',
  'store-busy',
  'store-serialization',
  'store-statement-timeout',
  'store-unique-violation',
  'store-not-migrated',
  'store-closed',
  'store-unknown',
];

/** Problems every route of a kind may answer with, besides those it declares. */
function commonProblems(route: RouteRecord): string[] {
  const auth: AuthMode = route.config.auth ?? 'none';
  const codes: string[] = [];
  if (auth !== 'none') codes.push('unauthorized');
  if (auth === 'tenant' || auth === 'admin' || auth === 'any') codes.push('forbidden');
  // A tenant key's requests in progress are capped on every authenticated route (tenant-requests.ts).
  if (auth === 'tenant' || auth === 'any' || auth === 'key') codes.push('tenant-too-many-requests');
  // Any POST's body is read and parsed, whether or not the route expects one.
  if (route.method === 'POST') {
    codes.push(
      'body-malformed',
      'body-too-deep',
      'number-out-of-range',
      'body-too-large',
      'unsupported-media-type',
    );
  }
  if (route.schema.body) codes.push('request-invalid');
  if (route.schema.querystring || route.schema.params) codes.push('invalid-argument');
  if (route.schema.params) codes.push('uri-too-long', 'url-invalid');
  // What the store may answer on any route that reads or writes it.
  if (route.url.startsWith('/v1/')) codes.push(...STORE_PROBLEMS);
  // While the server closes, every route but the liveness probe answers it (server.ts).
  if (route.url !== '/healthz') codes.push('shutting-down');
  // From Node's HTTP parser, before any route: possible on every one.
  codes.push('bad-request', 'request-timeout', 'header-too-large', 'internal-error');
  return codes;
}

/** The challenge of a 401: without a key, with a malformed one, or with one not known. */
const CHALLENGE: JsonSchema = {
  description:
    'The Bearer challenge: `Bearer realm="sluice"` without a key, with `error="invalid_request"` ' +
    'for a malformed `Authorization` header (or several), `error="invalid_token"` for a key not known.',
  required: true,
  schema: { type: 'string', pattern: '^Bearer realm="sluice"(, error="(invalid_request|invalid_token)")?$' },
};

/**
 * The answer to a method a documented path does not take (server.ts's not-found handler, with
 * `methodsAt`). It answers no documented operation, so it cannot sit under one: it is a reusable
 * response, and its `Allow` follows from the path's operations.
 */
const METHOD_NOT_ALLOWED: JsonSchema = {
  description:
    'Method Not Allowed: the path exists, but not with this method. Problem types: `method-not-allowed`.',
  headers: {
    Allow: {
      description:
        "The methods the path takes, comma-separated in alphabetical order: its operations' methods, and " +
        '`HEAD` where it takes `GET`.',
      required: true,
      schema: { type: 'string' },
    },
  },
  content: { [PROBLEM_CONTENT_TYPE]: { schema: { $ref: '#/components/schemas/Problem' } } },
};

function problemResponses(codes: string[]): Record<string, JsonSchema> {
  const byStatus = new Map<number, string[]>();
  for (const code of new Set(codes)) {
    const spec = PROBLEMS[code];
    if (!spec) throw new Error(`route declares an unknown problem code ${code}`);
    byStatus.set(spec.status, [...(byStatus.get(spec.status) ?? []), code]);
  }
  const out: Record<string, JsonSchema> = {};
  for (const [status, list] of [...byStatus].sort(([a], [b]) => a - b)) {
    const headers: Record<string, JsonSchema> = {};
    // Every 429 and 503 has an estimate: its code's default, or the one its error carries (problem.ts).
    if (status === 429 || status === 503)
      headers['Retry-After'] = {
        description: 'Seconds to wait before retrying: at least 1.',
        required: true,
        schema: { type: 'integer', minimum: 1 },
      };
    // RFC 9110 §11.6.1 and RFC 6750 §3: every 401 carries the Bearer challenge (auth.ts, server.ts).
    if (status === 401) headers['WWW-Authenticate'] = CHALLENGE;
    // RFC 9110 §15.5.16: a body refused for its content coding names the codings accepted.
    if (status === 415)
      headers['Accept-Encoding'] = {
        description: '`identity` when the body was refused for its `Content-Encoding`.',
        schema: { type: 'string' },
      };
    out[String(status)] = {
      description: `${STATUS_CODES[status] ?? 'Error'}. Problem types: ${list.map((c) => `\`${c}\``).join(', ')}.`,
      ...(Object.keys(headers).length > 0 ? { headers } : {}),
      content: { [PROBLEM_CONTENT_TYPE]: { schema: { $ref: '#/components/schemas/Problem' } } },
    };
  }
  return out;
}

function successResponses(
  route: RouteRecord,
  components: Record<string, JsonSchema>,
): Record<string, JsonSchema> {
  const out: Record<string, JsonSchema> = {};
  const response = (route.schema.response ?? {}) as Record<string, JsonSchema>;
  for (const [status, schema] of Object.entries(response)) {
    const description = (schema.description as string | undefined) ?? STATUS_CODES[Number(status)] ?? 'OK';
    const headers: Record<string, JsonSchema> = {};
    if (route.method === 'POST' && route.url === '/v1/operations') {
      headers.Location = {
        description: 'The operation: `/v1/operations/{id}`.',
        required: true,
        schema: { type: 'string' },
      };
      if (status === '200') {
        headers['Idempotent-Replayed'] = {
          description: '`true` on a replay.',
          required: true,
          schema: { type: 'string', const: 'true' },
        };
      }
    }
    if (
      (route.method === 'POST' && route.url === '/v1/operations') ||
      (route.method === 'GET' && route.url === '/v1/operations/:id')
    ) {
      headers['Retry-After'] = {
        description:
          'While the operation has not ended: seconds until it is worth looking again (when it is due, ' +
          'or 1). Absent once it has ended.',
        schema: { type: 'integer', minimum: 1 },
      };
    }
    const content = schema.content as Record<string, { schema: JsonSchema }> | undefined;
    out[status] = {
      description,
      ...(Object.keys(headers).length > 0 ? { headers } : {}),
      content: content ?? { 'application/json': { schema: named(bare(schema), components) } },
    };
  }
  return out;
}

function requestBody(
  route: RouteRecord,
  kinds: Kind[],
  components: Record<string, JsonSchema>,
): JsonSchema | undefined {
  const body = route.schema.body as JsonSchema | undefined;
  if (!body) return undefined;
  let schema: JsonSchema = body;
  if (route.config.inputByKind && kinds.length > 0) {
    const mapping: Record<string, string> = {};
    const oneOf = kinds.map((kind) => {
      const name = `Submit.${kind.name}`;
      mapping[kind.name] = `#/components/schemas/${name}`;
      const props = body.properties as Record<string, JsonSchema>;
      const input = { $ref: kindInputComponents(kind, components) };
      components[name] = {
        ...body,
        title: `Submit ${kind.name}`,
        properties: { ...props, kind: { type: 'string', const: kind.name }, input },
      };
      return { $ref: mapping[kind.name] };
    });
    schema = { oneOf, discriminator: { propertyName: 'kind', mapping } };
  }
  return { required: true, content: { 'application/json': { schema } } };
}

export interface OpenApiOptions {
  routes: RouteRecord[];
  kinds: Kind[];
  title?: string;
}

export function openApiDocument(options: OpenApiOptions): JsonSchema {
  const components: Record<string, JsonSchema> = { Problem: problemSchema };
  const paths: Record<string, Record<string, JsonSchema>> = {};
  for (const route of options.routes) {
    // HEAD is served for every GET (RFC 9110 §9.3.2) and documented by it.
    if (route.method === 'HEAD') continue;
    const s = route.schema;
    const auth: AuthMode = route.config.auth ?? 'none';
    const op: JsonSchema = {
      ...(typeof s.operationId === 'string' ? { operationId: s.operationId } : {}),
      ...(typeof s.summary === 'string' ? { summary: s.summary } : {}),
      ...(typeof s.description === 'string' ? { description: s.description } : {}),
      ...(Array.isArray(s.tags) ? { tags: s.tags } : {}),
      security: auth === 'none' ? [] : [{ apiKey: [] }],
    };
    const params = [
      ...(s.params ? parameters(s.params as JsonSchema, 'path') : []),
      ...(s.querystring ? parameters(s.querystring as JsonSchema, 'query') : []),
      ...(s.headers ? parameters(s.headers as JsonSchema, 'header') : []),
    ];
    if (params.length > 0) op.parameters = params;
    const body = requestBody(route, options.kinds, components);
    if (body) op.requestBody = body;
    if (auth === 'admin') op['x-sluice-auth'] = 'admin key';
    else if (auth === 'tenant') op['x-sluice-auth'] = 'tenant key';
    else if (auth === 'any') op['x-sluice-auth'] = 'tenant key, or admin key with ?tenant=';
    else if (auth === 'key') op['x-sluice-auth'] = 'tenant key or admin key';
    op.responses = {
      ...successResponses(route, components),
      ...problemResponses([...commonProblems(route), ...(route.config.problems ?? [])]),
    };
    const path = toOpenApiPath(route.url);
    paths[path] ??= {};
    paths[path][route.method.toLowerCase()] = op;
  }
  return {
    openapi: '3.1.0',
    info: {
      title: options.title ?? 'Sluice',
      version: readPackage().version,
      ...license(),
      description:
        'Bounded, durable background operations with safe retries. Errors are RFC 9457 problems whose ' +
        `\`type\` is \`${problemType('<code>')}\`. Idempotency keys: an operation's key answers with that ` +
        'operation for as long as it is retained (default 7 days after it ends); then a tombstone (default 30 ' +
        'days) refuses the key with `operation-expired` rather than running it again. A `/v1/` route ' +
        'refuses a query parameter it does not list (`400 invalid-argument`). Any other method at a listed ' +
        "path answers `405 method-not-allowed` with an `Allow` header naming the path's methods " +
        '(`components.responses.MethodNotAllowed`). See docs/http-api.md.',
    },
    // OpenAPI's default when absent (the host that served this document), said for the tools that ask.
    servers: [{ url: '/' }],
    tags: [
      { name: 'operations', description: "A tenant's operations." },
      { name: 'admin', description: 'Operator actions and the queues of every tenant (admin key).' },
      { name: 'tenants', description: 'Usage.' },
      {
        name: 'service',
        description: 'Health, readiness, metrics, this document, the key presented, the dashboard.',
      },
    ],
    paths,
    components: {
      schemas: components,
      responses: { MethodNotAllowed: METHOD_NOT_ALLOWED },
      securitySchemes: {
        apiKey: {
          type: 'http',
          scheme: 'bearer',
          description: "A tenant's API key, or an admin key: `Authorization: Bearer <key>`.",
        },
      },
    },
  };
}
