/**
 * The OpenAPI document: valid OpenAPI 3.1 (checked by a validator library), listing exactly
 * the routes fastify has registered (read from fastify's own route tree, not from the
 * generator's record), with each kind's input schema under the submit body — and a kind whose
 * validator offers no JSON Schema documented as `{}` with a description. Every `$ref` in it
 * resolves within it, whatever references a kind's own JSON Schema makes.
 */
import { readFileSync } from 'node:fs';
import { Validator } from '@seriousme/openapi-schema-validator';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { BudgetExhausted, CapacityExceeded, SluiceError } from '../../src/core/errors/index.js';
import { PROBLEMS, toProblem } from '../../src/http/problem.js';
import { operationSchema } from '../../src/http/schemas.js';
import type { Sluice } from '../../src/index.js';
import { KEYS, type Rig, rig } from './rig.js';

/** Every (METHOD, /path/{param}) in fastify's route tree, from `printRoutes`. */
function fastifyRoutes(tree: string): string[] {
  const out: string[] = [];
  const stack: string[] = [];
  for (const line of tree.split('\n')) {
    const m = /^((?:[│ ] {3})*)[├└]── (\S+)(?: \(([^)]+)\))?$/.exec(line);
    if (!m) continue;
    const depth = m[1]!.length / 4;
    const path = (depth === 0 ? '' : stack[depth - 1]!) + m[2]!;
    stack[depth] = path;
    for (const method of (m[3] ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)) {
      out.push(`${method} ${path.replace(/:([A-Za-z0-9_]+)/g, '{$1}')}`);
    }
  }
  return out.sort();
}

interface OpenApiOperation {
  operationId: string;
  parameters?: Array<{ name: string; in: string }>;
}

/** A Standard Schema validator with no JSON Schema to offer. */
const handmade: StandardSchemaV1<{ n: number }> = {
  '~standard': {
    version: 1,
    vendor: 'handmade',
    validate: (value) =>
      typeof (value as { n?: unknown })?.n === 'number'
        ? { value: value as { n: number } }
        : { issues: [{ message: 'n must be a number', path: ['n'] }] },
  },
};

/**
 * What a same-document `$ref` (a JSON Pointer as a URI fragment, RFC 6901 §6) points at, or
 * undefined. `#` alone is refused: in a kind's schema it meant that schema, here the document.
 */
function resolveRef(doc: unknown, ref: string): unknown {
  if (!ref.startsWith('#/')) return undefined;
  let node = doc;
  for (const raw of ref.slice(2).split('/')) {
    const key = decodeURIComponent(raw).replaceAll('~1', '/').replaceAll('~0', '~');
    if (typeof node !== 'object' || node === null || !Object.hasOwn(node, key)) return undefined;
    node = (node as Record<string, unknown>)[key];
  }
  return node;
}

/** Every value of the keyword `name` in the document, with where it sits. */
function keywordsIn(node: unknown, name: string, at = '#'): Array<{ at: string; value: unknown }> {
  if (typeof node !== 'object' || node === null) return [];
  return Object.entries(node).flatMap(([key, value]) => [
    ...(key === name ? [{ at, value }] : []),
    ...keywordsIn(value, name, `${at}/${key}`),
  ]);
}

/**
 * A validator offering draft 7 JSON Schema with an `$id`, `definitions` named with characters a
 * component name cannot hold, and a reference into its own properties.
 */
const legacy = {
  '~standard': {
    version: 1,
    vendor: 'legacy',
    validate: (value: unknown) => ({ value }),
    jsonSchema: {
      input: () => ({
        $schema: 'http://json-schema.org/draft-07/schema#',
        $id: 'https://example.com/legacy',
        type: 'object',
        properties: {
          a: { $ref: '#/definitions/a~1b' },
          b: { $ref: '#/properties/a' },
          c: { $ref: '#/definitions/Part%20two/properties/n' },
        },
        definitions: { 'a/b': { type: 'string' }, 'Part two': { properties: { n: { type: 'number' } } } },
      }),
      output: () => ({}),
    },
  },
} as StandardSchemaV1;

/**
 * Kinds whose JSON Schema refers inside itself: a tree whose children are trees (zod emits
 * `$ref: "#"`), two kinds that each share an `Address` between two fields (`#/$defs/Address`),
 * not the same `Address`, and `legacy` above.
 */
function defineReferringKinds(sluice: Sluice): void {
  const Tree = z.object({
    name: z.string(),
    get children() {
      return z.array(Tree).optional();
    },
  });
  const Address = z.object({ city: z.string() }).meta({ id: 'Address' });
  const PostalAddress = z.object({ street: z.string(), zip: z.string() }).meta({ id: 'Address' });
  sluice.define('tree', { input: Tree, run: async () => null });
  sluice.define('ship', {
    input: z.object({ home: Address, work: Address.optional() }),
    run: async () => null,
  });
  sluice.define('bill', {
    input: z.object({ billing: PostalAddress, shipping: PostalAddress.nullable() }),
    run: async () => null,
  });
  sluice.define('legacy', { input: legacy, run: async () => null });
}

describe('GET /openapi.json', () => {
  let r: Rig;
  afterEach(async () => r?.close());

  it('is valid OpenAPI 3.1 and lists every registered route', async () => {
    r = await rig({
      define(sluice) {
        sluice.define('handmade', { input: handmade, run: async () => null });
      },
    });
    const res = await r.call('GET', '/openapi.json', { key: null });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    const doc = res.json;

    const validator = new Validator();
    const result = await validator.validate(doc);
    expect(result.errors ?? []).toEqual([]);
    expect(result.valid).toBe(true);
    expect(validator.version).toBe('3.1');
    // The validator is not a rubber stamp: a document without its info is refused.
    const { info: _info, ...broken } = doc;
    expect((await new Validator().validate(broken)).valid).toBe(false);
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
    expect(doc.info.license).toEqual({ name: pkg.license, identifier: pkg.license });
    // The default OpenAPI assumes without it, written out for the linters that ask for one.
    expect(doc.servers).toEqual([{ url: '/' }]);

    const documented = Object.entries(doc.paths as Record<string, Record<string, unknown>>)
      .flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m.toUpperCase()} ${path}`))
      .sort();
    // HEAD is served for every GET and documented by it.
    const registered = fastifyRoutes(r.app.printRoutes({ commonPrefix: false })).filter(
      (route) => !route.startsWith('HEAD '),
    );
    expect(
      fastifyRoutes(r.app.printRoutes({ commonPrefix: false })).filter((x) => x.startsWith('HEAD ')).length,
    ).toBe(registered.filter((x) => x.startsWith('GET ')).length);
    expect(registered.length).toBeGreaterThanOrEqual(11);
    expect(documented).toEqual(registered);
    expect(registered).toEqual(
      [
        'GET /dashboard',
        'GET /dashboard/api.js',
        'GET /dashboard/app.css',
        'GET /dashboard/app.js',
        'GET /dashboard/dom.js',
        'GET /dashboard/views.js',
        'GET /dashboard/icon.svg',
        'GET /healthz',
        'GET /metrics',
        'GET /openapi.json',
        'GET /readyz',
        'GET /v1/operations',
        'GET /v1/operations/{id}',
        'GET /v1/me',
        'GET /v1/queues',
        'GET /v1/tenants/{tenant}/usage',
        'POST /v1/operations',
        'POST /v1/operations/{id}/cancel',
        'POST /v1/operations/{id}/reconcile',
        'POST /v1/operations/{id}/redrive',
        'POST /v1/redrives',
      ].sort(),
    );
  });

  it('a /v1/ route refuses a query parameter the document does not list, and stores nothing', async () => {
    r = await rig();
    const doc = (await r.call('GET', '/openapi.json', { key: null })).json;
    // Each call is one the route would take, but for the query: a key it accepts and a valid body.
    const calls: Record<
      string,
      { key: string; query?: string; headers?: Record<string, string>; body?: unknown }
    > = {
      submitOperation: {
        key: KEYS.north,
        headers: { 'idempotency-key': 'q1' },
        body: { kind: 'note', input: { text: '' } },
      },
      getOperation: { key: KEYS.north },
      listOperations: { key: KEYS.north },
      cancelOperation: { key: KEYS.north },
      redriveOperation: { key: KEYS.admin, query: 'tenant=north&', body: { reason: 'r' } },
      redriveOperations: {
        key: KEYS.admin,
        body: { reason: 'r', operations: [{ tenant: 'north', id: 'o1' }] },
      },
      reconcileOperation: {
        key: KEYS.admin,
        query: 'tenant=north&',
        body: { reason: 'r', resolution: 'failed' },
      },
      getTenantUsage: { key: KEYS.north },
      getMe: { key: KEYS.north },
      getQueues: { key: KEYS.admin },
    };
    const routes = Object.entries(doc.paths as Record<string, Record<string, OpenApiOperation>>)
      .filter(([path]) => path.startsWith('/v1/'))
      .flatMap(([path, ops]) => Object.entries(ops).map(([method, op]) => ({ path, method, op })));
    // A new /v1/ route must be added above.
    expect(routes.map((x) => x.op.operationId).sort()).toEqual(Object.keys(calls).sort());
    const before = await r.snapshot();
    for (const { path, method, op } of routes) {
      const call = calls[op.operationId]!;
      const query = (op.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name);
      expect(query).not.toContain('unlisted');
      const url = `${path.replace('{id}', 'o1').replace('{tenant}', 'north')}?${call.query ?? ''}unlisted=1`;
      const res = await r.call(method.toUpperCase(), url, call);
      expect([op.operationId, res.status, res.json?.code, res.json?.errors]).toEqual([
        op.operationId,
        400,
        'invalid-argument',
        [{ parameter: 'unlisted', detail: 'must NOT have additional properties' }],
      ]);
    }
    expect(await r.snapshot()).toEqual(before);
    expect(doc.info.description).toMatch(/refuses a query parameter it does not list/);
  });

  it("documents each kind's input, the Idempotency-Key, auth and every problem a route declares", async () => {
    r = await rig({
      define(sluice) {
        sluice.define('handmade', { input: handmade, run: async () => null });
      },
    });
    const doc = (await r.call('GET', '/openapi.json', { key: null })).json;
    const submit = doc.paths['/v1/operations'].post;
    const body = submit.requestBody.content['application/json'].schema;
    expect(body.discriminator.propertyName).toBe('kind');
    expect(Object.keys(body.discriminator.mapping)).toEqual(['charge', 'note', 'handmade']);
    const charge = doc.components.schemas['Submit.charge'];
    expect(charge.properties.kind).toEqual({ type: 'string', const: 'charge' });
    expect(charge.properties.input).toEqual({ $ref: '#/components/schemas/Submit.charge.Input' });
    expect(resolveRef(doc, charge.properties.input.$ref)).toMatchObject({
      type: 'object',
      required: ['invoice', 'amount_cents'],
      properties: { invoice: { type: 'integer' }, amount_cents: { type: 'integer' } },
    });
    expect(charge.additionalProperties).toBe(false);
    const handRef = doc.components.schemas['Submit.handmade'].properties.input.$ref;
    const hand = resolveRef(doc, handRef) as Record<string, unknown>;
    expect(Object.keys(hand)).toEqual(['description']);
    expect(hand.description).toMatch(/handmade schema, which offers no JSON Schema/);

    const key = submit.parameters.find((p: { in: string }) => p.in === 'header');
    expect(key).toMatchObject({
      name: 'Idempotency-Key',
      required: true,
      schema: { not: { enum: ['.', '..', '"."', '".."'] } },
    });
    // The documented pattern takes a key bare or as the draft's quoted string, as the server does.
    const pattern = new RegExp(key.schema.pattern);
    const takes = ['order-7', '"order-7"', '"a\\"b"', 'k'.repeat(255), `"${'k'.repeat(255)}"`, 'a"b'];
    const refuses = ['', 'two words', '"two words"', 'k'.repeat(256), 'caf\u00e9'];
    expect([takes.map((k) => pattern.test(k)), refuses.map((k) => pattern.test(k))]).toEqual([
      takes.map(() => true),
      refuses.map(() => false),
    ]);
    expect(Object.keys(submit.responses).sort()).toEqual(
      ['200', '202', '400', '401', '403', '408', '413', '415', '422', '429', '431', '500', '503'].sort(),
    );
    // What the store and the HTTP parser may answer is listed too, and any POST's body problems.
    expect(submit.responses['503'].description).toMatch(/`store-busy`/);
    expect(submit.responses['400'].description).toMatch(/`bad-request`/);
    const cancel = doc.paths['/v1/operations/{id}/cancel'].post;
    expect(Object.keys(cancel.responses)).toEqual(expect.arrayContaining(['413', '415']));
    expect(cancel.responses['400'].description).toMatch(/`body-malformed`/);
    expect(submit.responses['429'].headers['Retry-After']).toBeDefined();
    // A body refused for its Content-Encoding is told the coding accepted (RFC 9110 §15.5.16).
    expect(submit.responses['415'].headers['Accept-Encoding']).toMatchObject({ schema: { type: 'string' } });
    expect(submit.responses['415'].headers['Retry-After']).toBeUndefined();
    // A tenant key's requests in progress are capped on every route it may call, not on admin ones.
    expect(submit.responses['429'].description).toMatch(/`tenant-too-many-requests`/);
    expect(doc.paths['/v1/operations/{id}'].get.responses['429'].description).toMatch(
      /`tenant-too-many-requests`/,
    );
    expect(doc.paths['/v1/operations/{id}/redrive'].post.responses['429']).toBeUndefined();
    expect(doc.paths['/v1/operations/{id}'].get.responses['200'].headers['Retry-After']).toBeDefined();
    expect(submit.responses['422'].description).toMatch(/`idempotency-key-reused`/);
    expect(submit.security).toEqual([{ apiKey: [] }]);
    expect(doc.paths['/healthz'].get.security).toEqual([]);
    expect(doc.paths['/v1/operations/{id}/redrive'].post['x-sluice-auth']).toBe('admin key');
    // While the server closes, every route but the liveness probe answers 503 shutting-down.
    for (const [path, method] of [
      ['/v1/operations/{id}', 'get'],
      ['/v1/tenants/{tenant}/usage', 'get'],
      ['/metrics', 'get'],
    ] as const)
      expect([path, doc.paths[path][method].responses['503']?.description]).toEqual([
        path,
        expect.stringMatching(/`shutting-down`/),
      ]);
    expect(doc.paths['/healthz'].get.responses['503']?.description ?? '').not.toMatch(/`shutting-down`/);
    // Every problem code any route declares is in the mapping.
    for (const path of Object.values(
      doc.paths as Record<string, Record<string, { responses: Record<string, { description: string }> }>>,
    )) {
      for (const op of Object.values(path)) {
        for (const [status, resp] of Object.entries(op.responses)) {
          for (const [, code] of resp.description.matchAll(/`([a-z-]+)`/g)) {
            if (Number(status) >= 400) expect(PROBLEMS[code!]?.status).toBe(Number(status));
          }
        }
      }
    }
  });

  it('documents the 405 a known path answers to another method, and the Allow it sends', async () => {
    r = await rig();
    const doc = (await r.call('GET', '/openapi.json', { key: null })).json;
    const generic = doc.components.responses.MethodNotAllowed;
    expect(generic.description).toMatch(/`method-not-allowed`/);
    expect(PROBLEMS['method-not-allowed']?.status).toBe(405);
    expect(generic.headers.Allow).toMatchObject({ required: true, schema: { type: 'string' } });
    expect(Object.keys(generic.content)).toEqual(['application/problem+json']);
    expect(generic.headers.Allow.description).toMatch(
      /its operations' methods, and `HEAD` where it takes `GET`/,
    );
    const items = Object.entries(doc.paths as Record<string, Record<string, unknown>>);
    expect(items.length).toBeGreaterThanOrEqual(9);
    for (const [path, item] of items) {
      // What Allow must name, as the document says: the path's methods, and HEAD wherever GET is.
      const methods = Object.keys(item).map((m) => m.toUpperCase());
      if (methods.includes('GET')) methods.push('HEAD');
      // No route takes DELETE: at every documented path it is a wrong method.
      expect(methods).not.toContain('DELETE');
      const res = await r.call('DELETE', path.replace(/\{[^}]+\}/g, 'o1'), { key: KEYS.north });
      expect([path, res.status, res.json.code, res.headers.get('allow')]).toEqual([
        path,
        405,
        'method-not-allowed',
        methods.sort().join(', '),
      ]);
      expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    }
  });

  it("documents the Bearer challenge of every 401, and the server's challenges match it", async () => {
    r = await rig();
    const doc = (await r.call('GET', '/openapi.json', { key: null })).json;
    const challenges = new Set<string>();
    for (const [path, item] of Object.entries(
      doc.paths as Record<string, Record<string, { responses: Record<string, { headers?: object }> }>>,
    )) {
      for (const [method, op] of Object.entries(item)) {
        if (!op.responses['401']) continue;
        const header = (op.responses['401'].headers as Record<string, { schema: { pattern: string } }>)?.[
          'WWW-Authenticate'
        ];
        expect([path, method, header]).toEqual([path, method, expect.objectContaining({ required: true })]);
        challenges.add(header!.schema.pattern);
      }
    }
    // One challenge, the same on every route that takes a key.
    expect(challenges.size).toBe(1);
    const pattern = new RegExp([...challenges][0]!);
    const seen = new Set<string>();
    for (const authorization of [null, 'Bearer', 'Basic YTpi', 'Bearer not-a-known-key']) {
      const res = await r.call('GET', '/v1/operations/o1', {
        key: null,
        headers: authorization === null ? {} : { authorization },
      });
      const challenge = res.headers.get('www-authenticate') ?? '';
      expect([authorization, res.status, challenge]).toEqual([
        authorization,
        401,
        expect.stringMatching(pattern),
      ]);
      seen.add(challenge);
    }
    // Without a key, malformed, unknown: the three challenges the server sends, each documented.
    expect(seen.size).toBe(3);
    // The pattern is not a rubber stamp.
    expect(pattern.test('Basic realm="sluice"')).toBe(false);
  });

  it('resolves every $ref within the document, for kinds whose inputs refer to themselves and share parts', async () => {
    r = await rig({ define: defineReferringKinds });
    const doc = (await r.call('GET', '/openapi.json', { key: null })).json;
    const refs = keywordsIn(doc, '$ref');
    expect(refs.length).toBeGreaterThan(20);
    for (const { at, value } of refs) {
      expect([at, value, resolveRef(doc, String(value))]).toEqual([at, value, expect.any(Object)]);
    }
    // A `$id` would resolve the references beneath it against its URI, not this document.
    expect(keywordsIn(doc, '$id')).toEqual([]);
    expect((await new Validator().validate(doc)).errors ?? []).toEqual([]);

    const schemas = doc.components.schemas;
    const inputRef = (kind: string): string => schemas[`Submit.${kind}`].properties.input.$ref;
    // biome-ignore lint/suspicious/noExplicitAny: a JSON Schema read from the document
    const input = (kind: string): any => resolveRef(doc, inputRef(kind));
    // A tree's children are trees: the document says so, not "anything at all".
    expect(input('tree').properties.children.items).toEqual({ $ref: inputRef('tree') });
    // One Address for ship's two fields; bill's Address is its own, under another name.
    const ship = input('ship').properties;
    const bill = input('bill').properties;
    expect(ship.work.$ref).toBe(ship.home.$ref);
    expect(resolveRef(doc, ship.home.$ref)).toMatchObject({ required: ['city'] });
    expect(bill.shipping.anyOf).toContainEqual({ $ref: bill.billing.$ref });
    expect(resolveRef(doc, bill.billing.$ref)).toMatchObject({ required: ['street', 'zip'] });
    expect(bill.billing.$ref).not.toBe(ship.home.$ref);
    expect(input('legacy').properties).toEqual({
      a: { $ref: '#/components/schemas/Submit.legacy.Input.a_b' },
      b: { $ref: '#/components/schemas/Submit.legacy.Input/properties/a' },
      c: { $ref: '#/components/schemas/Submit.legacy.Input.Part_two/properties/n' },
    });

    // The route checks each kind's input with the kind's own schema: what it refused, it refuses.
    const refused = {
      tree: { name: 'a', children: [{ nom: 5 }] },
      ship: { home: { city: 'Oslo' }, work: {} },
      bill: { billing: { street: 'Main' }, shipping: null },
    };
    for (const [kind, value] of Object.entries(refused)) {
      const res = await r.call('POST', '/v1/operations', {
        headers: { 'idempotency-key': `refused-${kind}` },
        body: { kind, input: value },
      });
      expect([kind, res.status, res.json.code]).toEqual([kind, 422, 'input-invalid']);
    }
    const tree = { name: 'a', children: [{ name: 'b', children: [{ name: 'c' }] }] };
    const taken = await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'taken-tree' },
      body: { kind: 'tree', input: tree },
    });
    expect(taken.status).toBe(202);
  });

  it('declares required the headers it always sends, and sends them', async () => {
    r = await rig();
    const doc = (await r.call('GET', '/openapi.json', { key: null })).json;
    const submit = doc.paths['/v1/operations'].post.responses;
    expect(submit['202'].headers.Location).toMatchObject({ required: true, schema: { type: 'string' } });
    expect(submit['200'].headers.Location).toMatchObject({ required: true });
    expect(submit['200'].headers['Idempotent-Replayed']).toMatchObject({
      required: true,
      schema: { const: 'true' },
    });
    // Absent once the operation has ended: not required.
    expect(submit['202'].headers['Retry-After'].required).toBeUndefined();
    let busy = 0;
    for (const item of Object.values(doc.paths as Record<string, Record<string, { responses: object }>>)) {
      for (const op of Object.values(item)) {
        for (const [status, response] of Object.entries(op.responses)) {
          if (status !== '429' && status !== '503') continue;
          busy++;
          expect([status, response.headers['Retry-After']]).toEqual([
            status,
            expect.objectContaining({ required: true, schema: { type: 'integer', minimum: 1 } }),
          ]);
        }
      }
    }
    expect(busy).toBeGreaterThanOrEqual(10);

    // Every 429 and 503 sends it: each code has a default, or its error always carries an estimate.
    const busyCodes = Object.entries(PROBLEMS).filter(([, spec]) => [429, 503].includes(spec.status));
    const estimated = {
      'tenant-queue-full': new CapacityExceeded('tenant-queue-full', 1, 'full'),
      'class-queue-full': new CapacityExceeded('class-queue-full', 1, 'full'),
      'budget-exhausted': new BudgetExhausted('spend:p', 1),
    } as Record<string, SluiceError>;
    for (const [code, spec] of busyCodes) {
      const error = estimated[code] ?? new SluiceError(code, 'busy');
      expect([code, spec.retryAfterMs !== undefined || code in estimated]).toEqual([code, true]);
      expect([code, toProblem(error).headers['retry-after']]).toEqual([
        code,
        expect.stringMatching(/^[1-9]\d*$/),
      ]);
    }

    const body = { kind: 'note', input: { text: 'hi' } };
    const first = await r.call('POST', '/v1/operations', { headers: { 'idempotency-key': 'h1' }, body });
    const again = await r.call('POST', '/v1/operations', { headers: { 'idempotency-key': 'h1' }, body });
    expect([first.status, first.headers.get('location')]).toEqual([202, '/v1/operations/h1']);
    expect([again.status, again.headers.get('location'), again.headers.get('idempotent-replayed')]).toEqual([
      200,
      '/v1/operations/h1',
      'true',
    ]);
  });

  it("names the operation's schema once, and every response that carries an operation refers to it", async () => {
    r = await rig();
    const doc = (await r.call('GET', '/openapi.json', { key: null })).json;
    expect(doc.components.schemas.Operation).toEqual(operationSchema);
    const ref = { $ref: '#/components/schemas/Operation' };
    const body = (path: string, method: string, status: string) =>
      doc.paths[path][method].responses[status].content['application/json'].schema;
    for (const [path, method, status] of [
      ['/v1/operations', 'post', '202'],
      ['/v1/operations', 'post', '200'],
      ['/v1/operations/{id}', 'get', '200'],
      ['/v1/operations/{id}/redrive', 'post', '200'],
      ['/v1/operations/{id}/reconcile', 'post', '200'],
    ] as const) {
      expect([path, method, status, body(path, method, status)]).toEqual([path, method, status, ref]);
    }
    expect(body('/v1/operations', 'get', '200').properties.operations.items).toEqual(ref);
    expect(body('/v1/operations/{id}/cancel', 'post', '200').properties.operation).toEqual(ref);
    // Written out once: its properties appear nowhere else.
    expect(JSON.stringify(doc).match(/"digest":\{/g)).toHaveLength(1);
    // The responses' own words stay with them.
    expect(doc.paths['/v1/operations/{id}'].get.responses['200'].description).toBe('The operation.');
  });

  it("cuts a long path's instance to its bound at a whole character: still a URI reference", async () => {
    r = await rig();
    // RFC 3986 §4.1, for a path: unreserved, sub-delims, ':', '@', '/' and whole %XX escapes.
    const pathReference = /^(?:[A-Za-z0-9\-._~!$&'()*+,;=:@/]|%[0-9A-Fa-f]{2})*$/;
    // The 1,024-character cut lands in plain text, on a `%`, just after an escape, inside one.
    const kepts: number[] = [];
    for (const id of [
      'a'.repeat(2000),
      '%61'.repeat(1500),
      `x${'%61'.repeat(1500)}`,
      `xx${'%61'.repeat(1500)}`,
    ]) {
      const path = `/v1/operations/${id}`;
      const res = await r.call('GET', path);
      expect([id.slice(0, 4), res.status, res.json.code]).toEqual([id.slice(0, 4), 414, 'uri-too-long']);
      const instance: string = res.json.instance;
      expect(instance).toMatch(pathReference);
      expect(() => decodeURI(instance)).not.toThrow();
      // The cut is said, as an escaped ellipsis, after what is kept of the path.
      expect(instance).toMatch(/%E2%80%A6$/);
      const kept = instance.slice(0, -'%E2%80%A6'.length);
      expect(path.startsWith(kept)).toBe(true);
      kepts.push(kept.length);
    }
    // Whole escapes only: the `%` and the `%6` left at the cut are dropped.
    expect(kepts).toEqual([1024, 1023, 1024, 1022]);
    // A path within the bound is the instance as it came.
    const short = await r.call('GET', `/v1/operations/${'%61'.repeat(300)}`);
    expect(short.json.instance).toBe(`/v1/operations/${'%61'.repeat(300)}`);
  });
});
