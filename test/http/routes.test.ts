/**
 * The routes in breadth, in-process (`fastify.inject`): responses equal the library's view,
 * pagination, `include`, every cancel outcome, usage with budgets, query validation at its
 * edges, and the problem mapping (every documented error code has a status and a type).
 */
import { readFileSync } from 'node:fs';
import type { FastifyRequest } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { InvalidArgument, StoreError } from '../../src/core/errors/index.js';
import { PROBLEMS, problemCodes, toProblem } from '../../src/http/problem.js';
import { principalOf } from '../../src/http/route-config.js';
import type { Store } from '../../src/index.js';
import { SLUICE_ERROR_CODES, sqliteStore } from '../../src/index.js';
import { FakeClock } from '../../src/testing/fake-clock.js';
import { O7 } from '../helpers/charge-kind.js';
import { Gate } from '../helpers/gate.js';
import { KEYS, type Rig, rig } from './rig.js';

async function inject(
  r: Rig,
  method: 'GET' | 'POST' | 'HEAD' | 'DELETE',
  url: string,
  o: { key?: string | null; body?: unknown; headers?: Record<string, string> } = {},
) {
  const key = o.key === undefined ? KEYS.north : o.key;
  const res = await r.app.inject({
    method,
    url,
    headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...o.headers },
    ...(o.body === undefined ? {} : { payload: o.body as object }),
  });
  return {
    status: res.statusCode,
    headers: res.headers,
    body: res.body,
    json: res.body ? JSON.parse(res.body) : undefined,
  };
}

const submit = (r: Rig, id: string, body: unknown, key: string = KEYS.north) =>
  inject(r, 'POST', '/v1/operations', { key, body, headers: { 'idempotency-key': id } });

describe('routes, in-process', () => {
  let r: Rig;
  afterEach(async () => r?.close());

  it("responses are exactly the library's view of the operation", async () => {
    r = await rig();
    r.h.worker().start();
    await submit(r, 'O7', { kind: 'charge', input: O7 });
    await r.h.sluice.wait({ tenant: 'north', id: 'O7' });
    const full = await inject(r, 'GET', '/v1/operations/O7?include=attempts,effects,events');
    const lib = await r.h.sluice.get(
      { tenant: 'north', id: 'O7' },
      { include: ['attempts', 'effects', 'events'] },
    );
    // A tenant key is not shown which worker ran an attempt; an admin key is.
    const hidden = { ...lib, attempts: lib?.attempts?.map((a) => ({ ...a, worker: null })) };
    expect(full.json).toEqual(JSON.parse(JSON.stringify(hidden)));
    expect(full.json.attempts).toHaveLength(1);
    const asAdmin = await inject(r, 'GET', '/v1/operations/O7?tenant=north&include=attempts,effects,events', {
      key: KEYS.admin,
    });
    expect(asAdmin.json).toEqual(JSON.parse(JSON.stringify(lib)));
    expect(asAdmin.json.attempts[0].worker).toMatch(/\//);
    const plain = await inject(r, 'GET', '/v1/operations/O7');
    expect(plain.json).toEqual(
      JSON.parse(JSON.stringify(await r.h.sluice.get({ tenant: 'north', id: 'O7' }))),
    );
    expect(plain.json).not.toHaveProperty('attempts');
    const list = await inject(r, 'GET', '/v1/operations');
    expect(list.json).toEqual(JSON.parse(JSON.stringify(await r.h.sluice.list({ tenant: 'north' }))));
  });

  it("shows a tenant key no worker's identity: not the lease's, the attempts', nor in an expiry's message", async () => {
    const clock = new FakeClock();
    r = await rig({ store: sqliteStore({ path: ':memory:', clock }) });
    await submit(r, 'held', { kind: 'note', input: { text: 'n' } });
    const claim = (owner: string) =>
      r.h.store.operationClaimMany({ class: 'bulk', owner, limit: 1, leaseMs: 1_000 });
    // A worker on an internal host takes it and vanishes; the rescuer puts it back; another takes it.
    expect((await claim('db-7.internal.example/4242/a1b2c3')).rows).toHaveLength(1);
    clock.advance(1_001);
    expect(await r.h.store.leaseRescue({ maxLeaseExpiries: 3, limit: 10 })).toHaveLength(1);
    expect((await claim('db-8.internal.example/77/d4e5f6')).rows).toHaveLength(1);
    const url = '/v1/operations/held?include=attempts';
    const asTenant = await inject(r, 'GET', url);
    expect(asTenant.status).toBe(200);
    expect(asTenant.json.lease).toMatchObject({ worker: null });
    expect(asTenant.json.attempts).toMatchObject([{ outcome: 'lease-expired', worker: null }]);
    expect(asTenant.json.attempts[0].error.code).toBe('lease-expired');
    for (const listed of [
      asTenant,
      await inject(r, 'GET', '/v1/operations'),
      await inject(r, 'POST', '/v1/operations/held/cancel'),
    ])
      expect(listed.body).not.toMatch(/internal\.example/);
    const asAdmin = await inject(r, 'GET', `${url}&tenant=north`, { key: KEYS.admin });
    expect(asAdmin.json.lease.worker).toBe('db-8.internal.example/77/d4e5f6');
    expect(asAdmin.json.attempts[0]).toMatchObject({ worker: 'db-7.internal.example/4242/a1b2c3' });
    expect(asAdmin.json.attempts[0].error.message).toMatch(/db-7\.internal\.example/);
  });

  it('tell a client polling an operation when to look again, until it has ended', async () => {
    r = await rig();
    const later = await submit(r, 'later', { kind: 'note', input: { text: 'n' }, delayMs: 30_000 });
    expect(later.status).toBe(202);
    // Due in 30 s, less the milliseconds the answer took.
    expect(Number(later.headers['retry-after'])).toBeGreaterThanOrEqual(29);
    expect(Number(later.headers['retry-after'])).toBeLessThanOrEqual(30);
    const now = await submit(r, 'now', { kind: 'note', input: { text: 'n' } });
    expect(now.headers['retry-after']).toBe('1');
    expect((await inject(r, 'GET', '/v1/operations/now')).headers['retry-after']).toBe('1');
    expect((await submit(r, 'now', { kind: 'note', input: { text: 'n' } })).headers['retry-after']).toBe('1');
    r.h.worker().start();
    await r.h.sluice.wait({ tenant: 'north', id: 'now' });
    const ended = await inject(r, 'GET', '/v1/operations/now');
    expect([ended.json.state, ended.headers['retry-after']]).toEqual(['succeeded', undefined]);
    expect(
      (await submit(r, 'now', { kind: 'note', input: { text: 'n' } })).headers['retry-after'],
    ).toBeUndefined();
  });

  it("count a poll hint on the store's clock, not this host's", async () => {
    // The store's clock ten minutes ahead of this host's, as a PostgreSQL server's may be of an
    // API host's: an operation due now on the store's clock is due now, not in ten minutes.
    const ahead = { now: () => Date.now() + 600_000 };
    r = await rig({ store: sqliteStore({ path: ':memory:', clock: ahead }) });
    const now = await submit(r, 'now', { kind: 'note', input: { text: 'n' } });
    expect([now.status, now.headers['retry-after']]).toEqual([202, '1']);
    expect((await inject(r, 'GET', '/v1/operations/now')).headers['retry-after']).toBe('1');
    // Due in 30 s on the store's clock, less what the answer took (not 630 s on this host's).
    const later = await submit(r, 'later', { kind: 'note', input: { text: 'n' }, delayMs: 30_000 });
    expect(Number(later.headers['retry-after'])).toBeGreaterThanOrEqual(20);
    expect(Number(later.headers['retry-after'])).toBeLessThanOrEqual(30);
    const replay = await submit(r, 'later', { kind: 'note', input: { text: 'n' }, delayMs: 30_000 });
    expect(replay.status).toBe(200);
    expect(Number(replay.headers['retry-after'])).toBeLessThanOrEqual(30);
  });

  it('lists page by cursor, filter by state and kind, and check their parameters', async () => {
    r = await rig();
    for (let i = 0; i < 5; i++)
      await submit(r, `c${i}`, { kind: 'charge', input: { invoice: i, amount_cents: 1 } });
    await submit(r, 'n0', { kind: 'note', input: { text: 'n' } });
    await submit(r, 's0', { kind: 'charge', input: O7 }, KEYS.south);
    await inject(r, 'POST', '/v1/operations/c1/cancel');

    const ids: string[] = [];
    let cursor: string | null = null;
    do {
      const page: { json: { operations: Array<{ id: string }>; nextCursor: string | null } } = await inject(
        r,
        'GET',
        `/v1/operations?limit=2${cursor ? `&cursor=${cursor}` : ''}`,
      );
      expect(page.json.operations.length).toBeLessThanOrEqual(2);
      ids.push(...page.json.operations.map((o) => o.id));
      cursor = page.json.nextCursor;
    } while (cursor);
    expect(ids).toEqual(['c0', 'c1', 'c2', 'c3', 'c4', 'n0']);

    const cancelled = await inject(r, 'GET', '/v1/operations?state=cancelled');
    expect(cancelled.json.operations.map((o: { id: string }) => o.id)).toEqual(['c1']);
    const notes = await inject(r, 'GET', '/v1/operations?kind=note');
    expect(notes.json.operations.map((o: { id: string }) => o.id)).toEqual(['n0']);
    expect((await inject(r, 'GET', '/v1/operations?limit=500')).status).toBe(200);
    expect((await inject(r, 'GET', '/v1/operations?limit=1')).json.operations).toHaveLength(1);
    for (const bad of [
      'limit=0',
      'limit=501',
      'limit=abc',
      'limit=1.5',
      'state=done',
      'cursor=!!',
      'cursor=bm90LWEtbnVtYmVy',
      'other=1',
      'include=effects',
    ]) {
      const res = await inject(r, 'GET', `/v1/operations?${bad}`);
      expect([bad, res.status, res.json.code]).toEqual([bad, 400, 'invalid-argument']);
    }
    // A cursor of the earlier form (the position in base64url) could be forged for any position,
    // and bisecting them would count other tenants' submits: refused like an edited one.
    for (const seq of [0, 1, 3, 1_234_567_890_123_456]) {
      const forged = Buffer.from(String(seq)).toString('base64url');
      const res = await inject(r, 'GET', `/v1/operations?cursor=${forged}`);
      expect([seq, res.status, res.json.code]).toEqual([seq, 400, 'invalid-argument']);
    }
  });

  it('GET checks its id and include; an id of 255 is fine, 256 is 400', async () => {
    r = await rig();
    const long = 'i'.repeat(255);
    await submit(r, long, { kind: 'note', input: { text: '' } });
    expect((await inject(r, 'GET', `/v1/operations/${long}`)).status).toBe(200);
    const tooLong = await inject(r, 'GET', `/v1/operations/${'i'.repeat(256)}`);
    expect([tooLong.status, tooLong.json.code]).toEqual([400, 'invalid-argument']);
    const wayTooLong = await inject(r, 'GET', `/v1/operations/${'i'.repeat(2000)}`);
    expect([wayTooLong.status, wayTooLong.json.code]).toEqual([414, 'uri-too-long']);
    const badInclude = await inject(r, 'GET', `/v1/operations/${long}?include=secrets`);
    expect([badInclude.status, badInclude.json.code]).toEqual([400, 'invalid-argument']);
    expect((await inject(r, 'GET', '/v1/operations/missing')).status).toBe(404);
  });

  it('cancel answers cancelled, requested or too_late, as the operation stands', async () => {
    const beforeEffect = new Gate();
    const insideEffect = new Gate();
    r = await rig({
      define(sluice) {
        sluice.define('slow', {
          input: z.object({ effect: z.boolean() }),
          class: 'slow',
          run: async (input, ctx) => {
            if (!input.effect) {
              await beforeEffect.wait(ctx.signal);
              return 'ran';
            }
            return ctx.effect('pay', {
              call: async () => {
                await insideEffect.wait();
                return 'paid';
              },
            });
          },
        });
      },
    });
    // Queued: cancelled at once.
    await submit(r, 'q', { kind: 'slow', input: { effect: false }, delayMs: 1_800_000 });
    const queued = await inject(r, 'POST', '/v1/operations/q/cancel');
    expect([queued.status, queued.json.cancel, queued.json.operation.state]).toEqual([
      200,
      'cancelled',
      'cancelled',
    ]);

    r.h.worker({ slots: { slow: 2 } }).start();
    // Running, no effect yet: requested, then it ends cancelled.
    await submit(r, 'run', { kind: 'slow', input: { effect: false } });
    await beforeEffect.arrived;
    const running = await inject(r, 'POST', '/v1/operations/run/cancel');
    expect([running.json.cancel, running.json.operation.state]).toEqual(['requested', 'running']);
    expect((await r.h.sluice.wait({ tenant: 'north', id: 'run' })).state).toBe('cancelled');

    // An effect has begun: too late; it runs to its end and says so.
    await submit(r, 'pay', { kind: 'slow', input: { effect: true } });
    await insideEffect.arrived;
    const late = await inject(r, 'POST', '/v1/operations/pay/cancel');
    expect(late.json.cancel).toBe('too_late');
    insideEffect.open();
    const done = await r.h.sluice.wait({ tenant: 'north', id: 'pay' });
    expect([done.state, done.result, done.cancel]).toEqual(['succeeded', 'paid', 'too_late']);
    const after = await inject(r, 'POST', '/v1/operations/pay/cancel');
    expect(after.json.cancel).toBe('too_late');
    expect((await inject(r, 'GET', '/v1/operations/pay')).json.cancel).toBe('too_late');
  });

  it("usage: the tenant's running and waiting per class, and its spend in the current window", async () => {
    const gate = new Gate();
    r = await rig({
      sluice: { providers: { payments: { perTenant: { limit: 100_000, windowMs: 3_600_000 } } } },
      define(sluice) {
        sluice.define('paid', {
          input: z.object({ cents: z.number().int() }),
          class: 'paid',
          run: async (input, ctx) => {
            await ctx.effect('charge', { provider: 'payments', cost: input.cents, call: async () => 'ok' });
            await gate.wait();
            return 'done';
          },
        });
      },
    });
    r.h.worker({ slots: { paid: 1, bulk: 0, default: 0 } }).start();
    await submit(r, 'p1', { kind: 'paid', input: { cents: 1234 } });
    await gate.arrived;
    await submit(r, 'p2', { kind: 'paid', input: { cents: 1 } });
    await submit(r, 'n1', { kind: 'note', input: { text: 'x' } }, KEYS.south);
    const usage = await inject(r, 'GET', '/v1/tenants/north/usage');
    expect(usage.status).toBe(200);
    expect(usage.json.tenant).toBe('north');
    expect(usage.json.classes).toEqual([{ class: 'paid', running: 1, waiting: 1 }]);
    expect(usage.json.budgets).toHaveLength(1);
    expect(usage.json.budgets[0]).toMatchObject({ provider: 'payments', reserved: 0, committed: 1234 });
    expect(Date.parse(usage.json.budgets[0].windowEnd) - Date.parse(usage.json.budgets[0].windowStart)).toBe(
      3_600_000,
    );
    const south = await inject(r, 'GET', '/v1/tenants/south/usage', { key: KEYS.admin });
    expect(south.json).toEqual({
      tenant: 'south',
      classes: [{ class: 'bulk', running: 0, waiting: 1 }],
      budgets: [],
    });
    gate.open();
    await r.h.sluice.wait({ tenant: 'north', id: 'p2' });
  });

  it('healthz, readyz, unknown routes and methods', async () => {
    r = await rig();
    expect(await inject(r, 'GET', '/healthz', { key: null })).toMatchObject({
      status: 200,
      json: { status: 'ok' },
    });
    expect(await inject(r, 'GET', '/readyz', { key: null })).toMatchObject({
      status: 200,
      json: { status: 'ready' },
    });
    const unknown = await inject(r, 'GET', '/v2/operations', { key: null });
    expect([unknown.status, unknown.json.code, unknown.headers['content-type']]).toEqual([
      404,
      'not-found',
      'application/problem+json; charset=utf-8',
    ]);
    // A path that exists under other methods: 405 naming them, not 404.
    const wrong = await inject(r, 'POST', '/healthz', { key: null });
    expect([wrong.status, wrong.json.code, wrong.headers.allow]).toEqual([
      405,
      'method-not-allowed',
      'GET, HEAD',
    ]);
    const deleted = await inject(r, 'DELETE', '/v1/operations/O7', { key: null });
    expect([deleted.status, deleted.headers.allow]).toEqual([405, 'GET, HEAD']);
    // HEAD answers as GET does, without a body.
    const head = await inject(r, 'HEAD', '/healthz', { key: null });
    expect([head.status, head.body, head.headers['content-type']]).toEqual([
      200,
      '',
      'application/json; charset=utf-8',
    ]);
  });

  it('an unexpected failure is a 500 problem with no detail leaked, logged with its cause', async () => {
    const inner = sqliteStore({ path: ':memory:' });
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        if (prop === 'operationGet') return () => Promise.reject(new Error('SECRET internal detail'));
        return Reflect.get(target, prop, receiver);
      },
    }) as Store;
    r = await rig({ store });
    const res = await inject(r, 'GET', '/v1/operations/x');
    expect([res.status, res.json.code]).toEqual([500, 'internal-error']);
    expect(JSON.stringify(res.json)).not.toContain('SECRET');
    expect(r.logs.join('')).toContain('SECRET internal detail');
  });
});

describe('the problem mapping', () => {
  it('covers every code in docs/errors.md, each with a status, a title and a stable type', () => {
    const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');
    const codes = [...doc.matchAll(/^\|\s*`([a-z0-9-]+)`/gm)].map((m) => m[1]!);
    expect(codes.length).toBeGreaterThan(30);
    // The document lists the engine's codes, the exported list's (the compiler checks
    // that the list and the mapping agree).
    expect([...new Set(codes)].sort()).toEqual([...SLUICE_ERROR_CODES].sort());
    for (const code of codes) {
      expect(PROBLEMS[code], code).toBeDefined();
      const { status, body } = toProblem({ code, message: 'x', [Symbol.for('sluice.error')]: true });
      expect([code, status, body.type]).toEqual([
        code,
        PROBLEMS[code]!.status,
        `https://sluice.dev/problems/${code}`,
      ]);
    }
    for (const code of problemCodes()) expect(PROBLEMS[code]!.status).toBeGreaterThanOrEqual(400);
  });

  it('docs/http-api.md lists every problem a client can receive, with its status', () => {
    const doc = readFileSync(new URL('../../docs/http-api.md', import.meta.url), 'utf8');
    const table = doc.slice(doc.indexOf('## Problem types'), doc.indexOf('## Metrics'));
    const rows = [...table.matchAll(/^\| `([a-z0-9-]+)`\s*\| (\d{3})\s*\|/gm)].map((m) => [
      m[1]!,
      Number(m[2]),
    ]);
    expect(rows.map(([c]) => c).sort()).toEqual(problemCodes().sort());
    for (const [code, status] of rows)
      expect([code, status]).toEqual([code, PROBLEMS[code as string]!.status]);
  });

  it('maps the contract statuses', () => {
    const status = (code: string) => PROBLEMS[code]!.status;
    expect(
      [
        'idempotency-key-reused',
        'tenant-queue-full',
        'class-queue-full',
        'store-unavailable',
        'input-too-large',
        'body-too-large',
        'input-invalid',
        'kind-unknown',
        'body-malformed',
        'idempotency-key-missing',
        'unauthorized',
        'operation-not-found',
      ].map((c) => [c, status(c)]),
    ).toEqual([
      ['idempotency-key-reused', 422],
      ['tenant-queue-full', 429],
      ['class-queue-full', 503],
      ['store-unavailable', 503],
      ['input-too-large', 413],
      ['body-too-large', 413],
      ['input-invalid', 422],
      ['kind-unknown', 422],
      ['body-malformed', 400],
      ['idempotency-key-missing', 400],
      ['unauthorized', 401],
      ['operation-not-found', 404],
    ]);
  });

  it('store errors: retryable ones are 503 with Retry-After and no database text; others 500', () => {
    const busy = toProblem(new StoreError('busy', 'SQLITE_BUSY: database is locked'));
    expect([busy.status, busy.headers['retry-after'], busy.body.detail]).toEqual([
      503,
      '2',
      'The store is busy; retry later',
    ]);
    const unknown = toProblem(new StoreError('unknown', 'syntax error near SELECT'));
    expect([unknown.status, unknown.headers['retry-after']]).toEqual([500, undefined]);
    expect(unknown.body.detail).not.toContain('SELECT');
    expect(toProblem(new InvalidArgument('limit must be 1–500')).body).toMatchObject({
      status: 400,
      code: 'invalid-argument',
      detail: 'limit must be 1–500',
    });
    expect(toProblem(new TypeError('boom')).body).toMatchObject({ status: 500, code: 'internal-error' });
    // Not migrated: a 503 the client may retry, and the database's words left out.
    const unmigrated = toProblem(new StoreError('not-migrated', 'SQLite: no such table: operations'));
    expect([unmigrated.status, unmigrated.headers['retry-after']]).toEqual([503, '2']);
    expect(unmigrated.body.detail).not.toContain('no such table');
  });

  it('a route that finds no principal answers 401 with the challenge every 401 carries', () => {
    const refused = (() => {
      try {
        principalOf({ principal: null } as FastifyRequest);
      } catch (error) {
        return toProblem(error);
      }
    })();
    expect([refused?.status, refused?.headers['www-authenticate']]).toEqual([401, 'Bearer realm="sluice"']);
  });
});
