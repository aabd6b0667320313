/**
 * What a tenant key reads of errors nobody wrote for it, and of who acted: an unclassified
 * handler error (a real `ENOENT` naming a private path) and a store error's database text are
 * replaced by a fixed message wherever they appear — the operation's error, an
 * `attempts-exhausted` message and its `details.lastError`, each attempt, an event's
 * `previousError`, the listing — and an operator's `by` reads `operator`. An error raised with a
 * code of the handler's own stays as it was; an admin key reads everything. In-process.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Permanent, StoreError } from '../../src/core/errors/index.js';
import { errorFor, OPERATOR, STORE_MESSAGE, UNCLASSIFIED_MESSAGE } from '../../src/http/tenant-view.js';
import { KEYS, type Rig, rig } from './rig.js';

const RELATION = 'relation "billing_internal.ledger_v2" does not exist';
const OPERATOR_EMAIL = 'ops@example.com';

async function get(r: Rig, url: string, key: string = KEYS.north) {
  const res = await r.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${key}` } });
  expect([url, res.statusCode]).toEqual([url, 200]);
  return { text: res.body, json: JSON.parse(res.body) };
}

describe('the tenant view of errors and operators', () => {
  let r: Rig;
  afterEach(async () => r?.close());

  it("hides unclassified and store errors' text and operators' names from tenant keys only", async () => {
    let exports = '';
    r = await rig({
      sluice: { retryBudget: false },
      define(sluice) {
        sluice.define('readfile', {
          input: z.object({ name: z.string() }),
          limits: { maxAttempts: 2, backoff: { baseMs: 1, capMs: 1 } },
          // What handler code does: read a file named after the input; it is not there.
          run: async (input) => ({ bytes: (await readFile(join(exports, `${input.name}.csv`))).length }),
        });
        sluice.define('ledger', {
          input: z.object({}),
          limits: { maxAttempts: 1 },
          run: async () => {
            throw new StoreError('unknown', RELATION);
          },
        });
        sluice.define('pay', {
          input: z.object({}),
          run: async () => {
            throw new Permanent('the issuer declined card 4242', { code: 'card-declined' });
          },
        });
      },
    });
    exports = join(r.h.dir, 'private-payments', 'customer-exports');
    const { sluice } = r.h;
    r.h.worker().start();
    const north = (id: string) => ({ tenant: 'north', id });
    await sluice.submit({ ...north('rf'), kind: 'readfile', input: { name: 'march' } });
    await sluice.submit({ ...north('lg'), kind: 'ledger', input: {} });
    await sluice.submit({ ...north('pay'), kind: 'pay', input: {} });
    // Two that wait, cancelled by the tenant's key and by an admin key.
    for (const id of ['mine', 'theirs'])
      await sluice.submit({ ...north(id), kind: 'pay', input: {}, delayMs: 600_000 });
    for (const id of ['rf', 'lg', 'pay']) await sluice.wait(north(id), { timeoutMs: 20_000 });
    // An operator redrives the dead one, which fails again: its redrive keeps the error before it.
    const redriven = await r.app.inject({
      method: 'POST',
      url: '/v1/operations/rf/redrive?tenant=north',
      headers: { authorization: `Bearer ${KEYS.admin}` },
      payload: { by: OPERATOR_EMAIL, reason: 'the export folder is back' },
    });
    expect(redriven.statusCode).toBe(200);
    expect((await sluice.wait(north('rf'), { timeoutMs: 20_000 })).state).toBe('dead');
    const cancel = (id: string, key: string, query = '') =>
      r.app.inject({
        method: 'POST',
        url: `/v1/operations/${id}/cancel${query}`,
        headers: { authorization: `Bearer ${key}` },
      });
    expect((await cancel('mine', KEYS.north)).statusCode).toBe(200);
    expect((await cancel('theirs', KEYS.admin, '?tenant=north')).statusCode).toBe(200);

    const everything = '?include=attempts,effects,events';
    for (const query of ['', '?include=attempts', '?include=effects', '?include=events', everything]) {
      const { text } = await get(r, `/v1/operations/rf${query}`);
      for (const secret of [exports, 'ENOENT', OPERATOR_EMAIL]) expect(text, query).not.toContain(secret);
    }
    const tenant = await get(r, `/v1/operations/rf${everything}`);
    const hidden = { code: 'unclassified-error', message: UNCLASSIFIED_MESSAGE, outcome: 'retryable' };
    const exhausted = {
      code: 'attempts-exhausted',
      message: `all 2 attempts failed; last: ${UNCLASSIFIED_MESSAGE}`,
      outcome: 'retryable',
      details: { lastError: hidden },
    };
    expect(tenant.json.error).toEqual(exhausted);
    // Two runs of two attempts: the last of each ended the operation.
    expect(tenant.json.attempts.map((a: { error: unknown }) => a.error)).toEqual([
      hidden,
      exhausted,
      hidden,
      exhausted,
    ]);
    expect(tenant.json.events).toEqual([
      expect.objectContaining({
        action: 'redrive',
        by: OPERATOR,
        reason: 'the export folder is back',
        detail: { previousError: exhausted },
      }),
    ]);
    // The same operation in a listing, and the database's text of a store error.
    const listed = await get(r, '/v1/operations');
    expect(listed.text).not.toContain(exports);
    expect(listed.text).not.toContain('billing_internal');
    const byId = (id: string) => listed.json.operations.find((o: { id: string }) => o.id === id);
    expect(byId('rf').error).toEqual(exhausted);
    expect(byId('lg').error).toMatchObject({
      message: `all 1 attempts failed; last: ${STORE_MESSAGE}`,
      details: { lastError: { code: 'store-unknown', message: STORE_MESSAGE } },
    });
    // Raised with a code of the handler's own: meant for the client, shown as it is.
    expect(byId('pay').error).toMatchObject({
      code: 'card-declined',
      message: 'the issuer declined card 4242',
    });
    const bys = async (id: string) =>
      (await get(r, `/v1/operations/${id}?include=events`)).json.events.map((e: { by: string }) => e.by);
    expect([await bys('mine'), await bys('theirs')]).toEqual([['tenant:north'], [OPERATOR]]);

    // An admin key reads all of it.
    const admin = await get(r, `/v1/operations/rf${everything}&tenant=north`, KEYS.admin);
    expect(admin.json.error.message).toContain(join(exports, 'march.csv'));
    expect(admin.json.error.details.lastError.message).toMatch(/^ENOENT: .*march\.csv/);
    expect(admin.json.attempts[0].error.message).toContain(exports);
    expect(admin.json.events[0]).toMatchObject({ by: OPERATOR_EMAIL });
    expect(admin.json.events[0].detail.previousError.details.lastError.message).toContain(exports);
    const adminLedger = await get(r, '/v1/operations/lg?tenant=north', KEYS.admin);
    expect(adminLedger.json.error.details.lastError.message).toBe(RELATION);
    const adminCancel = await get(r, '/v1/operations/theirs?include=events&tenant=north', KEYS.admin);
    expect(adminCancel.json.events[0].by).toBe('admin#1');
  });

  it("shows a handler's own code that begins store- as raised: only Sluice's store errors are hidden", () => {
    const own = {
      code: 'store-locator-down',
      message: 'the store locator in Lyon is down',
      details: { city: 'Lyon' },
    };
    expect(errorFor(own)).toEqual(own);
    expect(errorFor({ code: 'store-unavailable', message: 'connect ECONNREFUSED 10.0.0.7:5432' })).toEqual({
      code: 'store-unavailable',
      message: STORE_MESSAGE,
    });
  });
});
