/**
 * A corpus of malformed requests sent over a real loopback connection. Each one gets its
 * documented status and problem type, and leaves the store exactly as it was (operations,
 * queue counters, class counters compared before and after). The edges of the parser's limits
 * (depth 64 vs 65, 2^53−1 vs 2^53) are checked on both sides.
 */
import { connect, Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MAX_INPUT_ISSUES } from '../../src/core/errors/index.js';
import { O7 } from '../helpers/charge-kind.js';
import { KEYS, type Rig, rig } from './rig.js';

interface Case {
  name: string;
  body?: string | Uint8Array;
  contentType?: string | null;
  headers?: Record<string, string>;
  status: number;
  code: string;
}

/** Writes `request` on a raw connection and resolves with everything read until it closes. */
function rawExchange(base: string, request: string): Promise<string> {
  const { port } = new URL(base);
  return new Promise<string>((resolve, reject) => {
    const socket = connect(Number(port), '127.0.0.1');
    let data = '';
    socket.on('data', (chunk) => {
      data += chunk;
    });
    socket.on('error', (error) => (data ? resolve(data) : reject(error)));
    socket.on('close', () => resolve(data));
    socket.write(request);
  });
}

const nested = (depth: number, inner = '0') => '['.repeat(depth) + inner + ']'.repeat(depth);
const envelope = (input: string, extra = '') => `{"kind":"charge","input":${input}${extra}}`;

const CORPUS: Case[] = [
  {
    name: 'truncated JSON',
    body: '{"kind":"charge","input":{"invoice":7,',
    status: 400,
    code: 'body-malformed',
  },
  { name: 'truncated string', body: '{"kind":"char', status: 400, code: 'body-malformed' },
  {
    name: 'trailing garbage',
    body: `${envelope('{"invoice":7,"amount_cents":1}')} x`,
    status: 400,
    code: 'body-malformed',
  },
  { name: 'single quotes', body: "{'kind':'charge'}", status: 400, code: 'body-malformed' },
  { name: 'empty JSON body', body: '', status: 400, code: 'body-malformed' },
  { name: 'whitespace only', body: '   \n ', status: 400, code: 'body-malformed' },
  {
    name: 'NaN literal',
    body: envelope('{"invoice":NaN,"amount_cents":1}'),
    status: 400,
    code: 'body-malformed',
  },
  {
    name: '__proto__ key',
    body: envelope('{"__proto__":{"admin":true},"invoice":7,"amount_cents":1}'),
    status: 400,
    code: 'body-malformed',
  },
  {
    name: '__proto__ key spelled with an escape',
    body: envelope('{"\\u005f_proto__":{"admin":true},"invoice":7,"amount_cents":1}'),
    status: 400,
    code: 'body-malformed',
  },
  // 10,000 levels take 20 KB: over this server's body limit, refused before the parser sees it.
  {
    name: '10,000 levels of nesting (20 KB)',
    body: envelope(nested(10_000)),
    status: 413,
    code: 'body-too-large',
  },
  {
    name: '3,000 levels of nesting (inside the body limit)',
    body: envelope(nested(3_000)),
    status: 400,
    code: 'body-too-deep',
  },
  { name: '65 levels (one over)', body: nested(65), status: 400, code: 'body-too-deep' },
  {
    name: 'a 400-digit integer',
    body: envelope(`{"invoice":7,"amount_cents":${'9'.repeat(400)}}`),
    status: 400,
    code: 'number-out-of-range',
  },
  {
    name: '1e400 (Infinity)',
    body: envelope('{"invoice":7,"amount_cents":1e400}'),
    status: 400,
    code: 'number-out-of-range',
  },
  {
    name: '-1e400',
    body: envelope('{"invoice":-1e400,"amount_cents":1}'),
    status: 400,
    code: 'number-out-of-range',
  },
  {
    name: '2^53 (one past safe)',
    body: envelope('{"invoice":7,"amount_cents":9007199254740992}'),
    status: 400,
    code: 'number-out-of-range',
  },
  { name: 'body is null', body: 'null', status: 422, code: 'request-invalid' },
  { name: 'body is an array', body: '[]', status: 422, code: 'request-invalid' },
  { name: 'body is a string', body: '"charge"', status: 422, code: 'request-invalid' },
  { name: 'no body at all', contentType: null, status: 400, code: 'body-malformed' },
  { name: 'kind is a number', body: '{"kind":42,"input":{}}', status: 422, code: 'request-invalid' },
  {
    name: 'deadlineMs as text (no coercion)',
    body: envelope('{"invoice":7,"amount_cents":1}', ',"deadlineMs":"100"'),
    status: 422,
    code: 'request-invalid',
  },
  {
    name: 'negative delayMs',
    body: envelope('{"invoice":7,"amount_cents":1}', ',"delayMs":-1'),
    status: 422,
    code: 'request-invalid',
  },
  {
    name: 'fractional deadlineMs',
    body: envelope('{"invoice":7,"amount_cents":1}', ',"deadlineMs":1.5'),
    status: 422,
    code: 'request-invalid',
  },
  {
    name: 'amount as text',
    body: envelope('{"invoice":7,"amount_cents":"5000"}'),
    status: 422,
    code: 'input-invalid',
  },
  { name: 'input is an array', body: envelope('[7,5000]'), status: 422, code: 'input-invalid' },
  {
    name: 'input nested 64 deep (at the limit: parsed, then the schema refuses)',
    body: envelope(nested(63)),
    status: 422,
    code: 'input-invalid',
  },
  {
    name: 'text/plain',
    body: envelope(JSON.stringify(O7)),
    contentType: 'text/plain',
    status: 415,
    code: 'unsupported-media-type',
  },
  {
    name: 'form-encoded',
    body: 'kind=charge&input=7',
    contentType: 'application/x-www-form-urlencoded',
    status: 415,
    code: 'unsupported-media-type',
  },
  {
    name: 'multipart',
    body: '--x\r\n\r\n--x--',
    contentType: 'multipart/form-data; boundary=x',
    status: 415,
    code: 'unsupported-media-type',
  },
  {
    name: 'XML',
    body: '<op kind="charge"/>',
    contentType: 'application/xml',
    status: 415,
    code: 'unsupported-media-type',
  },
  {
    name: 'bytes without a content type',
    body: new TextEncoder().encode(envelope(JSON.stringify(O7))),
    contentType: null,
    status: 415,
    code: 'unsupported-media-type',
  },
  {
    name: 'an Authorization that is not Bearer',
    body: envelope(JSON.stringify(O7)),
    headers: { authorization: `Basic ${Buffer.from(`north:${KEYS.north}`).toString('base64')}` },
    status: 401,
    code: 'unauthorized',
  },
  {
    name: 'a bearer token of 5,000 characters',
    body: envelope(JSON.stringify(O7)),
    headers: { authorization: `Bearer ${'k'.repeat(5000)}` },
    status: 401,
    code: 'unauthorized',
  },
  {
    name: 'an Idempotency-Key of 256 characters',
    body: envelope(JSON.stringify(O7)),
    headers: { 'idempotency-key': 'k'.repeat(256) },
    status: 400,
    code: 'idempotency-key-invalid',
  },
  {
    name: 'an Idempotency-Key with a control character',
    body: envelope(JSON.stringify(O7)),
    headers: { 'idempotency-key': 'a\tb' },
    status: 400,
    code: 'idempotency-key-invalid',
  },
  // A URL resolves these as path steps: no Location could name the operation.
  ...['.', '..'].map((key) => ({
    name: `the Idempotency-Key ${key}`,
    body: envelope(JSON.stringify(O7)),
    headers: { 'idempotency-key': key },
    status: 400,
    code: 'idempotency-key-invalid',
  })),
  {
    // 0xE9 is é in Latin-1 and not UTF-8: replaced by U+FFFD, two inputs would share a digest.
    name: 'bytes that are not UTF-8',
    body: Uint8Array.from([
      ...new TextEncoder().encode('{"kind":"charge","input":{"invoice":7,"amount_cents":1,"note":"Ren'),
      0xe9,
      ...new TextEncoder().encode('"}}'),
    ]),
    status: 400,
    code: 'body-malformed',
  },
  {
    name: 'a charset other than UTF-8',
    body: envelope(JSON.stringify(O7)),
    contentType: 'application/json; charset=iso-8859-1',
    status: 415,
    code: 'unsupported-media-type',
  },
  {
    name: 'a Content-Encoding the server does not decode (RFC 9110 §8.4.1)',
    body: envelope(JSON.stringify(O7)),
    headers: { 'content-encoding': 'gzip' },
    status: 415,
    code: 'unsupported-media-type',
  },
  {
    // JSON.parse keeps the last, other parsers the first: the body would not mean one thing.
    name: 'a key named twice in the envelope',
    body: '{"kind":"charge","kind":"export","input":{"invoice":7,"amount_cents":1}}',
    status: 400,
    code: 'body-malformed',
  },
  {
    name: 'a key named twice in the input, spelled once with an escape',
    body: envelope('{"invoice":7,"amount_cents":1,"\\u0069nvoice":8}'),
    status: 400,
    code: 'body-malformed',
  },
  {
    name: 'a lone surrogate in the input',
    body: envelope('{"invoice":7,"amount_cents":1,"note":"\\ud800"}'),
    status: 422,
    code: 'input-not-json',
  },
  {
    name: 'a lone surrogate as a key of the input',
    body: envelope('{"invoice":7,"amount_cents":1,"\\udc00":1}'),
    status: 422,
    code: 'input-not-json',
  },
];

describe('a malformed-input corpus over loopback: documented errors, store unchanged', () => {
  let r: Rig;
  let base: string;
  beforeAll(async () => {
    r = await rig();
    base = await r.listen();
    // Something already in the store, so "unchanged" is not "empty".
    const seeded = await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'seed' },
      body: { kind: 'charge', input: O7 },
    });
    expect(seeded.status).toBe(202);
  });
  afterAll(async () => r?.close());

  it.each(CORPUS)('$name → $status $code', async (c) => {
    const before = await r.snapshot();
    const headers: Record<string, string> = {
      authorization: `Bearer ${KEYS.north}`,
      'idempotency-key': 'corpus',
      ...c.headers,
    };
    if (c.contentType !== null) headers['content-type'] = c.contentType ?? 'application/json';
    const res = await fetch(`${base}/v1/operations`, { method: 'POST', headers, body: c.body });
    const text = await res.text();
    expect(res.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    const problem = JSON.parse(text);
    expect([res.status, problem.code, problem.status]).toEqual([c.status, c.code, c.status]);
    expect(problem.type).toBe(`https://sluice.dev/problems/${c.code}`);
    expect(typeof problem.title).toBe('string');
    expect(typeof problem.detail).toBe('string');
    expect(await r.snapshot()).toEqual(before);
  });

  it('a body that breaks its schema thousands of times over is answered with its first failing field', async () => {
    // Listing every failure would cost an error object per failing element, however many the
    // body holds (docs/http-api.md, "Why request-invalid names one field"): the answer stays one.
    const before = await r.snapshot();
    const effects = Array.from({ length: 1500 }, () => ({}));
    const res = await r.call('POST', '/v1/operations/seed/reconcile?tenant=north', {
      key: KEYS.admin,
      body: { effects, by: 7, extra: true },
    });
    expect([res.status, res.json.code, res.json.errors]).toEqual([
      422,
      'request-invalid',
      [{ pointer: '#/reason', detail: "must have required property 'reason'" }],
    ]);
    expect(res.json.detail).toBe("body must have required property 'reason'");
    expect(await r.snapshot()).toEqual(before);
  });

  it('the edges pass: 2^53−1 and nesting at exactly 64 are parsed', async () => {
    const safe = await fetch(`${base}/v1/operations`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${KEYS.north}`,
        'idempotency-key': 'safe',
        'content-type': 'application/json',
      },
      body: envelope('{"invoice":7,"amount_cents":9007199254740991}'),
    });
    expect(safe.status).toBe(202);
    expect(((await safe.json()) as { input: { amount_cents: number } }).input.amount_cents).toBe(
      Number.MAX_SAFE_INTEGER,
    );
    // The same key in different objects, and a quoted key inside a string, are no duplicates.
    const nestedKeys = await fetch(`${base}/v1/operations`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${KEYS.north}`,
        'idempotency-key': 'same-names',
        'content-type': 'application/json',
      },
      body: envelope(
        '{"invoice":7,"amount_cents":1,"kind":{"kind":"x,\\"kind\\":"},"input":[{"a":1},{"a":1}]}',
      ),
    });
    expect(nestedKeys.status).toBe(202);
  });

  it('10,000 levels inside a larger body limit: refused as too deep, and the server carries on', async () => {
    const big = await rig({ server: { bodyLimitBytes: 1024 * 1024 } });
    try {
      const before = await big.snapshot();
      const res = await big.call('POST', '/v1/operations', {
        headers: { 'idempotency-key': 'deep', 'content-type': 'application/json' },
        raw: envelope(nested(10_000)),
      });
      expect([res.status, res.json.code]).toEqual([400, 'body-too-deep']);
      expect(await big.snapshot()).toEqual(before);
      const next = await big.call('POST', '/v1/operations', {
        headers: { 'idempotency-key': 'next' },
        body: { kind: 'charge', input: O7 },
      });
      expect(next.status).toBe(202);
    } finally {
      await big.close();
    }
  });

  it('headers just under 16 KiB are read normally', async () => {
    const res = await fetch(`${base}/v1/operations`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${KEYS.north}`,
        'idempotency-key': 'padded',
        'content-type': 'application/json',
        'x-padding': 'p'.repeat(15_000),
      },
      body: envelope(JSON.stringify(O7)),
    });
    expect(res.status).toBe(202);
  });

  it('headers over 16 KiB: 431 as a problem, from the HTTP parser, store unchanged', async () => {
    const before = await r.snapshot();
    // A raw socket: the server answers before reading the whole request and closes.
    const answer = await rawExchange(
      base,
      'POST /v1/operations HTTP/1.1\r\nHost: x\r\n' +
        `Authorization: Bearer ${KEYS.north}\r\nIdempotency-Key: big\r\nX-Padding: ${'p'.repeat(20_000)}\r\n` +
        'Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}',
    );
    const [head, body] = answer.split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 431 /);
    expect(head).toMatch(/content-type: application\/problem\+json/i);
    expect(head).toMatch(/x-content-type-options: nosniff/i);
    expect(JSON.parse(body!)).toMatchObject({
      status: 431,
      code: 'header-too-large',
      type: 'https://sluice.dev/problems/header-too-large',
    });
    expect(await r.snapshot()).toEqual(before);
  });

  it('a path that is not a route, and a bad percent-encoding, are problems too', async () => {
    const missing = await fetch(`${base}/v1/nothing-here`, {
      headers: { authorization: `Bearer ${KEYS.north}` },
    });
    expect([missing.status, ((await missing.json()) as { code: string }).code]).toEqual([404, 'not-found']);
    const bad = await fetch(`${base}/v1/operations/%E0%A4%A`, {
      headers: { authorization: `Bearer ${KEYS.north}` },
    });
    expect(bad.headers.get('content-type')).toMatch(/^application\/problem\+json/);
    // Raised before routing, it still carries what every /v1/ answer does.
    expect(bad.headers.get('cache-control')).toBe('no-store');
    expect(bad.headers.get('x-content-type-options')).toBe('nosniff');
    expect(missing.headers.get('x-content-type-options')).toBe('nosniff');
    expect([bad.status, ((await bad.json()) as { code: string }).code]).toEqual([400, 'url-invalid']);
  });

  it('no body at all where one is required: 400 body-malformed, as an empty one', async () => {
    for (const path of ['/v1/operations', '/v1/operations/O7/redrive?tenant=north']) {
      const answer = await rawExchange(
        base,
        `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${path.includes('redrive') ? KEYS.admin : KEYS.north}\r\n` +
          'Idempotency-Key: nobody\r\nContent-Length: 0\r\nConnection: close\r\n\r\n',
      );
      const [head, ...body] = answer.split('\r\n\r\n');
      expect([path, head!.split('\r\n')[0]]).toEqual([path, 'HTTP/1.1 400 Bad Request']);
      expect(JSON.parse(body.join(''))).toMatchObject({ code: 'body-malformed' });
    }
  });

  it('a request target in absolute form is answered as its path would be', async () => {
    // RFC 9112 §3.2.2: a server accepts `GET http://host/path`, as a proxy sends it.
    const { host } = new URL(base);
    const exchange = async (method: string, path: string) => {
      const answer = await rawExchange(
        base,
        `${method} ${base}${path} HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${KEYS.north}\r\n` +
          'Connection: close\r\n\r\n',
      );
      const [head, ...body] = answer.split('\r\n\r\n');
      return { head: head!, body: body.join('\r\n\r\n') };
    };
    const listed = await exchange('GET', '/v1/operations?limit=1');
    expect(listed.head).toMatch(/^HTTP\/1\.1 200 /);
    expect(listed.head).toMatch(/cache-control: no-store/i);
    const wrong = await exchange('DELETE', '/v1/operations/O7');
    expect(wrong.head).toMatch(/^HTTP\/1\.1 405 /);
    expect(wrong.head).toMatch(/allow: GET/i);
    expect(wrong.head).toMatch(/cache-control: no-store/i);
    expect(wrong.body).toContain('"instance":"/v1/operations/O7"');
  });

  it('a percent-encoded path routed as a /v1/ one is not to be cached either', async () => {
    // The router decodes `%76` to `v`: these are the tenant's own operation, list and usage.
    for (const path of ['/%761/operations/seed', '/v%31/operations?limit=1', '/%761/tenants/north/usage']) {
      const answer = await r.call('GET', path);
      expect([path, answer.status, answer.headers.get('cache-control')]).toEqual([path, 200, 'no-store']);
    }
    const read = await r.call('GET', '/%761/operations/seed');
    expect(read.json).toMatchObject({ tenant: 'north', id: 'seed' });
  });

  it('two Authorization headers: 401, whichever key each names', async () => {
    const before = await r.snapshot();
    const answer = await rawExchange(
      base,
      'POST /v1/operations HTTP/1.1\r\nHost: x\r\nConnection: close\r\n' +
        `Authorization: Bearer ${KEYS.north}\r\nAuthorization: Bearer ${KEYS.south}\r\n` +
        `Idempotency-Key: twice\r\nContent-Type: application/json\r\nContent-Length: ${envelope(JSON.stringify(O7)).length}\r\n\r\n` +
        envelope(JSON.stringify(O7)),
    );
    const [head, body] = answer.split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 401 /);
    expect(JSON.parse(body!)).toMatchObject({ status: 401, code: 'unauthorized' });
    expect(await r.snapshot()).toEqual(before);
  });

  it('an HTTP/1.1 request without Host: 400 as a problem', async () => {
    const answer = await rawExchange(base, 'GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n');
    const [head, body] = answer.split('\r\n\r\n');
    expect(head).toMatch(/^HTTP\/1\.1 400 /);
    expect(JSON.parse(body!)).toMatchObject({ status: 400, code: 'bad-request' });
  });

  // Node looks at open connections' timers every 30 s unless told otherwise: without the server's
  // own setting this answer would take 30 s or more, and the 20 s bound below would fail it.
  it('a body that stops arriving: 408 once the request timeout has passed, store unchanged', async () => {
    const slow = await rig({ server: { requestTimeoutMs: 1000 } });
    try {
      const before = await slow.snapshot();
      const at = await slow.listen();
      // Headers and half a body, then nothing: the answer comes from the server's own clock.
      const answer = await rawExchange(
        at,
        'POST /v1/operations HTTP/1.1\r\nHost: x\r\n' +
          `Authorization: Bearer ${KEYS.north}\r\nIdempotency-Key: slow\r\n` +
          'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"kind":',
      );
      const [head, body] = answer.split('\r\n\r\n');
      expect(head).toMatch(/^HTTP\/1\.1 408 /);
      expect(JSON.parse(body!)).toMatchObject({ status: 408, code: 'request-timeout' });
      expect(await slow.snapshot()).toEqual(before);
    } finally {
      await slow.close();
    }
  }, 20_000);

  it('a client that stops reading its answers: its connection is closed, the answers let go', async () => {
    // Its requests have arrived, so the request timeout is over; its answers are not all sent, so
    // the keep-alive timeout has not begun. Before a connection timeout, nothing ended it.
    // Twenty pipelined listings, all to be answered: not the listing cap's 429 for the most.
    const stalled = await rig({ server: { requestTimeoutMs: 500, maxListingsPerTenant: false } }); // so 2 s without progress
    const client = new Socket();
    try {
      const text = 'x'.repeat(1900);
      const submitted = await stalled.h.sluice.submitMany(
        Array.from({ length: 500 }, (_, i) => ({
          tenant: 'north',
          id: `n${i}`,
          kind: 'note',
          input: { text },
        })),
      );
      expect(submitted.every((s) => s.ok)).toBe(true);
      const { port } = new URL(await stalled.listen());
      const accepted = new Promise<Socket>((resolve) => stalled.app.server.once('connection', resolve));
      client.on('error', () => {});
      client.connect(Number(port), '127.0.0.1');
      client.pause(); // reads nothing from here on
      const page = `GET /v1/operations?limit=500 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEYS.north}\r\n\r\n`;
      client.write(page.repeat(20)); // about 1 MB an answer: more than the sockets' buffers take
      const server = await accepted;
      const closed = new Promise<'closed'>((resolve) => server.once('close', () => resolve('closed')));
      const waited = new Promise<'open'>((resolve) => setTimeout(() => resolve('open'), 8000));
      expect(await Promise.race([closed, waited])).toBe('closed');
      expect(server.writableLength).toBe(0);
      // Others are served as before.
      expect((await stalled.call('GET', '/v1/operations?limit=1')).status).toBe(200);
    } finally {
      client.destroy();
      await stalled.close();
    }
  }, 30_000);
});

describe('an input that fails its kind schema many times over', () => {
  let r: Rig | undefined;
  afterAll(async () => r?.close());

  it('is answered with the first MAX_INPUT_ISSUES failing paths and a count of the rest', async () => {
    r = await rig({
      define(sluice) {
        sluice.define('batch', { input: z.object({ amounts: z.array(z.number()) }), run: () => null });
      },
    });
    const amounts = Array.from({ length: 1000 }, (_, i) => `n${i}`);
    const res = await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'many' },
      body: { kind: 'batch', input: { amounts } },
    });
    expect([res.status, res.json.code]).toEqual([422, 'input-invalid']);
    expect(res.json.errors).toHaveLength(MAX_INPUT_ISSUES);
    expect(res.json.errors[0].pointer).toBe('#/input/amounts/0');
    expect(res.json.errors.at(-1).pointer).toBe(`#/input/amounts/${MAX_INPUT_ISSUES - 1}`);
    expect(res.json.errorsOmitted).toBe(1000 - MAX_INPUT_ISSUES);
    expect(await r.h.sluice.get({ tenant: 'north', id: 'many' })).toBeUndefined();
  });
});
