/**
 * Fencing, for real: worker process A is frozen with SIGSTOP (a failpoint `stop`) while it holds
 * the lease on O7, so it cannot heartbeat. Its lease expires; worker process B rescues O7 and
 * claims it under the next lease epoch — and is frozen in turn, mid-attempt, so that O7 stays
 * `running` under B's lease. Then A gets SIGCONT and carries on from exactly where it was frozen,
 * believing it still owns O7. Last, B gets SIGCONT and completes O7.
 *
 * Why this proves fencing by the lease epoch: when A writes, O7 is `running` and (in the effect
 * cases) its journal row is `pending`, exactly as when A froze — the only thing that tells A's
 * write from a legitimate one is that A's epoch is no longer the operation's. So each case checks:
 * - A really attempted the write, and it was refused: A itself reports it (`lease-lost` from the
 *   journal write or the heartbeat, `accepted: false` from the completion write);
 * - the refused write changed nothing: the operation, journal and attempt history read the same
 *   before and after A's attempt (not even `updatedAt` moved), still B's;
 * - in total one completion (attempts: A `lease-expired`, B `succeeded`) and one charge at the
 *   stub under O7's key (a second request under the key was deduplicated by the provider);
 * - A and B both shut down cleanly on SIGTERM afterwards.
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Operation } from '../../src/index.js';
import { chargeKey, processRig, type Rig, workerOf } from '../helpers/process-rig.js';
import type { WorkerEvent, WorkerProcess } from '../helpers/worker-process.js';

const ref = { tenant: 'North', id: 'O7' };
const O7 = { invoice: 7, amount_cents: 5000 };
const full = { include: ['attempts', 'effects'] as Array<'attempts' | 'effects'> };
// A's lease is short so it expires while A is frozen; B's is long so it cannot expire while B is.
const SHORT_LEASE = { LEASE_MS: '800' };
const LONG_LEASE = { LEASE_MS: '30000' };

describe('a worker process paused past its lease (SIGSTOP) is fenced when it resumes', () => {
  let rig: Rig;
  afterEach(async () => rig?.close());

  /**
   * A freezes at `pointA`; B takes O7 over and freezes at `pointB`. Resumes A, waits for A's
   * attempt to end, then resumes B and waits for O7 to end. Returns what each step saw.
   */
  async function scenario(pointA: string, pointB: string) {
    rig = await processRig();
    const a = await rig.start('A', { failpoints: `${pointA}=stop#O7`, env: SHORT_LEASE });
    await rig.h.sluice.submit({ ...ref, kind: 'charge', input: O7 });
    await a.stopped();
    const atStopA = (await rig.h.sluice.get(ref, full))!;
    expect(workerOf(atStopA.lease?.worker)).toBe('A');

    const b = await rig.start('B', { failpoints: `${pointB}=stop#O7`, env: LONG_LEASE });
    await b.stopped();
    const atStopB = (await rig.h.sluice.get(ref, full))!;
    expect(atStopB.state).toBe('running');
    expect(workerOf(atStopB.lease?.worker)).toBe('B');
    expect(atStopB.attempts?.map((x) => [workerOf(x.worker), x.outcome])).toEqual([['A', 'lease-expired']]);
    const callsBeforeA = rig.provider.stub.calls;

    a.signal('SIGCONT');
    const aEnd = await a.waitFor((e) => e.event === 'attempt', "A's attempt end");
    const aEffectError = a.events.find((e) => e.event === 'effect-error');
    const afterA = (await rig.h.sluice.get(ref, full))!;
    const callsByA = rig.provider.stub.calls - callsBeforeA;

    b.signal('SIGCONT');
    await rig.h.sluice.wait(ref, { timeoutMs: 20_000, pollMs: 50 });
    const final = (await rig.h.sluice.get(ref, full))!;
    const bEnd = await b.waitFor((e) => e.event === 'attempt', "B's attempt end");
    return { a, b, atStopA, atStopB, aEnd, aEffectError, afterA, callsByA, bEnd, final };
  }

  /** What every case ends with: A's write changed nothing, one completion, one charge. */
  async function expectFenced(s: {
    a: WorkerProcess;
    b: WorkerProcess;
    atStopB: Operation;
    afterA: Operation;
    bEnd: WorkerEvent;
    final: Operation;
  }) {
    expect(s.afterA).toEqual(s.atStopB);
    expect(s.bEnd.report).toEqual({ outcome: 'written', end: 'succeeded', accepted: true, errorCode: null });
    expect(s.final.state).toBe('succeeded');
    expect(s.final.attempts?.map((x) => [workerOf(x.worker), x.outcome])).toEqual([
      ['A', 'lease-expired'],
      ['B', 'succeeded'],
    ]);
    const ledger = rig.provider.stub.ledger();
    expect(ledger.map((c) => c.key)).toEqual([chargeKey('North', 'O7')]);
    expect(rig.provider.stub.doubleCharges()).toEqual([]);
    expect(s.final.result).toEqual({ charge: ledger[0]!.id });
    expect(s.final.effects?.map((e) => [e.state, e.reference])).toEqual([['committed', ledger[0]!.id]]);
    for (const w of [s.a, s.b]) w.signal('SIGTERM');
    expect(await s.a.exit()).toEqual({ code: 0, signal: null });
    expect(await s.b.exit()).toEqual({ code: 0, signal: null });
  }

  it('frozen after the provider charged, before journaling committed: its committed write is refused', async () => {
    const s = await scenario('effect.after-call', 'effect.before-call');
    // A's request charged; B, frozen before resending, holds the journal row pending.
    expect(s.atStopA.effects?.map((e) => e.state)).toEqual(['pending']);
    expect(s.atStopB.effects?.map((e) => [e.state, e.sends])).toEqual([['pending', 2]]);
    // On waking A's handler returns the charge; its `committed` mark rides with its end, both
    // under its old epoch, and the store refuses them together.
    expect(s.callsByA).toBe(0);
    expect(s.aEffectError).toBeUndefined();
    expect(s.aEnd.report).toEqual({ outcome: 'written', end: 'succeeded', accepted: false, errorCode: null });
    // B resent under the same key on waking; the provider answered with A's charge.
    expect(rig.provider.stub.calls).toBe(2);
    await expectFenced(s);
  });

  it('frozen after its handler returned, before completing: its completion write is refused', async () => {
    const s = await scenario('operation.before-complete', 'operation.before-complete');
    expect(s.atStopA.effects?.map((e) => e.state)).toEqual(['committed']);
    expect(s.atStopB.effects?.map((e) => e.state)).toEqual(['committed']);
    // A wakes straight into the completion write for its old epoch; the store refuses it.
    expect(s.aEnd.report).toEqual({ outcome: 'written', end: 'succeeded', accepted: false, errorCode: null });
    expect(s.aEffectError).toBeUndefined();
    // B found the effect committed in the journal and never called the provider.
    expect(rig.provider.stub.calls).toBe(1);
    await expectFenced(s);
  });

  it('frozen after journaling pending, before the call: on waking its handler is aborted', async () => {
    const s = await scenario('effect.before-call', 'effect.before-call');
    expect(s.atStopA.effects?.map((e) => e.state)).toEqual(['pending']);
    expect(s.atStopB.effects?.map((e) => [e.state, e.sends])).toEqual([['pending', 2]]);
    // A wakes and sends under the same key. Its overdue heartbeat is refused (the lease is B's)
    // and aborts the call, or the call completes and its committed write is refused: either way
    // the refusal is `lease-lost`, the handler stops, and A writes nothing.
    expect([s.aEffectError?.code, s.aEffectError?.signalReason]).toContain('lease-lost');
    expect(s.aEnd.report).toEqual({ outcome: 'abandoned' });
    // A's request may have reached the provider before the abort; B's then was deduplicated.
    expect(s.callsByA).toBeLessThanOrEqual(1);
    expect(rig.provider.stub.calls).toBe(1 + s.callsByA);
    await expectFenced(s);
  });
});
