/**
 * The OpenAPI document: valid OpenAPI 3.1 (checked by a validator library), listing exactly
 * the routes fastify has registered (read from fastify's own route tree, not from the
 * generator's record), with each kind's input schema under the submit body — and a kind whose
 * validator offers no JSON Schema documented as `{}` with a description.
 */
import { Validator } from '@seriousme/openapi-schema-validator';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import { afterEach, describe, expect, it } from 'vitest';
import { PROBLEMS } from '../../src/http/problem.js';
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
        'GET /healthz',
        'GET /metrics',
        'GET /openapi.json',
        'GET /readyz',
        'GET /v1/operations',
        'GET /v1/operations/{id}',
        'GET /v1/tenants/{tenant}/usage',
        'POST /v1/operations',
        'POST /v1/operations/{id}/cancel',
        'POST /v1/operations/{id}/reconcile',
        'POST /v1/operations/{id}/redrive',
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
      reconcileOperation: {
        key: KEYS.admin,
        query: 'tenant=north&',
        body: { reason: 'r', resolution: 'failed' },
      },
      getTenantUsage: { key: KEYS.north },
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
    expect(charge.properties.input).toMatchObject({
      type: 'object',
      required: ['invoice', 'amount_cents'],
      properties: { invoice: { type: 'integer' }, amount_cents: { type: 'integer' } },
    });
    expect(charge.additionalProperties).toBe(false);
    const hand = doc.components.schemas['Submit.handmade'].properties.input;
    expect(Object.keys(hand)).toEqual(['description']);
    expect(hand.description).toMatch(/handmade schema, which offers no JSON Schema/);

    const key = submit.parameters.find((p: { in: string }) => p.in === 'header');
    expect(key).toMatchObject({
      name: 'Idempotency-Key',
      required: true,
      schema: { pattern: '^[\\x21-\\x7e]{1,255}$', not: { enum: ['.', '..'] } },
    });
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
});
