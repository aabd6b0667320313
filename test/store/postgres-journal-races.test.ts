/**
 * PostgreSQL: an attempt's end that waits for its operation's row while an effect begin holds it
 * must see the effect the begin commits (migration 33). The end's journal read used to be part of
 * the statement that locked the row, whose snapshot is from before the wait: the operation ended
 * `failed` (not `needs_reconciliation`), or `cancelled`, with a `pending` effect that may have
 * reached the provider. The interleaving is made, not hoped for: another transaction holds the
 * budget window the begin draws on, so the begin holds the operation's row and waits; the end
 * is sent once the server shows the begin waiting, and the window released once it shows the end
 * waiting too.
 */
import type pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { PostgresStore } from '../../src/store/postgres/index.js';
import { BOOM, claimOne, leaseOf, submitParams } from '../conformance/fixtures.js';
import { usePostgres, waitUntilWaiting } from '../helpers/postgres.js';

const db = usePostgres();
const SPEND = { key: 'spend:pay:tenant:North', limit: 1_000, windowMs: 3_600_000, cost: 100 };

describe('PostgreSQL: an end that waited for a begin', () => {
  let admin: pg.Client | undefined;
  afterEach(async () => {
    await admin?.end();
    admin = undefined;
  });

  async function interleave(outcome: 'failed' | 'cancelled') {
    const schema = db.freshSchema();
    const store: PostgresStore = db.store({ schema, poolSize: 4 });
    await store.migrate();
    // The spend window exists, made by another operation's effect.
    await store.operationSubmitMany([submitParams({ id: 'other' }), submitParams({ id: 'op' })]);
    const other = await claimOne(store);
    expect(
      (await store.effectBegin({ lease: leaseOf(other), name: 'charge', key: 'k-other', spend: [SPEND] }))
        .created,
    ).toBe(true);
    const row = await claimOne(store);
    expect(row.id).toBe('op');

    admin = await db.client();
    const observer = await db.client();
    try {
      await admin.query('BEGIN');
      await admin.query(`SELECT 1 FROM "${schema}".budgets WHERE key = $1 FOR UPDATE`, [SPEND.key]);
      const begin = store.effectBegin({
        lease: leaseOf(row),
        name: 'charge',
        key: 'k-op',
        provider: 'pay',
        cost: 100,
        spend: [SPEND],
      });
      await waitUntilWaiting(observer, 'effect_begin');
      const end = store.attemptFinishMany([
        outcome === 'failed'
          ? { lease: leaseOf(row), outcome, error: BOOM }
          : { lease: leaseOf(row), outcome },
      ]);
      await waitUntilWaiting(observer, 'finish_many');
      await admin.query('COMMIT');
      expect((await begin).created).toBe(true);
      expect(await end).toEqual([true]);
    } finally {
      await observer.end();
    }
    const op = await store.operationGet({ tenant: 'North', id: 'op' });
    const effects = await store.effectList({ tenant: 'North', id: 'op' });
    return { state: op?.state, effects: effects.map((e) => e.state) };
  }

  it('that failed ends needs_reconciliation: the effect it did not see may have been sent', async () => {
    expect(await interleave('failed')).toEqual({ state: 'needs_reconciliation', effects: ['pending'] });
  });

  it('that was cancelled runs again: past the point of no return, a cancel is too late', async () => {
    expect(await interleave('cancelled')).toEqual({ state: 'queued', effects: ['pending'] });
  });
});
