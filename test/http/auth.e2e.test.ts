/**
 * Auth end to end over loopback: 401 for a missing or unknown key on every protected route,
 * the tenant taken from the key (another tenant's operation is 404, and refusals leave it
 * alone), admin and tenant keys on admin routes, the operator actions recorded with who, and
 * no key or body ever in the server's log.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ambiguous, Retryable } from '../../src/core/errors/index.js';
import { KeyRing } from '../../src/http/auth.js';
import { isTerminal } from '../../src/index.js';
import { O7 } from '../helpers/charge-kind.js';
import { KEYS, type Rig, rig } from './rig.js';

const PROTECTED: Array<[string, string, unknown?]> = [
  ['GET', '/v1/operations'],
  ['GET', '/v1/operations/O7'],
  ['POST', '/v1/operations', { kind: 'charge', input: O7 }],
  ['POST', '/v1/operations/O7/cancel'],
  ['POST', '/v1/operations/O7/redrive?tenant=north', { reason: 'r' }],
  ['POST', '/v1/operations/O7/reconcile?tenant=north', { reason: 'r', resolution: 'failed' }],
  ['GET', '/v1/tenants/north/usage'],
];

describe('auth over loopback', () => {
  let r: Rig;
  afterEach(async () => r?.close());

  it('every protected route: 401 without a key, with an unknown key, with another scheme', async () => {
    r = await rig();
    expect(
      (
        await r.call('POST', '/v1/operations', {
          headers: { 'idempotency-key': 'O7' },
          body: { kind: 'charge', input: O7 },
        })
      ).status,
    ).toBe(202);
    const before = await r.snapshot();
    for (const [method, path, body] of PROTECTED) {
      for (const key of [null, 'wrong-key', `${KEYS.north}x`]) {
        const res = await r.call(method, path, { key, body, headers: { 'idempotency-key': 'O8' } });
        expect([method, path, key, res.status, res.json.code]).toEqual([
          method,
          path,
          key,
          401,
          'unauthorized',
        ]);
        expect(res.headers.get('www-authenticate')).toMatch(/^Bearer realm="sluice"/);
      }
      const basic = await r.call(method, path, {
        key: null,
        body,
        headers: { authorization: `Basic ${Buffer.from(`a:${KEYS.admin}`).toString('base64')}` },
      });
      expect(basic.status).toBe(401);
    }
    expect(await r.snapshot()).toEqual(before);
    for (const path of ['/healthz', '/readyz', '/metrics', '/openapi.json']) {
      expect((await r.call('GET', path, { key: null })).status).toBe(200);
    }
  });

  it('any configured key works: plaintext, hashed, a second key, a lower-case scheme', async () => {
    r = await rig();
    const list = async (key: string, scheme = 'Bearer') =>
      r.call('GET', '/v1/operations', { key: null, headers: { authorization: `${scheme} ${key}` } });
    expect((await list(KEYS.north)).status).toBe(200);
    expect((await list(KEYS.north2)).status).toBe(200);
    expect((await list(KEYS.south)).status).toBe(200); // configured as sha256:<hex>
    expect((await list(KEYS.north, 'bearer')).status).toBe(200);
  });

  it("another tenant's operation is 404 for every verb, and stays untouched", async () => {
    r = await rig();
    expect(
      (
        await r.call('POST', '/v1/operations', {
          headers: { 'idempotency-key': 'O7' },
          body: { kind: 'charge', input: O7 },
        })
      ).status,
    ).toBe(202);
    const before = await r.snapshot();
    const south = { key: KEYS.south };
    const get = await r.call('GET', '/v1/operations/O7', south);
    expect([get.status, get.json.code]).toEqual([404, 'operation-not-found']);
    const cancel = await r.call('POST', '/v1/operations/O7/cancel', south);
    expect([cancel.status, cancel.json.code]).toEqual([404, 'operation-not-found']);
    const list = await r.call('GET', '/v1/operations', south);
    expect([list.status, list.json.operations]).toEqual([200, []]);
    const usage = await r.call('GET', '/v1/tenants/north/usage', south);
    expect([usage.status, usage.json.code]).toEqual([404, 'not-found']);
    // A tenant key cannot name a tenant, not even to peek.
    const named = await r.call('GET', '/v1/operations/O7?tenant=north', south);
    expect([named.status, named.json.code]).toEqual([403, 'forbidden']);
    expect(await r.snapshot()).toEqual(before);
    // North still sees and owns it.
    const own = await r.call('GET', '/v1/operations/O7');
    expect([own.status, own.json.state]).toEqual([200, 'queued']);
    expect((await r.call('GET', '/v1/tenants/north/usage')).json.classes).toEqual([
      { class: 'default', running: 0, waiting: 1 },
    ]);
  });

  it("usage shows a tenant's own spend only, though another tenant's name ends like its keys", async () => {
    // Budget keys are `spend:<provider>:tenant:<tenant>`, and a tenant is any visible ASCII: the
    // keys of tenant `x:tenant:b` end as tenant `b`'s would.
    const keys = { b: 'tenant-b-key', xb: 'tenant-x-tenant-b-key' };
    r = await rig({
      server: { auth: { tenants: { b: [keys.b], 'x:tenant:b': [keys.xb] }, admin: [KEYS.admin] } },
      sluice: { providers: { pay: { perTenant: { limit: 100_000, windowMs: 3_600_000 } } } },
      define(sluice) {
        sluice.define('paid', {
          input: z.object({ cents: z.number().int() }),
          run: async (input, ctx) => {
            await ctx.effect('charge', { provider: 'pay', cost: input.cents, call: async () => 'ok' });
            return 'done';
          },
        });
      },
    });
    r.h.worker().start();
    const submitted = await r.call('POST', '/v1/operations', {
      key: keys.xb,
      headers: { 'idempotency-key': 'p1' },
      body: { kind: 'paid', input: { cents: 4242 } },
    });
    expect(submitted.status).toBe(202);
    expect((await r.h.sluice.wait({ tenant: 'x:tenant:b', id: 'p1' })).state).toBe('succeeded');
    const spent = { provider: 'pay', reserved: 0, committed: 4242 };
    const own = await r.call('GET', '/v1/tenants/x:tenant:b/usage', { key: keys.xb });
    expect([own.status, own.json.budgets]).toEqual([200, [expect.objectContaining(spent)]]);
    const other = await r.call('GET', '/v1/tenants/b/usage', { key: keys.b });
    expect([other.status, other.json.budgets]).toEqual([200, []]);
    const byAdmin = await r.call('GET', '/v1/tenants/b/usage', { key: KEYS.admin });
    expect(byAdmin.json.budgets).toEqual([]);
  });

  it('admin routes: 403 for a tenant key; an admin key must name the tenant; state is checked', async () => {
    r = await rig();
    await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'O7' },
      body: { kind: 'charge', input: O7 },
    });
    const before = await r.snapshot();
    for (const action of ['redrive', 'reconcile']) {
      const body =
        action === 'redrive' ? { reason: 'retry it' } : { reason: 'checked', resolution: 'failed' };
      const tenant = await r.call('POST', `/v1/operations/O7/${action}?tenant=north`, { body });
      expect([tenant.status, tenant.json.code]).toEqual([403, 'forbidden']);
      const unnamed = await r.call('POST', `/v1/operations/O7/${action}`, { key: KEYS.admin, body });
      expect([unnamed.status, unnamed.json.code]).toEqual([400, 'invalid-argument']);
      const wrongState = await r.call('POST', `/v1/operations/O7/${action}?tenant=north`, {
        key: KEYS.admin,
        body,
      });
      expect([wrongState.status, wrongState.json.code, wrongState.json.state]).toEqual([
        409,
        'operation-state-invalid',
        'queued',
      ]);
      const absent = await r.call('POST', `/v1/operations/none/${action}?tenant=north`, {
        key: KEYS.admin,
        body,
      });
      expect([absent.status, absent.json.code]).toEqual([404, 'operation-not-found']);
      const noReason = await r.call('POST', `/v1/operations/O7/${action}?tenant=north`, {
        key: KEYS.admin,
        body: {},
      });
      expect([noReason.status, noReason.json.code]).toEqual([422, 'request-invalid']);
    }
    expect(await r.snapshot()).toEqual(before);
    // An admin key reads and cancels any tenant's operation when it names the tenant.
    const unnamed = await r.call('GET', '/v1/operations/O7', { key: KEYS.admin });
    expect([unnamed.status, unnamed.json.code]).toEqual([400, 'invalid-argument']);
    const read = await r.call('GET', '/v1/operations/O7?tenant=north', { key: KEYS.admin });
    expect([read.status, read.json.tenant]).toEqual([200, 'north']);
    expect((await r.call('GET', '/v1/tenants/south/usage', { key: KEYS.admin })).status).toBe(200);
    const cancel = await r.call('POST', '/v1/operations/O7/cancel?tenant=north', { key: KEYS.admin });
    expect([cancel.status, cancel.json.cancel]).toEqual([200, 'cancelled']);
    // Recorded with the admin key's identity, which the tenant's key reads as an operator's.
    const bys = async (key: string, query = '') =>
      (await r.call('GET', `/v1/operations/O7?include=events${query}`, { key })).json.events.map(
        (e: { action: string; by: string }) => [e.action, e.by],
      );
    expect(await bys(KEYS.admin, '&tenant=north')).toEqual([['cancel', 'admin#1']]);
    expect(await bys(KEYS.north)).toEqual([['cancel', 'operator']]);
  });

  it('redrive of a dead operation and reconcile of an uncertain one, recorded with who and why', async () => {
    let runs = 0;
    r = await rig({
      define(sluice) {
        sluice.define('doomed', {
          input: z.object({}),
          limits: { maxAttempts: 1 },
          run: async () => {
            runs++;
            throw new Retryable('always down');
          },
        });
        sluice.define('uncertain', {
          input: z.object({}),
          limits: { backoff: { baseMs: 0, capMs: 0 } },
          run: (_input, ctx) =>
            ctx.effect('charge', {
              retentionMs: 1, // past the window at once: no blind retry
              call: async () => {
                throw new Ambiguous('timed out after sending');
              },
            }),
        });
      },
    });
    const worker = r.h.worker();
    worker.start();
    for (const [id, kind] of [
      ['D', 'doomed'],
      ['U', 'uncertain'],
    ]) {
      expect(
        (
          await r.call('POST', '/v1/operations', {
            headers: { 'idempotency-key': id! },
            body: { kind, input: {} },
          })
        ).status,
      ).toBe(202);
    }
    expect((await r.h.sluice.wait({ tenant: 'north', id: 'D' })).state).toBe('dead');
    expect((await r.h.sluice.wait({ tenant: 'north', id: 'U' })).state).toBe('needs_reconciliation');
    await worker.stop();

    const redriven = await r.call('POST', '/v1/operations/D/redrive?tenant=north', {
      key: KEYS.admin,
      body: { reason: 'the dependency is back' },
    });
    expect([redriven.status, redriven.json.state, redriven.json.attempt]).toEqual([200, 'queued', 0]);

    const reconciled = await r.call('POST', '/v1/operations/U/reconcile?tenant=north', {
      key: KEYS.admin,
      body: {
        by: 'ops@example.com',
        reason: 'the provider shows charge ch_77 under the key',
        effects: [{ name: 'charge', outcome: 'committed', result: { id: 'ch_77' }, reference: 'ch_77' }],
        resolution: 'succeeded',
        result: { charge: 'ch_77' },
      },
    });
    expect([reconciled.status, reconciled.json.state, reconciled.json.result]).toEqual([
      200,
      'succeeded',
      { charge: 'ch_77' },
    ]);
    expect(isTerminal(reconciled.json.state)).toBe(true);

    const events = async (id: string, key: string, query = '') =>
      (await r.call('GET', `/v1/operations/${id}?include=events,effects${query}`, { key })).json;
    const d = await events('D', KEYS.admin, '&tenant=north');
    expect(
      d.events.map((e: { action: string; by: string; reason: string }) => [e.action, e.by, e.reason]),
    ).toEqual([['redrive', 'admin#1', 'the dependency is back']]);
    const u = await events('U', KEYS.admin, '&tenant=north');
    expect(u.events.map((e: { action: string; by: string }) => [e.action, e.by])).toEqual([
      ['reconcile', 'ops@example.com'],
    ]);
    // The tenant's key reads who acted as an operator, and why as written.
    const seen = await Promise.all(['D', 'U'].map((id) => events(id, KEYS.north)));
    expect(
      seen.flatMap((op) => op.events.map((e: { by: string; reason: string }) => [e.by, e.reason])),
    ).toEqual([
      ['operator', 'the dependency is back'],
      ['operator', 'the provider shows charge ch_77 under the key'],
    ]);
    expect(seen[1]!.effects[0]).toMatchObject({ state: 'committed', reference: 'ch_77' });
    expect(u.effects[0]).toMatchObject({ state: 'committed', reference: 'ch_77' });
    expect(runs).toBe(1);
  });

  it("an admin key lists every tenant's dead letters, names a tenant for any other listing, and redrives them", async () => {
    // A server whose kinds take small inputs: a batch redrive's body is held to its own limit.
    r = await rig({
      server: { bodyLimitBytes: 8192 },
      define(sluice) {
        sluice.define('doomed', {
          input: z.object({}),
          limits: { maxAttempts: 1 },
          run: async () => {
            throw new Retryable('always down');
          },
        });
      },
    });
    const worker = r.h.worker();
    worker.start();
    for (const [key, id] of [
      [KEYS.north, 'N1'],
      [KEYS.south, 'S1'],
      [KEYS.north, 'N2'],
    ] as const) {
      const res = await r.call('POST', '/v1/operations', {
        key,
        headers: { 'idempotency-key': id },
        body: { kind: 'doomed', input: {} },
      });
      expect(res.status).toBe(202);
    }
    for (const [tenant, id] of [
      ['north', 'N1'],
      ['south', 'S1'],
      ['north', 'N2'],
    ])
      expect((await r.h.sluice.wait({ tenant: tenant!, id: id! })).state).toBe('dead');
    await worker.stop();
    const listed = (page: { operations: Array<{ tenant: string; id: string }> }) =>
      page.operations.map((o) => `${o.tenant}/${o.id}`);

    const dead = await r.call('GET', '/v1/operations?state=dead', { key: KEYS.admin });
    expect([dead.status, listed(dead.json), dead.json.nextCursor]).toEqual([
      200,
      ['north/N1', 'south/S1', 'north/N2'],
      null,
    ]);
    // A page at a time, across tenants too.
    const first = await r.call('GET', '/v1/operations?state=dead&limit=2', { key: KEYS.admin });
    expect(listed(first.json)).toEqual(['north/N1', 'south/S1']);
    const rest = await r.call('GET', `/v1/operations?state=dead&limit=2&cursor=${first.json.nextCursor}`, {
      key: KEYS.admin,
    });
    expect([listed(rest.json), rest.json.nextCursor]).toEqual([['north/N2'], null]);
    const waiting = await r.call('GET', '/v1/operations?state=needs_reconciliation', { key: KEYS.admin });
    expect([waiting.status, listed(waiting.json)]).toEqual([200, []]);
    // Named, one tenant's; a tenant key, its own, whatever it asks.
    const south = await r.call('GET', '/v1/operations?state=dead&tenant=south', { key: KEYS.admin });
    expect(listed(south.json)).toEqual(['south/S1']);
    const own = await r.call('GET', '/v1/operations?state=dead', { key: KEYS.south });
    expect(listed(own.json)).toEqual(['south/S1']);
    // Any other listing across tenants would read through the whole history: refused, said why.
    for (const query of ['', '?state=succeeded', '?state=queued', '?kind=doomed']) {
      const refused = await r.call('GET', `/v1/operations${query}`, { key: KEYS.admin });
      expect([query, refused.status, refused.json.code, refused.json.errors?.[0]?.parameter]).toEqual([
        query,
        400,
        'invalid-argument',
        'tenant',
      ]);
      expect(refused.json.detail).toMatch(/state=dead or \?state=needs_reconciliation/);
    }

    // The page listed, back to the queue in one call: each answered in its place.
    const operations = dead.json.operations.map((o: { tenant: string; id: string }) => ({
      tenant: o.tenant,
      id: o.id,
    }));
    const before = await r.snapshot();
    const byTenant = await r.call('POST', '/v1/redrives', {
      key: KEYS.north,
      body: { reason: 'back', operations },
    });
    expect([byTenant.status, byTenant.json.code]).toEqual([403, 'forbidden']);
    const tooMany = await r.call('POST', '/v1/redrives', {
      key: KEYS.admin,
      body: { reason: 'back', operations: Array.from({ length: 101 }, () => operations[0]) },
    });
    expect([tooMany.status, tooMany.json.code, tooMany.json.errors?.[0]?.pointer]).toEqual([
      422,
      'request-invalid',
      '#/operations',
    ]);
    expect(await r.snapshot()).toEqual(before);
    // At the edges: 100 references, each at the longest tenant and id, with the longest reason,
    // fit the route's body limit, whatever the kinds allow.
    const longest = Array.from({ length: 100 }, (_, i) => ({
      tenant: `t${i}`.padEnd(128, 'x'),
      id: `o${i}`.padEnd(255, 'y'),
    }));
    const edge = await r.call('POST', '/v1/redrives', {
      key: KEYS.admin,
      body: { reason: 'r'.repeat(2000), by: 'b'.repeat(200), operations: longest },
    });
    expect([edge.status, edge.json.results?.length]).toEqual([200, 100]);
    expect(new Set(edge.json.results.map((x: { code: string }) => x.code))).toEqual(
      new Set(['operation-not-found']),
    );
    const over = await r.call('POST', '/v1/redrives', {
      key: KEYS.admin,
      body: { reason: 'r'.repeat(64 * 1024), operations: longest },
    });
    expect([over.status, over.json.code]).toEqual([413, 'body-too-large']);
    expect(await r.snapshot()).toEqual(before);
    const redriven = await r.call('POST', '/v1/redrives', {
      key: KEYS.admin,
      body: {
        reason: 'the upstream is back',
        operations: [...operations, { tenant: 'south', id: 'nowhere' }],
      },
    });
    expect([redriven.status, redriven.json.results]).toEqual([
      200,
      [
        { tenant: 'north', id: 'N1', ok: true, state: 'queued' },
        { tenant: 'south', id: 'S1', ok: true, state: 'queued' },
        { tenant: 'north', id: 'N2', ok: true, state: 'queued' },
        {
          tenant: 'south',
          id: 'nowhere',
          ok: false,
          code: 'operation-not-found',
          detail: expect.stringContaining('nowhere'),
        },
      ],
    ]);
    // Sent again: nothing is dead any more, and nothing changes.
    const again = await r.call('POST', '/v1/redrives', {
      key: KEYS.admin,
      body: { reason: 'the upstream is back', operations },
    });
    expect(again.json.results.map((x: { ok: boolean; code?: string }) => [x.ok, x.code])).toEqual([
      [false, 'operation-state-invalid'],
      [false, 'operation-state-invalid'],
      [false, 'operation-state-invalid'],
    ]);
    const s1 = await r.call('GET', '/v1/operations/S1?include=events', { key: KEYS.south });
    expect([s1.json.state, s1.json.events]).toMatchObject([
      'queued',
      [{ action: 'redrive', by: 'operator', reason: 'the upstream is back' }],
    ]);
    expect((await r.call('GET', '/v1/operations?state=dead', { key: KEYS.admin })).json.operations).toEqual(
      [],
    );
  });

  it('keys and bodies never reach the log; each request is one line with tenant and operation', async () => {
    r = await rig();
    const secretInput = { text: 'SECRET-BODY-MARKER' };
    await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'log-1' },
      body: { kind: 'note', input: secretInput },
    });
    await r.call('POST', '/v1/operations', {
      key: 'SECRET-WRONG-KEY',
      headers: { 'idempotency-key': 'log-2' },
      body: { kind: 'note', input: secretInput },
    });
    await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'log-3', 'content-type': 'application/json' },
      raw: '{"kind":"note","input":{"text":"SECRET-BODY-MARKER"',
    });
    await r.call('GET', '/v1/operations/log-1', { key: KEYS.south });
    // Ids the API refuses are not copied into the log: a tab in the key, a newline in the path.
    await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'log\tfive' },
      body: { kind: 'note', input: {} },
    });
    await r.call('GET', '/v1/operations/log%0Asix');
    // An admin key's `?tenant=` is logged only as the API would accept it: not with a newline.
    await r.call('GET', '/v1/operations?tenant=north', { key: KEYS.admin });
    await r.call('GET', '/v1/operations?tenant=seven%0Aforged-line', { key: KEYS.admin });
    const all = r.logs.join('');
    for (const secret of [KEYS.north, KEYS.south, KEYS.admin, 'SECRET-WRONG-KEY', 'SECRET-BODY-MARKER']) {
      expect(all).not.toContain(secret);
    }
    const lines = r.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'request');
    expect(
      lines.map((l) => [l.method, l.route, l.status, l.tenant ?? null, l.operation, l.problem ?? null]),
    ).toEqual([
      ['POST', '/v1/operations', 202, 'north', 'log-1', null],
      ['POST', '/v1/operations', 401, null, 'log-2', 'unauthorized'],
      ['POST', '/v1/operations', 400, 'north', 'log-3', 'body-malformed'],
      ['GET', '/v1/operations/:id', 404, 'south', 'log-1', 'operation-not-found'],
      ['POST', '/v1/operations', 400, 'north', undefined, 'idempotency-key-invalid'],
      ['GET', '/v1/operations/:id', 400, 'north', undefined, 'invalid-argument'],
      ['GET', '/v1/operations', 200, 'north', undefined, null],
      ['GET', '/v1/operations', 400, null, undefined, 'invalid-argument'],
    ]);
    expect(all).not.toContain('five');
    expect(all).not.toContain('six');
    expect(all).not.toContain('forged-line');
  });

  it('key configuration is checked at build: duplicates, bad hashes, bad tenants refused', () => {
    expect(() => new KeyRing({ tenants: { a: ['k1'], b: ['k1'] }, admin: [] })).toThrow(/twice/);
    expect(() => new KeyRing({ tenants: { a: ['sha256:abc'] }, admin: [] })).toThrow(/64 hex/);
    expect(() => new KeyRing({ tenants: { 'bad tenant': ['k'] }, admin: [] })).toThrow(/tenant/);
    expect(() => new KeyRing({ tenants: {}, admin: [''] })).toThrow(/non-empty/);
    expect(() => new KeyRing({ tenants: { a: ['has space'] }, admin: [] })).toThrow(/visible ASCII/);
    const ring = new KeyRing({ tenants: { a: ['k1'] }, admin: ['k2'] });
    expect(ring.authenticate('Bearer k1')).toEqual({ kind: 'tenant', tenant: 'a', id: 'tenant:a' });
    expect(ring.authenticate('Bearer k2')).toEqual({ kind: 'admin', id: 'admin#1' });
  });
});
