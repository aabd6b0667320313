/**
 * Crash points C0–C4 of the effect protocol, each on its own, killed for real: a worker process
 * on a real SQLite file SIGKILLs itself at the point (`SLUICE_FAILPOINTS=C2=kill`…), and a second
 * worker process, with no failpoint, takes over once the first one's lease expires (its rescuer
 * requeues the operation, its claim loop redelivers it).
 *
 * Each case asserts:
 * - the first process really died, by SIGKILL, with no help from the test;
 * - the evidence, read from the store and the stub right after the death, that it died exactly at
 *   that point (what the journal says, how many requests reached the provider);
 * - after redelivery: the operation `succeeded` with the one charge, exactly one charge at the
 *   stub's ledger under the operation's key, and an attempt history that shows the redelivery.
 * The in-process version of the same points is test/engine/crash-points.test.ts.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Operation } from '../../src/index.js';
import type { CRASH_POINTS } from '../../src/testing/index.js';
import { chargeKey, processRig, type Rig, workerOf } from '../helpers/process-rig.js';

const ref = { tenant: 'North', id: 'O7' };
const O7 = { invoice: 7, amount_cents: 5000 };
const LEASE = { LEASE_MS: '800' };

describe('crash points C0–C4 with a real SIGKILL of the worker process', () => {
  let rig: Rig;
  afterEach(async () => rig?.close());

  /** Worker A kills itself at `point` while running O7; returns the operation as A left it. */
  async function killAt(point: keyof typeof CRASH_POINTS): Promise<Operation> {
    rig = await processRig();
    const a = await rig.start('A', { failpoints: `${point}=kill#O7`, env: LEASE });
    await rig.h.sluice.submit({ ...ref, kind: 'charge', input: O7 });
    const exit = await a.exit();
    expect(exit).toEqual({ code: null, signal: 'SIGKILL' });
    // A died before it could report the attempt's end.
    expect(a.events.filter((e) => e.event === 'attempt')).toEqual([]);
    return (await rig.h.sluice.get(ref, { include: ['effects', 'attempts'] }))!;
  }

  /** Worker B, without failpoints, redelivers O7 once A's lease has expired. */
  async function redeliver(): Promise<Operation> {
    await rig.start('B', { env: LEASE });
    await rig.h.sluice.wait(ref, { timeoutMs: 20_000, pollMs: 50 });
    return (await rig.h.sluice.get(ref, { include: ['effects', 'attempts'] }))!;
  }

  /** What every case ends with: one success, one charge, the crash visible in the history. */
  function expectOneChargeAfterRedelivery(op: Operation) {
    const ledger = rig.provider.stub.ledger();
    expect(ledger).toHaveLength(1);
    expect(ledger[0]).toMatchObject({
      key: chargeKey(ref.tenant, ref.id),
      params: { tenant: 'North', ...O7 },
    });
    expect(rig.provider.stub.doubleCharges()).toEqual([]);
    expect(op.state).toBe('succeeded');
    expect(op.result).toEqual({ charge: ledger[0]!.id });
    expect(op.effects?.map((e) => [e.state, e.reference])).toEqual([['committed', ledger[0]!.id]]);
    expect(op.attempts?.map((a) => [workerOf(a.worker), a.outcome])).toEqual([
      ['A', 'lease-expired'],
      ['B', 'succeeded'],
    ]);
  }

  it('C0, before pending: nothing journaled, nothing sent; B charges once', async () => {
    const atDeath = await killAt('C0');
    expect(atDeath.state).toBe('running');
    expect(workerOf(atDeath.lease?.worker)).toBe('A');
    expect(atDeath.effects).toEqual([]);
    expect(rig.provider.stub.calls).toBe(0);

    const op = await redeliver();
    expectOneChargeAfterRedelivery(op);
    expect(rig.provider.stub.calls).toBe(1);
    expect(op.effects?.[0]?.sends).toBe(1);
  });

  it('C1, after pending, before the call: pending and nothing sent; B sends under the same key once', async () => {
    const atDeath = await killAt('C1');
    expect(atDeath.state).toBe('running');
    expect(atDeath.effects?.map((e) => [e.state, e.key])).toEqual([['pending', chargeKey('North', 'O7')]]);
    expect(rig.provider.stub.calls).toBe(0);

    const op = await redeliver();
    expectOneChargeAfterRedelivery(op);
    expect(rig.provider.stub.calls).toBe(1);
    // A's send was recorded before it died, B's after: the journal counts both as possibly sent.
    expect(op.effects?.[0]?.sends).toBe(2);
  });

  it('C2, after the provider charged, before committed: B resends the key and the provider deduplicates', async () => {
    const atDeath = await killAt('C2');
    expect(atDeath.state).toBe('running');
    expect(atDeath.effects?.map((e) => e.state)).toEqual(['pending']);
    expect(rig.provider.stub.calls).toBe(1);
    expect(rig.provider.stub.ledger()).toHaveLength(1);

    const op = await redeliver();
    expectOneChargeAfterRedelivery(op);
    // Two requests under one key, one charge: the same key returned the same charge.
    expect(rig.provider.stub.calls).toBe(2);
    expect(op.effects?.[0]?.sends).toBe(2);
  });

  it('C3, after committed, before completion: B completes from the journal without calling', async () => {
    const atDeath = await killAt('C3');
    expect(atDeath.state).toBe('running');
    expect(atDeath.effects?.map((e) => e.state)).toEqual(['committed']);
    expect(rig.provider.stub.calls).toBe(1);

    const op = await redeliver();
    expectOneChargeAfterRedelivery(op);
    expect(rig.provider.stub.calls).toBe(1);
    expect(op.effects?.[0]?.sends).toBe(1);
  });

  it('C4, after completion, before anyone hears: the result is durable; nothing is redelivered', async () => {
    const atDeath = await killAt('C4');
    expect(atDeath.state).toBe('succeeded');
    expect(atDeath.attempts?.map((a) => [workerOf(a.worker), a.outcome])).toEqual([['A', 'succeeded']]);
    const ledger = rig.provider.stub.ledger();
    expect(ledger).toHaveLength(1);
    expect(atDeath.result).toEqual({ charge: ledger[0]!.id });

    // B runs a later operation to completion; by then it has had every chance to touch O7.
    const b = await rig.start('B', { env: LEASE });
    await rig.h.sluice.submit({
      tenant: 'North',
      id: 'O8',
      kind: 'charge',
      input: { invoice: 8, amount_cents: 100 },
    });
    const o8 = await rig.h.sluice.wait({ tenant: 'North', id: 'O8' }, { timeoutMs: 20_000, pollMs: 50 });
    expect(o8.state).toBe('succeeded');
    // B prints its attempt's event after the end is written: wait for it, then look at them all.
    await b.waitFor((e) => e.event === 'attempt' && e.id === 'O8', "B's attempt event for O8");
    expect(b.events.filter((e) => e.event === 'attempt').map((e) => e.id)).toEqual(['O8']);

    const op = (await rig.h.sluice.get(ref, { include: ['attempts'] }))!;
    expect(op.attempts?.map((a) => a.outcome)).toEqual(['succeeded']);
    expect(rig.provider.stub.chargesFor(chargeKey('North', 'O7'))).toHaveLength(1);
    expect(rig.provider.stub.calls).toBe(2); // O7's one and O8's one
    // The client that never heard asks again with the same id: the same operation answers.
    const again = await rig.h.sluice.submit({ ...ref, kind: 'charge', input: O7 });
    expect(again.created).toBe(false);
    expect(again.operation.state).toBe('succeeded');
  });
});
