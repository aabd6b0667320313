/**
 * The worker's channel to the store for one class (runtime/class-channel.ts), over a store whose
 * calls a test holds open: which calls leave when, and what they carry.
 */
import { describe, expect, it } from 'vitest';
import { ClassChannel } from '../../src/runtime/class-channel.js';
import type { Store } from '../../src/store/store.js';
import type { ClaimParams, ClaimResult, FinishParams, OperationRow } from '../../src/store/types.js';

interface Call {
  method: 'attemptFinishMany' | 'operationClaimMany' | 'attemptFinishAndClaim';
  ends: number;
  limit: number;
  answer(rows?: number): void;
  fail(error: unknown): void;
}

/** A store that records each hot-loop call and answers it when the test says so. */
function heldStore(): { store: Store; calls: Call[] } {
  const calls: Call[] = [];
  const claimOf = (p: ClaimParams, rows: number): ClaimResult => ({
    now: 0,
    rows: Array.from({ length: Math.min(rows, p.limit) }, (_, i) => ({ id: `r${i}` }) as OperationRow),
  });
  const held = <T>(
    method: Call['method'],
    ends: FinishParams[],
    p: ClaimParams | undefined,
    make: (rows: number) => T,
  ) =>
    new Promise<T>((resolve, reject) => {
      calls.push({
        method,
        ends: ends.length,
        limit: p?.limit ?? 0,
        answer: (rows = 0) => resolve(make(rows)),
        fail: reject,
      });
    });
  const store = {
    attemptFinishMany: (items: FinishParams[]) =>
      held('attemptFinishMany', items, undefined, () => items.map(() => true)),
    operationClaimMany: (p: ClaimParams) => held('operationClaimMany', [], p, (rows) => claimOf(p, rows)),
    attemptFinishAndClaim: (items: FinishParams[], p: ClaimParams) =>
      held('attemptFinishAndClaim', items, p, (rows) => ({
        finished: items.map(() => true),
        claim: claimOf(p, rows),
      })),
  } as unknown as Store;
  return { store, calls };
}

const end = (id: string): FinishParams => ({
  lease: { tenant: 'T', id, epoch: 1 },
  outcome: 'succeeded',
  result: null,
});

/** A channel for `slots` slots of which `running` are taken; `refill` says whether ends claim. */
function channel(store: Store, o: { slots: number; running: number; refill: boolean }) {
  const launched: string[] = [];
  const state = { running: o.running };
  const ch = new ClassChannel(store, {
    room: (ending) => o.slots - state.running + ending,
    refill: () => o.refill,
    claimParams: (limit) => ({ class: 'default', owner: 'w', limit, leaseMs: 30_000 }),
    launch: (result) => {
      state.running += result.rows.length;
      launched.push(...result.rows.map((r) => r.id));
    },
  });
  return { ch, launched, state };
}

const settled = () => new Promise((resolve) => setImmediate(resolve));

describe('the class channel', () => {
  it('writes ends made in one turn together, with the claim for their slots', async () => {
    const { store, calls } = heldStore();
    const { ch, launched } = channel(store, { slots: 4, running: 4, refill: true });
    const written = ['a', 'b', 'c'].map((id) => ch.finish(end(id), false));
    await settled();
    expect(calls.map((c) => [c.method, c.ends, c.limit])).toEqual([['attemptFinishAndClaim', 3, 3]]);
    calls[0]!.answer(2);
    expect(await Promise.all(written)).toEqual([0, 1, 2].map(() => ({ accepted: true, refilled: true })));
    expect(launched).toEqual(['r0', 'r1']);
  });

  it('writes at most 500 ends per call; the rest go in the next', async () => {
    const { store, calls } = heldStore();
    const { ch } = channel(store, { slots: 600, running: 501, refill: false });
    const written = Array.from({ length: 501 }, (_, i) => ch.finish(end(`e${i}`), false));
    await settled();
    expect(calls.map((c) => [c.method, c.ends])).toEqual([['attemptFinishMany', 500]]);
    calls[0]!.answer();
    await settled();
    expect(calls.map((c) => [c.method, c.ends])[1]).toEqual(['attemptFinishMany', 1]);
    calls[1]!.answer();
    expect((await Promise.all(written)).every((w) => w.accepted)).toBe(true);
  });

  it('sends a claim at once while ends without a claim are being written', async () => {
    const { store, calls } = heldStore();
    const { ch } = channel(store, { slots: 4, running: 2, refill: false });
    const written = ch.finish(end('a'), false);
    await settled();
    expect(calls.map((c) => c.method)).toEqual(['attemptFinishMany']);
    const claimed = ch.claim();
    // Not behind the ends: the claim is in the store before they are answered.
    expect(calls.map((c) => [c.method, c.limit])).toEqual([
      ['attemptFinishMany', 0],
      ['operationClaimMany', 2],
    ]);
    calls[1]!.answer(1);
    expect(await claimed).toEqual({ limit: 2, claimed: 1, contended: false });
    calls[0]!.answer();
    expect(await written).toEqual({ accepted: true, refilled: false });
  });

  it('after a failed call of ends and claim, writes ends alone until a claim succeeds', async () => {
    const { store, calls } = heldStore();
    const { ch, state } = channel(store, { slots: 4, running: 4, refill: true });
    const first = ch.finish(end('a'), false);
    await settled();
    expect(calls.map((c) => c.method)).toEqual(['attemptFinishAndClaim']);
    const broken = new Error('the claim is broken');
    calls[0]!.fail(broken);
    await expect(first).rejects.toBe(broken);
    // The end is written again (the worker retries it): this time without the claim.
    const again = ch.finish(end('a'), false);
    await settled();
    expect(calls.map((c) => c.method)[1]).toBe('attemptFinishMany');
    calls[1]!.answer();
    expect(await again).toEqual({ accepted: true, refilled: false });
    state.running = 3; // the attempt released its slot
    // A claim of its own succeeds: ends carry claims again.
    const claimed = ch.claim();
    calls[2]!.answer(0);
    await claimed;
    const later = ch.finish(end('b'), false);
    await settled();
    expect(calls.map((c) => c.method)[3]).toBe('attemptFinishAndClaim');
    calls[3]!.answer(0);
    expect(await later).toEqual({ accepted: true, refilled: true });
  });

  it('keeps one claim in flight: ends meanwhile go alone, a second claim waits for the first', async () => {
    const { store, calls } = heldStore();
    const { ch } = channel(store, { slots: 4, running: 0, refill: true });
    const first = ch.claim();
    const second = ch.claim();
    const written = ch.finish(end('a'), false);
    await settled();
    expect(calls.map((c) => [c.method, c.ends, c.limit])).toEqual([
      ['operationClaimMany', 0, 4],
      ['attemptFinishMany', 1, 0],
    ]);
    calls[0]!.answer(3);
    expect(await first).toEqual({ limit: 4, claimed: 3, contended: false });
    // The second claim left when the first returned, counting what the first started.
    expect(calls.map((c) => [c.method, c.limit])[2]).toEqual(['operationClaimMany', 1]);
    calls[2]!.answer(0);
    expect(await second).toEqual({ limit: 1, claimed: 0, contended: false });
    calls[1]!.answer();
    expect(await written).toEqual({ accepted: true, refilled: false });
    await ch.idle();
  });
});
