/**
 * POST /v1/operations end to end, over a real loopback server and `fetch`: every status code
 * of the submit contract, at both edges of every limit, each refusal leaving the store exactly
 * as it was; 50 concurrent identical POSTs; and the seed's O7 story through the API.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors/index.js';
import { type Store, sqliteStore } from '../../src/index.js';
import { O7 } from '../helpers/charge-kind.js';
import {
  type Answer,
  BODY_LIMIT,
  bodyOfLength,
  KEYS,
  NOTE_MAX_INPUT,
  noteInputOfLength,
  type Rig,
  rig,
} from './rig.js';

const PROBLEM = /^application\/problem\+json/;

function submit(
  r: Rig,
  key: string | undefined,
  body: unknown,
  extra: { headers?: Record<string, string> } = {},
) {
  return r.call('POST', '/v1/operations', {
    headers: { ...(key === undefined ? {} : { 'idempotency-key': key }), ...extra.headers },
    body,
  });
}

/** Asserts a problem answer and that the store did not change. */
async function refused(
  r: Rig,
  attempt: () => Promise<Pick<Answer, 'status' | 'headers' | 'json'>>,
  status: number,
  code: string,
) {
  const before = await r.snapshot();
  const res = await attempt();
  expect([res.status, res.json?.code]).toEqual([status, code]);
  expect(res.headers.get('content-type')).toMatch(PROBLEM);
  expect(res.json.type).toBe(`https://sluice.dev/problems/${code}`);
  expect(await r.snapshot()).toEqual(before);
  return res;
}

describe('POST /v1/operations over loopback', () => {
  let r: Rig;
  afterEach(async () => r?.close());

  it('202 + Location once durable; the same key and input → 200 replay; other input → 422', async () => {
    r = await rig();
    const first = await submit(r, 'O7', { kind: 'charge', input: O7 });
    expect(first.status).toBe(202);
    expect(first.headers.get('location')).toBe('/v1/operations/O7');
    expect(first.headers.get('idempotent-replayed')).toBeNull();
    expect(first.json).toMatchObject({ tenant: 'north', id: 'O7', kind: 'charge', state: 'queued' });

    // Durable: a second connection to the same file sees it (the 202 came after the commit).
    const other = sqliteStore({ path: r.h.dbPath });
    try {
      expect((await other.operationGet({ tenant: 'north', id: 'O7' }))?.digest).toBe(first.json.digest);
    } finally {
      await other.close();
    }

    // Key order and number spelling do not matter: the digest is over canonical JSON.
    const replay = await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'O7', 'content-type': 'application/json' },
      raw: '{"input":{"amount_cents":5.0e3,"invoice":7},"kind":"charge"}',
    });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('location')).toBe('/v1/operations/O7');
    expect(replay.json).toEqual(first.json);

    await refused(
      r,
      () => submit(r, 'O7', { kind: 'charge', input: { ...O7, amount_cents: 6000 } }),
      422,
      'idempotency-key-reused',
    );
    // Another tenant's O7 is another operation.
    const south = await r.call('POST', '/v1/operations', {
      key: KEYS.south,
      headers: { 'idempotency-key': 'O7' },
      body: { kind: 'charge', input: { ...O7, amount_cents: 6000 } },
    });
    expect([south.status, south.json.tenant]).toEqual([202, 'south']);
    expect(await r.h.store.operationList({ limit: 10 })).toHaveLength(2);
  });

  it('50 concurrent identical POSTs: exactly one 202 and 49 replays, one operation', async () => {
    r = await rig();
    await r.listen();
    const answers = await Promise.all(
      Array.from({ length: 50 }, () => submit(r, 'O7', { kind: 'charge', input: O7 })),
    );
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses.filter((s) => s === 202)).toHaveLength(1);
    expect(statuses.filter((s) => s === 200)).toHaveLength(49);
    expect(answers.filter((a) => a.headers.get('idempotent-replayed') === 'true')).toHaveLength(49);
    expect(new Set(answers.map((a) => a.json.digest)).size).toBe(1);
    expect(await r.h.store.operationList({ limit: 100 })).toHaveLength(1);
    expect(await r.h.store.queueStats()).toEqual([
      { class: 'default', tenant: 'north', waiting: 1, running: 0 },
    ]);
  });

  it('50 concurrent POSTs under one key with two inputs: one operation; the rest replay it or get 422', async () => {
    r = await rig();
    await r.listen();
    const answers = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        submit(r, 'race', { kind: 'charge', input: { invoice: 1, amount_cents: i % 2 === 0 ? 100 : 200 } }),
      ),
    );
    const created = answers.filter((a) => a.status === 202);
    expect(created).toHaveLength(1);
    const winner = created[0]!.json.input.amount_cents;
    for (const [i, a] of answers.entries()) {
      if (a.status === 202) continue;
      const same = (i % 2 === 0 ? 100 : 200) === winner;
      expect([a.status, a.json.code ?? null]).toEqual(same ? [200, null] : [422, 'idempotency-key-reused']);
    }
    expect(await r.h.store.operationList({ limit: 100 })).toHaveLength(1);
  });

  it('Idempotency-Key: 255 characters accepted, 256 refused; missing, empty, spaced, non-ASCII refused', async () => {
    r = await rig();
    const body = { kind: 'note', input: { text: 'hi' } };
    const k255 = 'k'.repeat(255);
    const ok = await submit(r, k255, body);
    expect(ok.status).toBe(202);
    expect(ok.json.id).toBe(k255);
    await refused(r, () => submit(r, 'k'.repeat(256), body), 400, 'idempotency-key-invalid');
    await refused(r, () => submit(r, undefined, body), 400, 'idempotency-key-missing');
    await refused(r, () => submit(r, '', body), 400, 'idempotency-key-invalid');
    await refused(r, () => submit(r, 'two words', body), 400, 'idempotency-key-invalid');
    await refused(r, () => submit(r, 'caf\u00e9', body), 400, 'idempotency-key-invalid');
    // Every visible ASCII character is allowed; Location percent-encodes and GET finds it.
    const odd = 'a/b?c#d%e&f"g';
    const created = await submit(r, odd, body);
    expect(created.status).toBe(202);
    const location = created.headers.get('location')!;
    expect(location).toBe(`/v1/operations/${encodeURIComponent(odd)}`);
    const got = await r.call('GET', location);
    expect([got.status, got.json.id]).toEqual([200, odd]);
  });

  it('Idempotency-Key as the IETF draft sends it, a quoted string, names the same operation as bare', async () => {
    r = await rig();
    const body = { kind: 'note', input: { text: 'hi' } };
    const quoted = await submit(r, '"order-7"', body);
    expect([quoted.status, quoted.json.id, quoted.headers.get('location')]).toEqual([
      202,
      'order-7',
      '/v1/operations/order-7',
    ]);
    // Bare, the same key: a replay of the same operation.
    const bare = await submit(r, 'order-7', body);
    expect([bare.status, bare.json.id, bare.headers.get('idempotent-replayed')]).toEqual([
      200,
      'order-7',
      'true',
    ]);
    // Escapes are read: \" and \\ stand for a quote and a backslash.
    const escaped = await submit(r, '"a\\"b\\\\c"', body);
    expect([escaped.status, escaped.json.id]).toEqual([202, 'a"b\\c']);
    // The longest id, quoted: 257 characters of header.
    const long = await submit(r, `"${'q'.repeat(255)}"`, body);
    expect([long.status, long.json.id]).toEqual([202, 'q'.repeat(255)]);
    // A quoted string that is no id's: empty, a space inside, a bare quote inside, too long, a dot.
    for (const key of ['""', '"two words"', '"a"b"', `"${'q'.repeat(256)}"`, '"."', '".."'])
      await refused(r, () => submit(r, key, body), 400, 'idempotency-key-invalid');
    // A quote at one end only is part of a bare id.
    const half = await submit(r, '"half', body);
    expect([half.status, half.json.id]).toEqual([202, '"half']);
    expect((await r.h.store.operationList({ limit: 100 })).map((o) => o.id).sort()).toEqual(
      ['"half', 'a"b\\c', 'order-7', 'q'.repeat(255)].sort(),
    );
  });

  it('body limit: exactly the limit is read, one byte more is 413 before parsing, stored nothing', async () => {
    r = await rig();
    expect(r.app.initialConfig.bodyLimit).toBe(BODY_LIMIT);
    const atLimit = bodyOfLength({ kind: 'note', input: { text: 'at the limit' } }, BODY_LIMIT);
    const ok = await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'edge', 'content-type': 'application/json' },
      raw: atLimit,
    });
    expect(ok.status).toBe(202);
    const over = bodyOfLength({ kind: 'note', input: { text: 'over' } }, BODY_LIMIT + 1);
    const res = await refused(
      r,
      () =>
        r.call('POST', '/v1/operations', {
          headers: { 'idempotency-key': 'over', 'content-type': 'application/json' },
          raw: over,
        }),
      413,
      'body-too-large',
    );
    expect(res.status).toBe(413);
    // Not even valid JSON: the size alone decides, so the body was never parsed.
    await refused(
      r,
      () =>
        r.call('POST', '/v1/operations', {
          headers: { 'idempotency-key': 'over', 'content-type': 'application/json' },
          raw: `{${'x'.repeat(BODY_LIMIT)}`,
        }),
      413,
      'body-too-large',
    );
    // Announced as 10 MB but only a few bytes sent: the answer comes at once, from the header
    // alone — if the server waited to read the body, this would never resolve.
    await refused(
      r,
      async () => {
        const { port } = new URL(await r.listen());
        const raw = await new Promise<string>((resolve, reject) => {
          const socket = connect(Number(port), '127.0.0.1');
          let data = '';
          socket.on('data', (chunk) => {
            data += chunk;
            if (data.includes('\r\n\r\n') && data.endsWith('}')) socket.destroy();
          });
          socket.on('close', () => resolve(data));
          socket.on('error', (error) => (data ? resolve(data) : reject(error)));
          socket.write(
            `POST /v1/operations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEYS.north}\r\n` +
              'Idempotency-Key: huge\r\nContent-Type: application/json\r\nContent-Length: 10000000\r\n\r\n{"kind":',
          );
        });
        const [head, body] = raw.split('\r\n\r\n');
        return {
          status: Number(head!.split(' ')[1]),
          headers: new Headers({ 'content-type': /content-type: ([^\r]+)/i.exec(head!)![1]! }),
          json: JSON.parse(body!),
        };
      },
      413,
      'body-too-large',
    );
    // Chunked (no Content-Length): counted as it arrives.
    const chunked = new ReadableStream({
      start(controller) {
        controller.enqueue(new TextEncoder().encode(over));
        controller.close();
      },
    });
    await refused(
      r,
      async () => {
        const url = `${await r.listen()}/v1/operations`;
        const res = await fetch(url, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${KEYS.north}`,
            'idempotency-key': 'chunked',
            'content-type': 'application/json',
          },
          body: chunked,
          duplex: 'half',
        } as RequestInit);
        return { status: res.status, headers: res.headers, json: await res.json() };
      },
      413,
      'body-too-large',
    );
  });

  it("the kind's input limit: exactly maxInputBytes accepted, one more is 413 input-too-large", async () => {
    r = await rig();
    const ok = await submit(r, 'n1', { kind: 'note', input: noteInputOfLength(NOTE_MAX_INPUT) });
    expect(ok.status).toBe(202);
    const res = await refused(
      r,
      () => submit(r, 'n2', { kind: 'note', input: noteInputOfLength(NOTE_MAX_INPUT + 1) }),
      413,
      'input-too-large',
    );
    expect(res.json).toMatchObject({ limitBytes: NOTE_MAX_INPUT, actualBytes: NOTE_MAX_INPUT + 1 });
  });

  it('422: schema violations with their paths, an unknown kind, a bad envelope', async () => {
    r = await rig();
    const invalid = await refused(
      r,
      () => submit(r, 'bad', { kind: 'charge', input: { invoice: -1, amount_cents: 'lots' } }),
      422,
      'input-invalid',
    );
    expect(invalid.json.errors.map((e: { pointer: string }) => e.pointer).sort()).toEqual([
      '#/input/amount_cents',
      '#/input/invoice',
    ]);
    await refused(r, () => submit(r, 'bad', { kind: 'refund-everything', input: {} }), 422, 'kind-unknown');
    const missing = await refused(r, () => submit(r, 'bad', { kind: 'charge' }), 422, 'request-invalid');
    expect(missing.json.errors).toEqual([
      { pointer: '#/input', detail: "must have required property 'input'" },
    ]);
    // The tenant comes from the key: a body naming one is refused, not trimmed.
    const tenant = await refused(
      r,
      () => submit(r, 'bad', { kind: 'charge', input: O7, tenant: 'south' }),
      422,
      'request-invalid',
    );
    expect(tenant.json.errors[0].pointer).toBe('#/tenant');
    // deadlineMs: 1 is the smallest; 0 is refused.
    await refused(
      r,
      () => submit(r, 'bad', { kind: 'charge', input: O7, deadlineMs: 0 }),
      422,
      'request-invalid',
    );
    expect((await submit(r, 'short', { kind: 'charge', input: O7, deadlineMs: 1 })).status).toBe(202);
  });

  it('429 + Retry-After when the tenant is over capacity; duplicates still replay; others unaffected', async () => {
    r = await rig({ sluice: { tenants: { north: { default: { maxWaiting: 2 } } } } });
    expect((await submit(r, 'a', { kind: 'charge', input: { invoice: 1, amount_cents: 1 } })).status).toBe(
      202,
    );
    expect((await submit(r, 'b', { kind: 'charge', input: { invoice: 2, amount_cents: 1 } })).status).toBe(
      202,
    );
    const full = await refused(
      r,
      () => submit(r, 'c', { kind: 'charge', input: { invoice: 3, amount_cents: 1 } }),
      429,
      'tenant-queue-full',
    );
    const retryAfter = full.headers.get('retry-after');
    expect(retryAfter).toMatch(/^[1-9]\d*$/);
    // A client retry of an accepted operation is answered from its record, full or not.
    const dup = await submit(r, 'a', { kind: 'charge', input: { invoice: 1, amount_cents: 1 } });
    expect([dup.status, dup.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
    // South has its own cap.
    const south = await r.call('POST', '/v1/operations', {
      key: KEYS.south,
      headers: { 'idempotency-key': 'c' },
      body: { kind: 'charge', input: { invoice: 3, amount_cents: 1 } },
    });
    expect(south.status).toBe(202);
  });

  it('503 + Retry-After when the class queue is full', async () => {
    r = await rig({ sluice: { classes: { bulk: { maxQueued: 2 } } } });
    for (const id of ['a', 'b'])
      expect((await submit(r, id, { kind: 'note', input: { text: id } })).status).toBe(202);
    const res = await refused(
      r,
      () => submit(r, 'c', { kind: 'note', input: { text: 'c' } }),
      503,
      'class-queue-full',
    );
    expect(res.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
    // Another class is not affected.
    expect((await submit(r, 'd', { kind: 'charge', input: O7 })).status).toBe(202);
  });

  it('503 + Retry-After when the store is unavailable; /readyz says not ready', async () => {
    const failing = { on: false };
    const dir = mkdtempSync(join(tmpdir(), 'sluice-http-'));
    const inner = sqliteStore({ path: join(dir, 'sluice.db') });
    const store = new Proxy(inner, {
      get(target, prop, receiver) {
        const value = Reflect.get(target, prop, receiver);
        if (typeof value !== 'function') return value;
        return (...args: unknown[]) => {
          if (failing.on && prop !== 'close' && prop !== 'migrate') {
            return Promise.reject(new StoreError('unavailable', 'connection refused'));
          }
          return value.apply(target, args);
        };
      },
    }) as Store;
    r = await rig({ store });
    try {
      expect((await r.call('GET', '/readyz', { key: null })).status).toBe(200);
      failing.on = true;
      const res = await submit(r, 'x', { kind: 'charge', input: O7 });
      expect([res.status, res.json.code]).toEqual([503, 'store-unavailable']);
      expect(res.headers.get('retry-after')).toMatch(/^[1-9]\d*$/);
      expect(res.json.detail).not.toContain('connection refused'); // the cause is logged, not sent
      const ready = await r.call('GET', '/readyz', { key: null });
      expect([ready.status, ready.json.code]).toEqual([503, 'not-ready']);
      failing.on = false;
      expect(await r.h.store.operationList({ limit: 10 })).toEqual([]);
      expect((await submit(r, 'x', { kind: 'charge', input: O7 })).status).toBe(202);
    } finally {
      failing.on = false;
      await r.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('503 + Retry-After while shutting down; reads still answer', async () => {
    let accepting = true;
    r = await rig({ server: { accepting: () => accepting } });
    expect((await submit(r, 'before', { kind: 'charge', input: O7 })).status).toBe(202);
    accepting = false;
    const res = await refused(
      r,
      () => submit(r, 'after', { kind: 'charge', input: O7 }),
      503,
      'shutting-down',
    );
    expect(res.headers.get('retry-after')).toBe('1');
    expect((await r.call('GET', '/readyz', { key: null })).status).toBe(503);
    expect((await r.call('GET', '/healthz', { key: null })).status).toBe(200);
    expect((await r.call('GET', '/v1/operations/before')).status).toBe(200);
  });

  it('401 before anything else: no key, an unknown key', async () => {
    r = await rig();
    const body = { kind: 'charge', input: O7 };
    const none = await refused(
      r,
      () => r.call('POST', '/v1/operations', { key: null, headers: { 'idempotency-key': 'x' }, body }),
      401,
      'unauthorized',
    );
    expect(none.headers.get('www-authenticate')).toMatch(/^Bearer/);
    await refused(
      r,
      () => r.call('POST', '/v1/operations', { key: 'not-a-key', headers: { 'idempotency-key': 'x' }, body }),
      401,
      'unauthorized',
    );
    // The key is checked before anything about the request: no key and no Idempotency-Key → 401.
    await refused(r, () => r.call('POST', '/v1/operations', { key: null, body }), 401, 'unauthorized');
    // An admin key acts for no tenant: it may not submit.
    await refused(
      r,
      () => r.call('POST', '/v1/operations', { key: KEYS.admin, headers: { 'idempotency-key': 'x' }, body }),
      403,
      'forbidden',
    );
  });

  it('the O7 story: submit, duplicate, conflicting submit, poll to succeeded, one charge', async () => {
    r = await rig();
    const charge = { kind: 'charge', input: O7 };
    const accepted = await submit(r, 'O7', charge);
    expect(accepted.status).toBe(202);
    const duplicate = await submit(r, 'O7', charge);
    expect([duplicate.status, duplicate.headers.get('idempotent-replayed')]).toEqual([200, 'true']);
    const conflict = await submit(r, 'O7', { kind: 'charge', input: { ...O7, amount_cents: 9999 } });
    expect([conflict.status, conflict.json.code]).toEqual([422, 'idempotency-key-reused']);

    r.h.worker().start();
    await r.h.sluice.wait({ tenant: 'north', id: 'O7' });
    const done = await r.call('GET', `${accepted.headers.get('location')}?include=attempts,effects`);
    expect(done.status).toBe(200);
    expect(done.json).toMatchObject({ state: 'succeeded', result: { charge: 'ch_1' }, attempt: 1 });
    expect(done.json.effects).toHaveLength(1);
    expect(done.json.effects[0]).toMatchObject({ name: 'charge', state: 'committed', reference: 'ch_1' });

    // A late client retry gets the finished operation, and nothing runs again.
    const late = await submit(r, 'O7', charge);
    expect([late.status, late.json.state]).toEqual([200, 'succeeded']);
    expect(r.provider.ledger()).toHaveLength(1);
    expect(r.provider.chargesFor(done.json.effects[0].key)).toHaveLength(1);
    expect(r.provider.doubleCharges()).toEqual([]);
  });
});
