/**
 * The history of a run of `charge` operations, checked the way Jepsen's total-queue checker
 * checks a queue's: nothing lost, nothing invented, no effect twice. The process tests that kill
 * workers or the database under load (the tortures, the outage) end with it.
 */
import { expect } from 'vitest';
import type { Operation, Sluice } from '../../src/index.js';
import type { ProviderStub } from '../../src/testing/index.js';
import { chargeKey } from './process-rig.js';

/** An operation the test had accepted, and what its one charge must carry. */
export interface ExpectedCharge {
  tenant: string;
  id: string;
  invoice: number;
  amount_cents: number;
}

export interface ChargedOnce {
  /** Every stored operation, by `tenant/id`. */
  stored: Map<string, Operation>;
  /** Each expected operation's attempt outcomes, in order, by `tenant/id`. */
  outcomes: Map<string, string[]>;
}

/** Every operation the store holds, by `tenant/id`, read through the API page by page. */
export async function storedOperations(sluice: Sluice): Promise<Map<string, Operation>> {
  const stored = new Map<string, Operation>();
  for (let cursor: string | undefined; ; ) {
    const page = await sluice.list({ limit: 500, cursor });
    for (const op of page.operations) stored.set(`${op.tenant}/${op.id}`, op);
    if (!page.nextCursor) return stored;
    cursor = page.nextCursor;
  }
}

/**
 * Asserts, over the store and the provider's ledger:
 * - lost: every expected operation is stored and `succeeded`;
 * - unexpected: no other operation is stored, no charge was made under another key;
 * - duplicate effects: no key was charged twice, and each operation's one charge carries its
 *   invoice and amount and is the one its result, its committed journal row and its one
 *   `succeeded` attempt (the last) name.
 */
export async function expectChargedOnce(
  sluice: Sluice,
  stub: ProviderStub,
  expected: Map<string, ExpectedCharge>,
): Promise<ChargedOnce> {
  const stored = await storedOperations(sluice);
  expect([...expected.keys()].filter((k) => !stored.has(k))).toEqual([]); // lost
  expect([...stored.keys()].filter((k) => !expected.has(k))).toEqual([]); // unexpected
  expect(
    [...stored.values()].filter((o) => o.state !== 'succeeded').map((o) => [o.id, o.state, o.error]),
  ).toEqual([]);

  const ledger = stub.ledger();
  const keys = new Set([...expected.values()].map((s) => chargeKey(s.tenant, s.id)));
  expect(ledger.filter((c) => !keys.has(c.key)).map((c) => c.key)).toEqual([]); // unexpected charges
  expect(stub.doubleCharges()).toEqual([]);

  const outcomes = new Map<string, string[]>();
  const wrong: string[] = [];
  for (const [k, s] of expected) {
    const op = (await sluice.get(s, { include: ['attempts', 'effects'] }))!;
    const charges = stub.chargesFor(chargeKey(s.tenant, s.id));
    const ended = op.attempts?.map((a) => a.outcome) ?? [];
    outcomes.set(k, ended);
    const charge = charges[0];
    const ok =
      charges.length === 1 &&
      charge!.params.tenant === s.tenant &&
      charge!.params.invoice === s.invoice &&
      charge!.amount_cents === s.amount_cents &&
      (op.result as { charge?: string }).charge === charge!.id &&
      ended.filter((o) => o === 'succeeded').length === 1 &&
      ended.at(-1) === 'succeeded' &&
      op.effects?.length === 1 &&
      op.effects[0]!.state === 'committed' &&
      op.effects[0]!.reference === charge!.id;
    if (!ok) {
      wrong.push(
        `${k}: ${charges.length} charges, attempts ${ended.join(',')}, effects ${JSON.stringify(op.effects)}`,
      );
    }
  }
  expect(wrong).toEqual([]);
  expect(ledger).toHaveLength(expected.size);
  return { stored, outcomes };
}
