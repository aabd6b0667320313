/**
 * A tenant's requests in progress on one server are capped (`maxRequestsPerTenant`): over it a
 * request is refused at once with 429 and `Retry-After`, other tenants and admin keys go on, and
 * a request stops counting once its answer is sent or its client has gone. Over a real listener;
 * the requests held in progress wait in the store (a gate in front of its read of an operation).
 */
import { once } from 'node:events';
import { Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { sqliteStore } from '../../src/index.js';
import type { Store } from '../../src/store/store.js';
import { RawClient } from './raw-client.js';
import { KEYS, type Rig, rig } from './rig.js';

/** A store whose reads of one operation wait until `release()`; `held` counts the reads waiting. */
function heldReads(inner: Store) {
  let open!: () => void;
  let opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  let held = 0;
  const arrivals: Array<() => void> = [];
  const store: Store = Object.create(inner);
  store.operationGet = async (params) => {
    held++;
    for (const arrived of arrivals.splice(0)) arrived();
    await opened;
    held--;
    return inner.operationGet(params);
  };
  return {
    store,
    inner,
    /** Resolves once `n` reads wait. */
    async waiting(n: number) {
      while (held < n) await new Promise<void>((resolve) => arrivals.push(resolve));
    },
    release() {
      open();
      opened = new Promise<void>((resolve) => {
        open = resolve;
      });
    },
  };
}

describe('requests in progress per tenant', () => {
  let r: Rig;
  afterEach(async () => r?.close());

  it('are capped: over the cap a 429 at once; other tenants and admin keys go on', async () => {
    const reads = heldReads(sqliteStore({ path: ':memory:' }));
    r = await rig({ store: reads.store, server: { maxRequestsPerTenant: 2 } });
    await r.h.sluice.submit({ tenant: 'north', id: 'o1', kind: 'note', input: { text: 'n' } });
    const held = [r.call('GET', '/v1/operations/o1'), r.call('GET', '/v1/operations/o1')];
    await reads.waiting(2);

    const refused = await r.call('GET', '/v1/operations/o1');
    expect(refused.status).toBe(429);
    expect(refused.json).toMatchObject({ code: 'tenant-too-many-requests' });
    expect(refused.headers.get('retry-after')).toBe('1');
    // Refused before its body is read, and storing nothing: a submit is refused the same way.
    const submit = await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'o2' },
      body: { kind: 'note', input: { text: 'n' } },
    });
    expect(submit.status).toBe(429);
    expect(await reads.inner.operationGet({ tenant: 'north', id: 'o2' })).toBeUndefined();
    // The other key of the same tenant counts for the tenant.
    expect((await r.call('GET', '/v1/operations', { key: KEYS.north2 })).status).toBe(429);
    // Another tenant, and an admin key, are not held up by north.
    const south = await r.call('POST', '/v1/operations', {
      key: KEYS.south,
      headers: { 'idempotency-key': 's1' },
      body: { kind: 'note', input: { text: 's' } },
    });
    expect(south.status).toBe(202);
    expect((await r.call('GET', '/v1/operations?tenant=north', { key: KEYS.admin })).status).toBe(200);

    reads.release();
    expect((await Promise.all(held)).map((a) => a.status)).toEqual([200, 200]);
    expect((await r.call('GET', '/v1/operations')).status).toBe(200);
  });

  it('take a cap of at least one, a whole number, or false', async () => {
    for (const bad of [0, 1.5, -1, Number.NaN])
      await expect(rig({ server: { maxRequestsPerTenant: bad } })).rejects.toMatchObject({
        code: 'invalid-argument',
      });
    r = await rig({ server: { maxRequestsPerTenant: false } });
    expect((await r.call('GET', '/v1/operations')).status).toBe(200);
  });

  it('stop counting once answered, or once their client has gone', async () => {
    const reads = heldReads(sqliteStore({ path: ':memory:' }));
    r = await rig({ store: reads.store, server: { maxRequestsPerTenant: 1 } });
    await r.h.sluice.submit({ tenant: 'north', id: 'o1', kind: 'note', input: { text: 'n' } });
    // Many in turn, in-process and over the listener: each answered request leaves the count.
    for (let i = 0; i < 70; i++) {
      const answered =
        i % 2 === 0
          ? (
              await r.app.inject({
                method: 'GET',
                url: '/v1/operations',
                headers: { authorization: `Bearer ${KEYS.north}` },
              })
            ).statusCode
          : (await r.call('GET', '/v1/operations')).status;
      expect(answered).toBe(200);
    }
    // A client that gives up while its request waits in the store frees its place.
    const { port } = new URL(await r.listen());
    const client = new Socket();
    client.on('error', () => {});
    const closed = new Promise<void>((resolve) =>
      r.app.server.once('connection', (s) => s.once('close', resolve)),
    );
    client.connect(Number(port), '127.0.0.1');
    client.write(`GET /v1/operations/o1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEYS.north}\r\n\r\n`);
    await reads.waiting(1);
    expect((await r.call('GET', '/v1/operations')).status).toBe(429);
    client.destroy();
    await closed;
    expect((await r.call('GET', '/v1/operations')).status).toBe(200);
    reads.release();
  });

  it('stop counting once answered 408, though the stalled client leaves its connection open', async () => {
    // The connection timeout, far off: the place must come back with the 408, not with it.
    r = await rig({
      server: { maxRequestsPerTenant: 1, requestTimeoutMs: 500, connectionTimeoutMs: 600_000 },
    });
    const base = await r.listen();
    const accepted = new Promise<Socket>((resolve) => r.app.server.once('connection', resolve));
    // A client that stops sending its body, and never closes its side.
    const stalled = new RawClient(base, { allowHalfOpen: true });
    try {
      stalled.write(
        `POST /v1/operations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEYS.north}\r\n` +
          'Idempotency-Key: slow\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"kind":',
      );
      const server = await accepted;
      const [finished, closed] = [once(server, 'finish'), once(server, 'close')];
      const answer = await stalled.read();
      expect([answer.status, answer.json.code]).toEqual([408, 'request-timeout']);
      // Closed once the answer is out, not half-closed to wait on a client that has stopped.
      await finished;
      expect(server.destroyed).toBe(true);
      await closed;
      expect((await r.call('GET', '/v1/operations')).status).toBe(200);
    } finally {
      stalled.destroy();
    }
  }, 20_000);
});
