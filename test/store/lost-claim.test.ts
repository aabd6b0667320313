/**
 * A claim whose commit is lost is not reissued under the same epoch. The worker that read the
 * claim runs on; the store goes back to before it (a server crash under `synchronous_commit =
 * off`, a failover to an asynchronous standby, a power cut under SQLite's `synchronous =
 * NORMAL`, a file restored from a copy) and the next claim starts the operation again. Had the
 * epoch followed from the one before, both workers would hold the same one and both would pass
 * the fence; a random step makes every fenced write of the lost claim's worker fail instead.
 *
 * The loss is real on both stores: on SQLite the file is put back to a copy taken before the
 * claim; on PostgreSQL the claim runs in a transaction that is rolled back after its rows were
 * read, which is what a lost commit looks like to everyone but the worker that read them.
 */
import { copyFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { claimMany } from '../../src/store/postgres/claim.js';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import type { Store } from '../../src/store/store.js';
import type { ClaimParams, LeaseRef, OperationRow } from '../../src/store/types.js';
import { leaseOf, rejectionCode, submitParams } from '../conformance/fixtures.js';
import { usePostgres } from '../helpers/postgres.js';

const ref = { tenant: 'North', id: 'op-1' };
const claimBy = (owner: string): ClaimParams => ({ class: 'default', owner, limit: 1, leaseMs: 30_000 });

/** Every fenced write of the lost claim is refused; the new claim's go through. */
async function expectFencedApart(store: Store, lost: LeaseRef, current: OperationRow): Promise<void> {
  expect(current.epoch).not.toBe(lost.epoch);
  expect(current.epoch).toBeGreaterThan(0);
  expect(await store.leaseExtendMany({ leases: [lost, leaseOf(current)], leaseMs: 30_000 })).toEqual([
    { ok: false, cancelRequested: false },
    { ok: true, cancelRequested: false },
  ]);
  expect(await rejectionCode(store.effectBegin({ lease: lost, name: 'charge', key: 'k' }))).toBe(
    'lease-lost',
  );
  expect(await store.effectList(ref)).toEqual([]);
  expect(await store.attemptFinishMany([{ lease: lost, outcome: 'succeeded', result: 'lost' }])).toEqual([
    false,
  ]);
  expect(
    await store.attemptFinishMany([{ lease: leaseOf(current), outcome: 'succeeded', result: 'ok' }]),
  ).toEqual([true]);
  const row = await store.operationGet(ref);
  expect([row?.state, row?.result, row?.attempt]).toEqual(['succeeded', 'ok', 1]);
  expect((await store.attemptList(ref)).map((a) => [a.epoch, a.owner])).toEqual([[current.epoch, 'w2']]);
}

describe('a claim whose commit is lost', () => {
  let dir: string;
  afterEach(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('on SQLite, a file put back to before the claim starts the operation under another epoch', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-lost-claim-'));
    const path = join(dir, 'sluice.db');
    const copy = join(dir, 'before-the-claim.db');
    let store = sqliteStore({ path });
    await store.migrate();
    await store.operationSubmitMany([submitParams()]);
    await store.close(); // checkpoints the WAL into the file and removes it
    copyFileSync(path, copy);

    store = sqliteStore({ path });
    const [lost] = (await store.operationClaimMany(claimBy('w1'))).rows;
    expect(lost?.state).toBe('running');
    await store.close();

    copyFileSync(copy, path);
    for (const suffix of ['-wal', '-shm']) rmSync(`${path}${suffix}`, { force: true });
    store = sqliteStore({ path });
    try {
      expect((await store.operationGet(ref))?.state).toBe('queued');
      const [current] = (await store.operationClaimMany(claimBy('w2'))).rows;
      expect(current?.attempt).toBe(1);
      await expectFencedApart(store, leaseOf(lost!), current!);
    } finally {
      await store.close();
    }
  });

  it('on SQLite, a claim alone commits without syncing the WAL, the ends-and-claim transaction synced', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-lost-claim-'));
    for (const synchronous of ['FULL', 'NORMAL'] as const) {
      const store = sqliteStore({ path: join(dir, `${synchronous}.db`), synchronous });
      try {
        await store.migrate();
        await store.operationSubmitMany([submitParams({ id: 'a' }), submitParams({ id: 'b' })]);
        // What `PRAGMA synchronous` says (1 NORMAL, 2 FULL) whenever a statement is fetched inside
        // the store's calls: inside their transactions, where the commit's sync is decided.
        const seen: number[] = [];
        const setting = () => store.context.db.pragma('synchronous', { simple: true }) as number;
        for (const name of ['stmt', 'rawStmt'] as const) {
          const real = store.context[name];
          (store.context as { [k in typeof name]: typeof real })[name] = (sql) => {
            seen.push(setting());
            return real(sql);
          };
        }
        const configured = synchronous === 'FULL' ? 2 : 1;
        const [a] = (await store.operationClaimMany(claimBy('w1'))).rows;
        expect(a?.id).toBe('a');
        expect(new Set(seen)).toEqual(new Set([1]));
        expect(setting()).toBe(configured);
        seen.length = 0;
        const out = await store.attemptFinishAndClaim(
          [{ lease: leaseOf(a!), outcome: 'succeeded', result: 1 }],
          claimBy('w1'),
        );
        expect([out.finished, out.claim.rows.map((r) => r.id)]).toEqual([[true], ['b']]);
        expect(new Set(seen)).toEqual(new Set([configured]));
        expect(setting()).toBe(configured);
      } finally {
        await store.close();
      }
    }
  });

  describe('on PostgreSQL', () => {
    const db = usePostgres();

    it('a claim rolled back after its rows were read starts the operation under another epoch', async () => {
      const store = db.store({ schema: db.freshSchema() });
      await store.migrate();
      await store.operationSubmitMany([submitParams()]);

      const client = await store.context.pool.connect();
      let lost: OperationRow | undefined;
      try {
        await client.query('BEGIN');
        [lost] = (await claimMany({ ...store.context, query: store.context.on(client) }, claimBy('w1'))).rows;
        expect(lost?.state).toBe('running');
        await client.query('ROLLBACK');
      } finally {
        client.release();
      }

      expect((await store.operationGet(ref))?.state).toBe('queued');
      const [current] = (await store.operationClaimMany(claimBy('w2'))).rows;
      expect(current?.attempt).toBe(1);
      await expectFencedApart(store, leaseOf(lost!), current!);
    });
  });
});
