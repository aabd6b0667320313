/**
 * PostgreSQL: two processes submitting one id at the moment a cap has one place left. One is
 * created; the other is answered from that record (`existing`, or `conflict` for another input),
 * never refused for capacity: a duplicate never counts against it (DESIGN.md, Admission). The
 * single submit reads the record before it waits for the queue row's lock, so the loser used to
 * find the cap full and answer `tenant-queue-full` for an id that was accepted.
 */
import { describe, expect, it } from 'vitest';
import type { SubmitOutcome } from '../../src/store/types.js';
import { claimOne, leaseOf, submitParams } from '../conformance/fixtures.js';
import { usePostgres, waitUntilWaiting } from '../helpers/postgres.js';

const db = usePostgres();
const ROUNDS = 40;

async function race(
  item: (round: number) => [Parameters<typeof submitParams>[0], Parameters<typeof submitParams>[0]],
): Promise<Record<string, number>> {
  const schema = db.freshSchema();
  const a = db.store({ schema, poolSize: 2 });
  const b = db.store({ schema, poolSize: 2 });
  await a.migrate();
  const seen: Record<string, number> = {};
  const count = (o: SubmitOutcome) => {
    const key = o.status === 'rejected' ? o.reason : o.status;
    seen[key] = (seen[key] ?? 0) + 1;
  };
  for (let round = 0; round < ROUNDS; round++) {
    const [x, y] = item(round);
    const [[first], [second]] = await Promise.all([
      a.operationSubmitMany([submitParams(x)]),
      b.operationSubmitMany([submitParams(y)]),
    ]);
    count(first!);
    count(second!);
  }
  return seen;
}

describe('PostgreSQL: one id submitted twice at once, with one place left', () => {
  it('at the tenant cap: one created, the other existing', async () => {
    const seen = await race((round) => {
      const p = { tenant: `T${round}`, id: 'dup', limits: { maxWaiting: 1 } };
      return [p, p];
    });
    expect(seen).toEqual({ created: ROUNDS, existing: ROUNDS });
  });

  it('at the class bound: one created, the other existing', async () => {
    const seen = await race((round) => {
      const p = { tenant: 'N', id: `dup-${round}`, class: `c${round}`, limits: { maxQueued: 1 } };
      return [p, p];
    });
    expect(seen).toEqual({ created: ROUNDS, existing: ROUNDS });
  });

  it('with another input: one created, the other a conflict', async () => {
    const seen = await race((round) => [
      { tenant: `T${round}`, id: 'dup', limits: { maxWaiting: 1 }, input: { amount: 1 } },
      { tenant: `T${round}`, id: 'dup', limits: { maxWaiting: 1 }, input: { amount: 2 } },
    ]);
    expect(seen).toEqual({ created: ROUNDS, conflict: ROUNDS });
  });
});

describe('PostgreSQL: a batch submit and the purge', () => {
  it('answers an id the purge removed while the batch waited as expired, and the rest as they were', async () => {
    // The batch finds X finished, then waits for the class row; the purge removes X meanwhile.
    // The batch answers from rows it reads after its writes, and X's was gone: the whole batch
    // threw a SyntaxError (an unclassified 500), its other items committed.
    const schema = db.freshSchema();
    const store = db.store({ schema, poolSize: 4 });
    await store.migrate();
    await store.operationSubmitMany([submitParams({ id: 'X' })]);
    const x = await claimOne(store);
    await store.attemptFinishMany([{ lease: leaseOf(x), outcome: 'succeeded', result: 1 }]);
    const admin = await db.client();
    const observer = await db.client();
    try {
      await admin.query(
        `UPDATE "${schema}".operations SET finished_at = finished_at - 100000 WHERE id = 'X'`,
      );
      await admin.query('BEGIN');
      await admin.query(`SELECT 1 FROM "${schema}".classes WHERE class = 'default' FOR UPDATE`);
      const batch = store.operationSubmitMany([
        submitParams({ id: 'X' }),
        submitParams({ id: 'Y' }),
        submitParams({ id: 'X2', input: { other: true } }),
      ]);
      await waitUntilWaiting(observer, 'submit_many');
      const purged = await store.retentionPurge({ retentionMs: 1_000, tombstoneMs: 3_600_000, limit: 10 });
      expect(purged.purged).toBe(1);
      await admin.query('COMMIT');
      const [forX, forY, forX2] = await batch;
      expect(forX).toEqual({ status: 'expired', digestMatches: true });
      expect([forY?.status, forX2?.status]).toEqual(['created', 'created']);
      expect((await store.operationSubmitMany([submitParams({ id: 'X' })]))[0]).toEqual({
        status: 'expired',
        digestMatches: true,
      });
    } finally {
      await admin.end();
      await observer.end();
    }
  });
});
