/**
 * A tenant's listings in progress on one server are capped (`maxListingsPerTenant`), and so are
 * an admin key's across the tenants it names: over the cap a listing is refused at once with
 * `429 too-many-listings` and `Retry-After`, while other tenants' listings are served. Over a real
 * listener; the listings held in progress wait in the store (a gate in front of its listing read,
 * for the tenants named).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { sqliteStore } from '../../src/index.js';
import type { Store } from '../../src/store/store.js';
import { type Answer, KEYS, type Rig, rig } from './rig.js';

/** Lets every held listing go: after each test too, so that a failed one does not hang its close. */
let releaseAll = () => {};

/** A store whose listings of `held` tenants wait until `release()`; `waiting(n)` resolves once n do. */
function heldListings(inner: Store, held: ReadonlySet<string>) {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => {
    open = resolve;
  });
  releaseAll = () => open();
  let waiting = 0;
  const arrivals: Array<() => void> = [];
  const store: Store = Object.create(inner);
  store.operationList = async (params) => {
    if (params.tenant !== undefined && held.has(params.tenant)) {
      waiting++;
      for (const arrived of arrivals.splice(0)) arrived();
      await opened;
    }
    return inner.operationList(params);
  };
  return {
    store,
    async waiting(n: number) {
      while (waiting < n) await new Promise<void>((resolve) => arrivals.push(resolve));
    },
    release: () => open(),
  };
}

const statuses = (answers: Answer[]) => answers.map((a) => a.status).sort();

describe('listings in progress per tenant', () => {
  let r: Rig;
  afterEach(async () => {
    releaseAll();
    await r?.close();
  });

  it('are capped: one over the cap is refused with too-many-listings; another tenant is served', async () => {
    const cap = 3;
    const lists = heldListings(sqliteStore({ path: ':memory:' }), new Set(['north']));
    r = await rig({ store: lists.store, server: { maxListingsPerTenant: cap } });
    await r.h.sluice.submit({ tenant: 'south', id: 's1', kind: 'note', input: { text: 's' } });

    // cap + 1 at once, by both of north's keys: the cap is the tenant's.
    const all = Array.from({ length: cap + 1 }, (_, i) =>
      r.call('GET', '/v1/operations?kind=nosuchkind', { key: i % 2 === 0 ? KEYS.north : KEYS.north2 }),
    );
    await lists.waiting(cap);
    const south = await r.call('GET', '/v1/operations', { key: KEYS.south });
    expect([south.status, south.json.operations.map((o: { id: string }) => o.id)]).toEqual([200, ['s1']]);
    // A read of one operation is not a listing.
    expect((await r.call('GET', '/v1/operations/nope')).status).toBe(404);

    lists.release();
    const answers = await Promise.all(all);
    expect(statuses(answers)).toEqual([...Array(cap).fill(200), 429]);
    const refused = answers.find((a) => a.status === 429)!;
    expect(refused.json).toMatchObject({
      code: 'too-many-listings',
      type: 'https://sluice.dev/problems/too-many-listings',
    });
    expect(refused.headers.get('retry-after')).toBe('1');
    // Each listing stopped counting once answered.
    const again = await Promise.all(Array.from({ length: cap }, () => r.call('GET', '/v1/operations')));
    expect(statuses(again)).toEqual(Array(cap).fill(200));
  });

  it("count an admin key's listings across the tenants it names, apart from the tenants' own", async () => {
    const lists = heldListings(sqliteStore({ path: ':memory:' }), new Set(['north']));
    r = await rig({ store: lists.store, server: { maxListingsPerTenant: 1 } });
    const held = r.call('GET', '/v1/operations?tenant=north', { key: KEYS.admin });
    await lists.waiting(1);
    const other = await r.call('GET', '/v1/operations?tenant=south', { key: KEYS.admin });
    expect([other.status, other.json.code]).toEqual([429, 'too-many-listings']);
    expect((await r.call('GET', '/v1/operations', { key: KEYS.south })).status).toBe(200);
    lists.release();
    expect((await held).status).toBe(200);
  });

  it('take a cap of at least one, a whole number, or false', async () => {
    for (const bad of [0, 1.5, -1, Number.NaN])
      await expect(rig({ server: { maxListingsPerTenant: bad } })).rejects.toMatchObject({
        code: 'invalid-argument',
      });
    const lists = heldListings(sqliteStore({ path: ':memory:' }), new Set(['north']));
    r = await rig({ store: lists.store, server: { maxListingsPerTenant: false } });
    const all = Array.from({ length: 5 }, () => r.call('GET', '/v1/operations'));
    await lists.waiting(5);
    lists.release();
    expect(statuses(await Promise.all(all))).toEqual(Array(5).fill(200));
  });
});
