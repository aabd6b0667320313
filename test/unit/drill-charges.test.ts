/**
 * The drill's one-charge invariant on made-up evidence (drill/invariants/work.ts): a charge the
 * ledger holds must be the one the operation's journal records, and a parked operation's charge
 * must show in its journal, not only be at most one.
 */
import { describe, expect, it } from 'vitest';
import type { OperationState } from '../../src/core/states.js';
import type { Evidence } from '../../src/drill/invariants/evidence.js';
import { oneChargePerOperation } from '../../src/drill/invariants/work.js';
import { deriveEffectKey } from '../../src/effects/effect-key.js';
import type { EffectRow, EffectState, OperationRow } from '../../src/store/types.js';
import type { Charge } from '../../src/testing/provider-stub.js';

interface Case {
  id: string;
  state: OperationState;
  /** The ledger's charge for it, by id; none when absent. */
  charged?: string;
  journal?: { state: EffectState; reference?: string | null };
}

/** Evidence of charge operations of tenant north, invoice n for the nth case. */
function evidence(cases: Case[]): Evidence {
  const operations = cases.map(
    (c, i) =>
      ({ tenant: 'north', id: c.id, kind: 'charge', state: c.state, input: { invoice: i } }) as OperationRow,
  );
  const ledger: Charge[] = cases.flatMap((c, i) =>
    c.charged
      ? [
          {
            id: c.charged,
            key: deriveEffectKey('north', c.id, 'charge'),
            params: { tenant: 'north', invoice: i },
            amount_cents: 100,
            createdAt: 0,
            refunded_cents: 0,
          },
        ]
      : [],
  );
  const chargeEffects = new Map<string, EffectRow | undefined>(
    cases.map((c) => [
      `north/${c.id}`,
      c.journal
        ? ({ name: 'charge', state: c.journal.state, reference: c.journal.reference ?? null } as EffectRow)
        : undefined,
    ]),
  );
  return { operations, ledger, chargeEffects } as unknown as Evidence;
}

const paid: Case = {
  id: 'a',
  state: 'succeeded',
  charged: 'ch_a',
  journal: { state: 'committed', reference: 'ch_a' },
};

describe('the drill invariant of one charge per charge operation', () => {
  it('passes a succeeded charge its journal records, and a parked one whose charge its journal shows', () => {
    for (const state of ['committed', 'pending'] as const) {
      const r = oneChargePerOperation(
        evidence([paid, { id: 'b', state: 'needs_reconciliation', charged: 'ch_b', journal: { state } }]),
      );
      expect(r.pass).toBe(true);
      expect(r.figure).toContain('1 charged operations parked for a person');
    }
    const dead = oneChargePerOperation(
      evidence([
        paid,
        { id: 'b', state: 'dead', charged: 'ch_b', journal: { state: 'committed', reference: 'ch_b' } },
      ]),
    );
    expect(dead.pass).toBe(true);
  });

  it('fails a parked operation whose charge its journal does not show', () => {
    for (const journal of [{ state: 'absent' as const }, { state: 'failed' as const }, undefined]) {
      const r = oneChargePerOperation(
        evidence([paid, { id: 'b', state: 'needs_reconciliation', charged: 'ch_b', journal }]),
      );
      expect(r.pass).toBe(false);
      expect(r.detail).toContain('north/b needs_reconciliation: charged (ch_b)');
    }
  });

  it('fails a succeeded operation whose journal holds another charge, or none committed', () => {
    const other = oneChargePerOperation(
      evidence([{ ...paid, journal: { state: 'committed', reference: 'ch_other' } }]),
    );
    expect(other.pass).toBe(false);
    expect(other.detail).toContain("its journal's reference is ch_other");
    const pending = oneChargePerOperation(evidence([{ ...paid, journal: { state: 'pending' } }]));
    expect(pending.pass).toBe(false);
    expect(pending.detail).toContain('its journal says pending');
  });

  it('still fails a failed operation that was charged, and a succeeded one charged twice', () => {
    expect(oneChargePerOperation(evidence([paid, { id: 'b', state: 'failed', charged: 'ch_b' }])).pass).toBe(
      false,
    );
    const twice = evidence([paid]);
    twice.ledger.push({ ...twice.ledger[0]!, id: 'ch_a2' });
    expect(oneChargePerOperation(twice).pass).toBe(false);
  });
});
