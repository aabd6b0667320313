/**
 * The worker's channel to the store for one class (runtime/class-channel.ts), over a store whose
 * calls a test holds open: which calls leave when, and what they carry.
 */
import { describe, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors/index.js';
import { ClassChannel } from '../../src/runtime/class-channel.js';
import type { Store } from '../../src/store/store.js';
import type {
  ClaimParams,
  ClaimResult,
  FinishParams,
  LeaseRef,
  OperationRow,
} from '../../src/store/types.js';

interface Call {
  method: 'attemptFinishMany' | 'operationClaimMany' | 'attemptFinishAndClaim';
  ends: number;
  items: FinishParams[];
  limit: number;
  answer(rows?: number): void;
  fail(error: unknown): void;
}

/**
 * A store that records each hot-loop call and answers it when the test says so. `leases`: what
 * `leasesHeld` answers, at once.
 */
function heldStore(leases: LeaseRef[] = []): { store: Store; calls: Call[]; reads: number } {
  const reads = { n: 0 };
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
        items: ends,
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
    leasesHeld: async () => {
      reads.n++;
      return leases;
    },
  } as unknown as Store;
  return {
    store,
    calls,
    get reads() {
      return reads.n;
    },
  };
}

const end = (id: string): FinishParams => ({
  lease: { tenant: 'T', id, epoch: 1 },
  outcome: 'succeeded',
  result: null,
});

/**
 * A channel for `slots` slots of which `running` are taken; `refill` says whether ends claim;
 * `mine`: the operations the worker runs (for the leases it holds).
 */
function channel(store: Store, o: { slots: number; running: number; refill: boolean; mine?: string[] }) {
  const launched: string[] = [];
  const recovered: string[] = [];
  const state = { running: o.running };
  const ch = new ClassChannel(store, {
    room: (ending) => o.slots - state.running + ending,
    refill: () => o.refill,
    claimParams: (limit) => ({ class: 'default', owner: 'w', limit, leaseMs: 30_000 }),
    launch: (result) => {
      state.running += result.rows.length;
      launched.push(...result.rows.map((r) => r.id));
    },
    running: (lease) => (o.mine ?? []).includes(lease.id),
    recovered: (released) => recovered.push(...released.map((l) => l.id)),
  });
  return { ch, launched, state, recovered };
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
    const broken = new StoreError('unavailable', 'the connection went away');
    calls[0]!.fail(broken);
    await expect(first).rejects.toBe(broken);
    // The end is written again (the worker retries it): this time without the claim.
    const again = ch.finish(end('a'), false);
    await settled();
    expect(calls.map((c) => c.method)[1]).toBe('attemptFinishMany');
    calls[1]!.answer();
    expect(await again).toEqual({ accepted: true, refilled: false });
    state.running = 3; // the attempt released its slot
    // A claim of its own succeeds (after looking for what the failed one may have taken): ends
    // carry claims again.
    const claimed = ch.claim();
    await settled();
    calls[2]!.answer(0);
    await claimed;
    const later = ch.finish(end('b'), false);
    await settled();
    expect(calls.map((c) => c.method)[3]).toBe('attemptFinishAndClaim');
    calls[3]!.answer(0);
    expect(await later).toEqual({ accepted: true, refilled: true });
  });

  it('releases what a claim without an answer took before it claims again; ends go alone meanwhile', async () => {
    // The store holds two leases of this worker's: one it runs, one a lost answer took.
    const leases = [
      { tenant: 'T', id: 'mine', epoch: 3 },
      { tenant: 'T', id: 'taken', epoch: 9 },
    ];
    const st = heldStore(leases);
    const { ch, launched, recovered } = channel(st.store, {
      slots: 4,
      running: 1,
      refill: true,
      mine: ['mine'],
    });
    const lost = ch.claim();
    await settled();
    const gone = new Error('Connection terminated unexpectedly');
    st.calls[0]!.fail(gone);
    await expect(lost).rejects.toBe(gone);
    expect(st.reads).toBe(0);
    // Until a claim succeeds, ends do not carry one.
    const written = ch.finish(end('mine'), false);
    await settled();
    expect(st.calls.map((c) => c.method)[1]).toBe('attemptFinishMany');
    st.calls[1]!.answer();
    expect(await written).toEqual({ accepted: true, refilled: false });
    // The next claim reads the leases, releases the one not running here, then claims.
    const next = ch.claim();
    await settled();
    expect(st.reads).toBe(1);
    expect(st.calls[2]!.method).toBe('attemptFinishMany');
    expect(st.calls[2]!.items).toEqual([
      { lease: { tenant: 'T', id: 'taken', epoch: 9 }, outcome: 'released' },
    ]);
    st.calls[2]!.answer();
    await settled();
    expect(recovered).toEqual(['taken']);
    expect(st.calls[3]!.method).toBe('operationClaimMany');
    st.calls[3]!.answer(2);
    expect(await next).toMatchObject({ claimed: 2 });
    expect(launched).toEqual(['r0', 'r1']);
    // Answered: the claim after it reads nothing first.
    const after = ch.claim();
    await settled();
    expect(st.calls[4]!.method).toBe('operationClaimMany');
    st.calls[4]!.answer(0);
    await after;
    expect(st.reads).toBe(1);
  });

  it('writes the ends of a call refused outright one by one, so that one bad end fails no other', async () => {
    const { store, calls } = heldStore();
    const { ch } = channel(store, { slots: 4, running: 4, refill: true });
    const a = ch.finish(end('a'), false);
    const b = ch.finish(end('b'), false);
    await settled();
    expect(calls.map((c) => [c.method, c.ends])).toEqual([['attemptFinishAndClaim', 2]]);
    // Not retryable (a value the driver cannot bind, say): nothing of the call was committed.
    calls[0]!.fail(new TypeError('SQLite3 can only bind numbers, strings, bigints, buffers, and null'));
    await settled();
    expect(calls.slice(1).map((c) => [c.method, c.items.map((i) => i.lease.id)])).toEqual([
      ['attemptFinishMany', ['a']],
    ]);
    calls[1]!.answer();
    await settled();
    expect(calls[2]!.items.map((i) => i.lease.id)).toEqual(['b']);
    const bad = new TypeError('the bad one');
    calls[2]!.fail(bad);
    expect(await a).toEqual({ accepted: true, refilled: false });
    await expect(b).rejects.toBe(bad);
    await ch.idle();
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
