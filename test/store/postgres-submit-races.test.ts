/**
 * PostgreSQL: two processes submitting one id at the moment a cap has one place left. One is
 * created; the other is answered from that record (`existing`, or `conflict` for another input),
 * never refused for capacity: a duplicate never counts against it (DESIGN.md, Admission). The
 * single submit reads the record before it waits for the queue row's lock, so the loser used to
 * find the cap full and answer `tenant-queue-full` for an id that was accepted.
 */
import { describe, expect, it } from 'vitest';
import type { SubmitOutcome } from '../../src/store/types.js';
import { submitParams } from '../conformance/fixtures.js';
import { usePostgres } from '../helpers/postgres.js';

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
