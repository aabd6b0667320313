/**
 * What happens to the connection around a request, over raw loopback sockets: a request refused
 * before its body has arrived is answered with `Connection: close` and its connection closed, so
 * the server never reads a body it refused (an unauthenticated client declaring a gigabyte made
 * it read the gigabyte); `100 Continue` goes only to a request past those refusals; an accepted
 * request's connection stays open; answers written on the raw socket carry `no-store`; the idle
 * keep-alive timeout is the documented one; past `maxConnections`, a new connection is closed as
 * soon as it arrives, before it can send a byte, and the places come back as connections close.
 */
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { DEFAULT_MAX_CONNECTIONS, KEEP_ALIVE_TIMEOUT_MS } from '../../src/http/server.js';
import { O7 } from '../helpers/charge-kind.js';
import { RawClient } from './raw-client.js';
import { KEYS, type Rig, rig } from './rig.js';

const submitBody = JSON.stringify({ kind: 'charge', input: O7 });

/** A submit's request head: `Host`, then `headers` as given (a null value leaves it out). */
function submitHead(headers: Record<string, string | null>): string {
  const lines = Object.entries({
    authorization: `Bearer ${KEYS.north}`,
    'idempotency-key': 'c1',
    'content-type': 'application/json',
    ...headers,
  })
    .filter(([, value]) => value !== null)
    .map(([name, value]) => `${name}: ${value}\r\n`);
  return `POST /v1/operations HTTP/1.1\r\nHost: x\r\n${lines.join('')}\r\n`;
}

describe('connections', () => {
  let r: Rig;
  const clients: RawClient[] = [];
  const client = async (options?: { allowHalfOpen?: boolean }) => {
    const c = new RawClient(await r.listen(), options);
    clients.push(c);
    return c;
  };
  afterEach(async () => {
    for (const c of clients.splice(0)) c.destroy();
    await r?.close();
  });

  it('a refusal before the body has been read closes the connection: the declared body never is', async () => {
    r = await rig();
    const before = await r.snapshot();
    const refuse = async (
      name: string,
      headers: Record<string, string | null>,
      status: number,
      code: string,
    ) => {
      const c = await client();
      // A gigabyte declared, none of it sent: kept alive, the server would wait for all of it.
      c.write(submitHead({ 'content-length': '1000000000', ...headers }));
      const answer = await c.read();
      expect([name, answer.status, answer.json.code]).toEqual([name, status, code]);
      expect([name, answer.headers.connection]).toEqual([name, 'close']);
      await c.ended;
    };
    await refuse('no key', { authorization: null }, 401, 'unauthorized');
    await refuse('an admin key', { authorization: `Bearer ${KEYS.admin}` }, 403, 'forbidden');
    await refuse('no Idempotency-Key', { 'idempotency-key': null }, 400, 'idempotency-key-missing');
    // Chunked: a body of unknown length, refused the same way.
    await refuse(
      'chunked',
      { authorization: null, 'content-length': null, 'transfer-encoding': 'chunked' },
      401,
      'unauthorized',
    );
    expect(await r.snapshot()).toEqual(before);
    await r.close();

    r = await rig({ server: { accepting: () => false } });
    await refuse('not accepting', {}, 503, 'shutting-down');
  });

  it('a refused request with no body, or whose body was read, keeps its connection', async () => {
    r = await rig();
    const c = await client();
    c.write(`GET /v1/operations HTTP/1.1\r\nHost: x\r\n\r\n`);
    const refused = await c.read();
    expect([refused.status, refused.headers.connection]).toEqual([401, 'keep-alive']);
    const invalid = JSON.stringify({ kind: 'charge' });
    c.write(submitHead({ 'content-length': String(invalid.length) }) + invalid);
    const unread = await c.read();
    expect([unread.status, unread.json.code, unread.headers.connection]).toEqual([
      422,
      'request-invalid',
      'keep-alive',
    ]);
    c.write(submitHead({ 'content-length': String(submitBody.length) }) + submitBody);
    const accepted = await c.read();
    expect([accepted.status, accepted.headers.connection]).toEqual([202, 'keep-alive']);
  });

  it('100 Continue only once a request has passed every check that needs no body', async () => {
    r = await rig();
    const expect100 = { expect: '100-continue', 'content-length': String(submitBody.length) };
    // Refused: answered at once, without 100 Continue, so the client never sends the body.
    for (const [headers, status] of [
      [{ authorization: null }, 401],
      [{ 'idempotency-key': null }, 400],
      [{ 'content-type': 'text/plain' }, 415],
      [{ 'content-encoding': 'gzip' }, 415],
      [{ 'content-length': '1000000' }, 413],
    ] as Array<[Record<string, string | null>, number]>) {
      const c = await client();
      c.write(submitHead({ ...expect100, ...headers }));
      const answer = await c.read();
      expect([headers, answer.status, answer.headers.connection]).toEqual([headers, status, 'close']);
      await c.ended;
    }
    // Accepted: 100 Continue, then the body, then the answer.
    const c = await client();
    c.write(submitHead(expect100));
    expect((await c.read()).status).toBe(100);
    c.write(submitBody);
    const accepted = await c.read();
    expect([accepted.status, accepted.json.id]).toEqual([202, 'c1']);
  });

  it('a body under a content coding is refused before it is read: 415, naming identity', async () => {
    r = await rig();
    const before = await r.snapshot();
    for (const coding of ['gzip', 'br', 'identity, gzip', 'GZIP', 'x-unknown']) {
      const c = await client();
      c.write(submitHead({ 'content-encoding': coding, 'content-length': '1000000000' }));
      const answer = await c.read();
      expect([coding, answer.status, answer.json.code]).toEqual([coding, 415, 'unsupported-media-type']);
      expect(answer.headers['accept-encoding']).toBe('identity');
      expect(answer.headers.connection).toBe('close');
      await c.ended;
    }
    // Plain JSON under a coding that says otherwise: refused, not read as if uncoded.
    const mislabelled = await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'gz', 'content-encoding': 'gzip' },
      body: { kind: 'charge', input: O7 },
    });
    expect([mislabelled.status, mislabelled.json.code]).toEqual([415, 'unsupported-media-type']);
    expect(await r.snapshot()).toEqual(before);
    // `identity` is no coding: accepted, as a body without the header.
    const res = await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'ident', 'content-encoding': 'identity' },
      body: { kind: 'charge', input: O7 },
    });
    expect(res.status).toBe(202);
  });

  it('an answer written on the raw socket (431) carries no-store, as every /v1/ answer does', async () => {
    r = await rig();
    const c = await client();
    c.write(
      `GET /v1/operations?kind=${'k'.repeat(17_000)} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEYS.north}\r\n\r\n`,
    );
    const answer = await c.read();
    expect([answer.status, answer.json.code]).toEqual([431, 'header-too-large']);
    expect(answer.headers['cache-control']).toBe('no-store');
    expect(answer.headers['x-content-type-options']).toBe('nosniff');
  });

  it('an idle keep-alive connection is advertised the documented 72 s', async () => {
    r = await rig();
    expect(KEEP_ALIVE_TIMEOUT_MS).toBe(72_000);
    expect(r.app.server.keepAliveTimeout).toBe(KEEP_ALIVE_TIMEOUT_MS);
    const c = await client();
    c.write(`GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n`);
    const answer = await c.read();
    expect([answer.status, answer.headers.connection, answer.headers['keep-alive']]).toEqual([
      200,
      'keep-alive',
      'timeout=72',
    ]);
  });

  it('are capped: one over maxConnections is closed on arrival, and a freed place takes a new one', async () => {
    const cap = 5;
    r = await rig({ server: { maxConnections: cap } });
    expect(DEFAULT_MAX_CONNECTIONS).toBe(1000);
    const { port } = new URL(await r.listen());
    const accepted: Socket[] = [];
    let arrived = () => {};
    r.app.server.on('connection', (socket: Socket) => {
      accepted.push(socket);
      arrived();
    });
    const open = () => {
      const socket = connect(Number(port), '127.0.0.1');
      socket.on('error', () => {});
      return socket;
    };
    // Idle, before any key: what a flood of connections holds.
    const held = Array.from({ length: cap }, open);
    while (accepted.length < cap) await new Promise<void>((resolve) => (arrived = resolve));

    const dropped = once(r.app.server, 'drop');
    const over = open();
    await once(over, 'close');
    await dropped;
    expect(accepted).toHaveLength(cap);
    expect(held.filter((s) => s.destroyed)).toEqual([]);

    for (const s of held) s.destroy();
    await Promise.all(accepted.map((s) => (s.destroyed ? undefined : once(s, 'close'))));
    expect((await r.call('GET', '/v1/operations')).status).toBe(200);
  });

  it('take a cap of at least one, a whole number', async () => {
    for (const bad of [0, 1.5, -1, Number.NaN])
      await expect(rig({ server: { maxConnections: bad } })).rejects.toMatchObject({
        code: 'invalid-argument',
      });
  });
});
