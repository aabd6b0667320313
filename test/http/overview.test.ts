/**
 * `GET /v1/me` and `GET /v1/queues`, the dashboard's reads beyond the operation routes, and the
 * dashboard's files: who may call each, what they answer against the store's own counters,
 * the queues' bound and order, and the headers the page is served with. In-process, on SQLite
 * (the counters they read are the stores' conformance cases).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { DASHBOARD_CSP } from '../../src/http/routes/dashboard.js';
import { QUEUES_SHOWN } from '../../src/http/routes/overview.js';
import { buildServer } from '../../src/http/server.js';
import { AUTH, KEYS, type Rig, rig } from './rig.js';

describe('GET /v1/me', () => {
  let r: Rig;
  afterEach(async () => r?.close());

  it("says what the key is: a tenant key's tenant, an admin key, none without a key", async () => {
    r = await rig();
    expect((await r.call('GET', '/v1/me')).json).toEqual({ role: 'tenant', tenant: 'north' });
    expect((await r.call('GET', '/v1/me', { key: KEYS.south })).json).toEqual({
      role: 'tenant',
      tenant: 'south',
    });
    expect((await r.call('GET', '/v1/me', { key: KEYS.admin })).json).toEqual({
      role: 'admin',
      tenant: null,
    });
    const none = await r.call('GET', '/v1/me', { key: null });
    expect([none.status, none.json.code]).toEqual([401, 'unauthorized']);
    const unknown = await r.call('GET', '/v1/me', { key: 'nobody-key' });
    expect(unknown.status).toBe(401);
    // A tenant key naming a tenant is refused here as everywhere: the route takes no query.
    const named = await r.call('GET', '/v1/me?tenant=south');
    expect([named.status, named.json.code]).toEqual([400, 'invalid-argument']);
  });
});

describe('GET /v1/queues', () => {
  let r: Rig;
  afterEach(async () => r?.close());

  it("answers the store's counters, every class, the busiest pairs first; admin keys only", async () => {
    r = await rig();
    const { sluice, store } = r.h;
    for (let i = 0; i < 3; i++)
      await sluice.submit({ tenant: 'north', id: `n${i}`, kind: 'note', input: { text: 'x' } });
    await sluice.submit({ tenant: 'south', id: 's0', kind: 'note', input: { text: 'x' } });
    await sluice.submit({
      tenant: 'south',
      id: 'c0',
      kind: 'charge',
      input: { invoice: 1, amount_cents: 5 },
    });
    // Two notes run, one of each tenant's (fair claims), claimed by a worker that is not there.
    const claimed = await store.operationClaimMany({
      class: 'bulk',
      owner: 'test/1',
      limit: 2,
      leaseMs: 60_000,
    });
    expect(claimed.rows.map((o) => o.tenant)).toEqual(['north', 'south']);

    const tenantKey = await r.call('GET', '/v1/queues');
    expect([tenantKey.status, tenantKey.json.code]).toEqual([403, 'forbidden']);
    const answer = await r.call('GET', '/v1/queues', { key: KEYS.admin });
    expect(answer.status).toBe(200);
    expect(answer.json).toEqual({
      classes: [
        { class: 'bulk', waiting: 2, running: 2 },
        { class: 'default', waiting: 1, running: 0 },
      ],
      queues: [
        { class: 'bulk', tenant: 'north', waiting: 2, running: 1 },
        { class: 'default', tenant: 'south', waiting: 1, running: 0 },
        { class: 'bulk', tenant: 'south', waiting: 0, running: 1 },
      ],
      queuesLeftOut: 0,
      awaitingOperator: { dead: 0, needsReconciliation: 0 },
    });
    // The same counters the store keeps, class by class.
    const stats = await store.queueStats({ holdingWork: true });
    const classes = await store.classStats();
    for (const c of answer.json.classes) {
      expect(c.waiting).toBe(classes.find((x) => x.class === c.class)?.waiting);
      expect(c.running).toBe(stats.filter((s) => s.class === c.class).reduce((n, s) => n + s.running, 0));
    }
    const query = await r.call('GET', '/v1/queues?tenant=north', { key: KEYS.admin });
    expect([query.status, query.json.code]).toEqual([400, 'invalid-argument']);
  });

  it(`lists at most ${QUEUES_SHOWN} pairs, the most waiting first, and counts those left out`, async () => {
    r = await rig();
    const { sluice } = r.h;
    // QUEUES_SHOWN + 1 tenants with one note waiting each, and one tenant with three.
    await sluice.submitMany(
      Array.from({ length: QUEUES_SHOWN + 1 }, (_, i) => ({
        tenant: `t${String(i).padStart(4, '0')}`,
        id: 'a',
        kind: 'note',
        input: { text: 'x' },
      })),
    );
    for (const id of ['a', 'b', 'c'])
      await sluice.submit({ tenant: 'zz', id, kind: 'note', input: { text: 'x' } });
    const { json } = await r.call('GET', '/v1/queues', { key: KEYS.admin });
    expect(json.queues).toHaveLength(QUEUES_SHOWN);
    expect(json.queuesLeftOut).toBe(2);
    expect(json.queues[0]).toEqual({ class: 'bulk', tenant: 'zz', waiting: 3, running: 0 });
    // Ties keep the store's order, by tenant: the last of them are the ones left out.
    expect(json.queues.at(-1).tenant).toBe(`t${String(QUEUES_SHOWN - 2).padStart(4, '0')}`);
    expect(json.classes).toEqual([{ class: 'bulk', waiting: QUEUES_SHOWN + 4, running: 0 }]);
  });
});

describe('the dashboard files', () => {
  let r: Rig;
  afterEach(async () => r?.close());

  it('are served without a key, with a policy that runs only their own script, and never framed', async () => {
    r = await rig();
    for (const [path, type] of [
      ['/dashboard', 'text/html; charset=utf-8'],
      ['/dashboard/app.js', 'text/javascript; charset=utf-8'],
      ['/dashboard/api.js', 'text/javascript; charset=utf-8'],
      ['/dashboard/dom.js', 'text/javascript; charset=utf-8'],
      ['/dashboard/views.js', 'text/javascript; charset=utf-8'],
      ['/dashboard/app.css', 'text/css; charset=utf-8'],
      ['/dashboard/icon.svg', 'image/svg+xml'],
    ] as const) {
      const res = await r.call('GET', path, { key: null });
      expect([path, res.status, res.headers.get('content-type')]).toEqual([path, 200, type]);
      expect(res.headers.get('content-security-policy')).toBe(DASHBOARD_CSP);
      expect(res.headers.get('x-frame-options')).toBe('DENY');
      expect(res.headers.get('referrer-policy')).toBe('no-referrer');
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.text.length).toBeGreaterThan(100);
    }
    expect(DASHBOARD_CSP).toContain("script-src 'self'");
    expect(DASHBOARD_CSP).toContain("frame-ancestors 'none'");
    expect(DASHBOARD_CSP).not.toContain('unsafe');
    // The page loads nothing from elsewhere and has no inline script for the policy to refuse.
    const page = (await r.call('GET', '/dashboard', { key: null })).text;
    expect(page).not.toMatch(/<script(?![^>]*\ssrc="\/dashboard\/app\.js")/);
    expect(page).not.toMatch(/(src|href)="(https?:)?\/\//);
    const wrong = await r.call('POST', '/dashboard', { key: null });
    expect(wrong.status).toBe(405);
  });

  it('are not served with `dashboard: false`, nor by a server without the API; a non-boolean is refused', async () => {
    r = await rig({ server: { dashboard: false } });
    expect((await r.call('GET', '/dashboard', { key: null })).status).toBe(404);
    expect((await r.call('GET', '/v1/me')).status).toBe(200);
    const metricsOnly = await buildServer({ sluice: r.h.sluice, auth: AUTH, api: false });
    try {
      const res = await metricsOnly.inject({ method: 'GET', url: '/dashboard' });
      expect(res.statusCode).toBe(404);
    } finally {
      await metricsOnly.close();
    }
    await expect(
      buildServer({ sluice: r.h.sluice, auth: AUTH, dashboard: 'no' as unknown as boolean }),
    ).rejects.toMatchObject({ code: 'invalid-argument' });
  });
});
