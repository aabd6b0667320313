/**
 * Text from a request that the store keeps or compares as text, over loopback on both stores:
 * PostgreSQL's text cannot hold NUL (U+0000), so a NUL that reached it was a 500 `store-unknown`
 * there, logged as a bug, while SQLite took it. The API refuses such text at its edge, the same
 * way on both stores, and the engine refuses it for its other callers.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ambiguous, Retryable } from '../../src/core/errors/index.js';
import { usePostgres } from '../helpers/postgres.js';
import { KEYS, type Rig, rig } from './rig.js';

const pg = usePostgres();

describe.each(['sqlite', 'postgres'] as const)('text the store keeps, on %s', (dialect) => {
  let r: Rig | undefined;
  afterEach(async () => {
    await r?.close();
    r = undefined;
  });

  const open = async () =>
    rig({
      store: dialect === 'postgres' ? pg.store() : undefined,
      define(sluice) {
        sluice.define('flaky', {
          input: z.object({}),
          limits: { maxAttempts: 1 },
          run: async () => {
            throw new Retryable('the provider is down');
          },
        });
        sluice.define('uncertain', {
          input: z.object({}),
          run: (_input, ctx) =>
            ctx.effect('charge', {
              retentionMs: 1, // past the window at once: no blind resend
              call: async () => {
                throw new Ambiguous('timed out after sending');
              },
            }),
        });
      },
    });

  it('a list filtered by a kind no kind can be named: 400 naming `kind`, never a store error', async () => {
    r = await open();
    for (const kind of ['a%00b', 'Note', '%0a']) {
      const res = await r.call('GET', `/v1/operations?kind=${kind}`);
      expect([kind, res.status, res.json.code, res.json.errors?.[0]?.parameter]).toEqual([
        kind,
        400,
        'invalid-argument',
        'kind',
      ]);
    }
    expect((await r.call('GET', '/v1/operations?kind=note')).status).toBe(200);
    await expect(r.h.sluice.list({ tenant: 'north', kind: 'a\u0000b' })).rejects.toMatchObject({
      code: 'invalid-argument',
    });
    expect(r.logs.filter((line) => line.includes('"level":50'))).toEqual([]);
  });

  it("an operator's by, reason or reference holding NUL: 422 naming the field, the operation untouched", async () => {
    r = await open();
    r.h.worker().start();
    const submitted = await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'f1' },
      body: { kind: 'flaky', input: {} },
    });
    expect(submitted.status).toBe(202);
    expect((await r.h.sluice.wait({ tenant: 'north', id: 'f1' })).state).toBe('dead');
    const admin = { key: KEYS.admin };
    const refusals: Array<[string, unknown, string]> = [
      ['redrive', { reason: 'provider back\u0000' }, '#/reason'],
      ['redrive', { reason: 'provider back', by: 'ops\u0000' }, '#/by'],
      [
        'reconcile',
        {
          reason: 'seen at the provider',
          resolution: 'succeeded',
          effects: [{ name: 'charge', outcome: 'committed', reference: 'ch_\u00009' }],
        },
        '#/effects/0/reference',
      ],
    ];
    for (const [action, body, pointer] of refusals) {
      const res = await r.call('POST', `/v1/operations/f1/${action}?tenant=north`, { ...admin, body });
      expect([action, res.status, res.json.code, res.json.errors?.[0]?.pointer]).toEqual([
        action,
        422,
        'request-invalid',
        pointer,
      ]);
    }
    await expect(
      r.h.sluice.redrive({ tenant: 'north', id: 'f1' }, { by: 'ops', reason: 'back\u0000' }),
    ).rejects.toMatchObject({ code: 'invalid-argument' });
    const still = await r.call('GET', '/v1/operations/f1?include=events');
    expect([still.json.state, still.json.events]).toEqual(['dead', []]);
    const redriven = await r.call('POST', '/v1/operations/f1/redrive?tenant=north', {
      ...admin,
      body: { reason: 'provider back' },
    });
    expect([redriven.status, redriven.json.state]).toEqual([200, 'queued']);
    expect(r.logs.filter((line) => line.includes('"level":50'))).toEqual([]);
  });

  it('a lone surrogate or a blank where text is kept: 422, the same on both stores, nothing kept', async () => {
    r = await open();
    r.h.worker().start();
    for (const [id, kind] of [
      ['f2', 'flaky'],
      ['u2', 'uncertain'],
    ] as const) {
      const submitted = await r.call('POST', '/v1/operations', {
        headers: { 'idempotency-key': id },
        body: { kind, input: {} },
      });
      expect(submitted.status).toBe(202);
    }
    expect((await r.h.sluice.wait({ tenant: 'north', id: 'f2' })).state).toBe('dead');
    expect((await r.h.sluice.wait({ tenant: 'north', id: 'u2' })).state).toBe('needs_reconciliation');
    const admin = { key: KEYS.admin };
    const seen = { reason: 'seen at the provider', resolution: 'succeeded' };
    const refusals: Array<[string, string, unknown, string, string | undefined]> = [
      ['f2', 'redrive', { reason: 'provider back \ud800' }, 'request-invalid', '#/reason'],
      ['f2', 'redrive', { reason: 'provider back', by: '\udfff' }, 'request-invalid', '#/by'],
      ['f2', 'redrive', { reason: ' \t ' }, 'request-invalid', '#/reason'],
      [
        'u2',
        'reconcile',
        { ...seen, effects: [{ name: 'charge', outcome: 'committed', reference: 'ch_\ud8009' }] },
        'request-invalid',
        '#/effects/0/reference',
      ],
      // Handed back to a handler as the effect's result: plain JSON, as a provider's answer.
      [
        'u2',
        'reconcile',
        { ...seen, effects: [{ name: 'charge', outcome: 'committed', result: { id: 'ch_\udc00' } }] },
        'input-not-json',
        undefined,
      ],
    ];
    for (const [id, action, body, code, pointer] of refusals) {
      const res = await r.call('POST', `/v1/operations/${id}/${action}?tenant=north`, { ...admin, body });
      expect([action, res.status, res.json.code, res.json.errors?.[0]?.pointer]).toEqual([
        action,
        422,
        code,
        pointer,
      ]);
    }
    // A dead operation is not reconciled, whatever its body names: its state is what is wrong.
    const dead = await r.call('POST', '/v1/operations/f2/reconcile?tenant=north', {
      ...admin,
      body: { ...seen, effects: [{ name: 'no-such-effect', outcome: 'absent' }] },
    });
    expect([dead.status, dead.json.code]).toEqual([409, 'operation-state-invalid']);
    // A pair is one character, and welcome.
    const paired = await r.call('POST', '/v1/operations/f2/redrive?tenant=north', {
      ...admin,
      body: { reason: 'provider back \ud83d\ude80' },
    });
    expect([paired.status, paired.json.state]).toEqual([200, 'queued']);
    const events = await r.call('GET', '/v1/operations/f2?include=events');
    expect(events.json.events.map((e: { reason: string }) => e.reason)).toEqual(['provider back \u{1f680}']);
    // The engine refuses them for its other callers.
    await expect(
      r.h.sluice.reconcile(
        { tenant: 'north', id: 'u2' },
        { by: 'ops\ud800', reason: 'seen', resolution: 'failed' },
      ),
    ).rejects.toMatchObject({ code: 'invalid-argument' });
    expect((await r.h.sluice.get({ tenant: 'north', id: 'u2' }))?.state).toBe('needs_reconciliation');
    expect(r.logs.filter((line) => line.includes('"level":50'))).toEqual([]);
  });
});
