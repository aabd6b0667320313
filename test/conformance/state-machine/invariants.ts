/**
 * @module test/conformance/state-machine/invariants
 * What the store must keep after every command of a history, checked against the store itself
 * (independently of the commands' own predictions) and against the model.
 */
import { expect } from 'vitest';
import { isAllowedMove, isTerminal } from '../../../src/core/states.js';
import { allOperations, expectCountersTrue } from '../fixtures.js';
import { CLASSES, effectKey, keyOf, live, MAX_RUNNING, type Model, type Real } from './model.js';

/** The invariants, checked against the store after every command. */
export async function verify(m: Model, r: Real, exits: Set<string>): Promise<void> {
  const { store } = r;
  const rows = await allOperations(store);
  const now = r.clock.now();
  const current = new Map(rows.map((row) => [keyOf(row), row]));
  expect([...current.keys()].sort(), 'the accepted operations').toEqual([...m.ops.keys()].sort());

  for (const row of rows) {
    const k = keyOf(row);
    const op = m.ops.get(k)!;
    const prev = m.snapshot.get(k);
    if (prev) {
      expect(isAllowedMove(prev.state, row.state), `${k}: ${prev.state} → ${row.state}`).toBe(true);
      if (isTerminal(prev.state) && !exits.has(k)) {
        // A terminal operation is frozen: not only its state, every field.
        expect(row, `${k} changed in terminal state ${prev.state}`).toEqual(prev);
      }
      expect([row.seq, row.digest], `${k}: identity`).toEqual([prev.seq, prev.digest]);
      // Only a claim moves it (the model's epoch, compared below, moves only in the claim command).
      expect(row.epoch - prev.epoch, `${k}: epoch ${prev.epoch} → ${row.epoch}`).toBeGreaterThanOrEqual(0);
    } else {
      expect([row.state, row.epoch, row.digest], `${k}: new`).toEqual(['queued', 0, op.digest]);
    }

    // The store agrees with the model.
    expect(
      {
        state: row.state,
        epoch: row.epoch,
        attempt: row.attempt,
        leaseExpiries: row.leaseExpiries,
        cancel: row.cancel,
        digest: row.digest,
        leaseOwner: row.leaseOwner,
        leaseExpiresAt: row.leaseExpiresAt,
        runAfter: row.state === 'queued' ? row.runAfter : null,
      },
      k,
    ).toEqual({
      state: op.state,
      epoch: op.epoch,
      attempt: op.attempt,
      leaseExpiries: op.leaseExpiries,
      cancel: op.cancel,
      digest: op.digest,
      leaseOwner: op.state === 'running' ? op.leaseOwner : null,
      leaseExpiresAt: op.state === 'running' ? op.leaseExpiresAt : null,
      runAfter: op.state === 'queued' ? op.runAfter : null,
    });

    // A cancel is answered by state: `requested` is an open question only while the operation
    // runs and can still be stopped; leaving `running` answers it (`cancelled`, else too late).
    if (row.cancel === 'requested') {
      expect(['running', 'cancelled'], `${k}: an unanswered cancel in state ${row.state}`).toContain(
        row.state,
      );
    }

    // One live lease per running operation, none otherwise.
    const liveLeases = m.leases.filter((l) => keyOf(l.ref) === k && live(m, l));
    expect(liveLeases.length, `${k}: live leases`).toBe(row.state === 'running' ? 1 : 0);
    if (row.state === 'running') expect(liveLeases[0]!.ref.epoch).toBe(row.epoch);

    const effects = await store.effectList(row);
    expect(Object.fromEntries(effects.map((e) => [e.name, e.state])), `${k}: effects`).toEqual(
      Object.fromEntries(op.effects),
    );
    for (const e of effects) expect(e.key).toBe(effectKey(op, e.name));
    if (row.state === 'cancelled') {
      expect(
        effects.filter((e) => e.state === 'pending' || e.state === 'committed'),
        `${k} is cancelled with an effect that may have happened`,
      ).toEqual([]);
    }
  }

  await expectCountersTrue(store, rows);
  for (const cls of CLASSES) {
    for (const [tenant, cap] of Object.entries(MAX_RUNNING)) {
      const running = rows.filter(
        (x) => x.tenant === tenant && x.class === cls && x.state === 'running',
      ).length;
      expect(running, `${tenant}/${cls} running at ${now}`).toBeLessThanOrEqual(cap);
    }
  }
  m.snapshot = current;
}
