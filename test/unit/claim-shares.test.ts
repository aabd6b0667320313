/**
 * The claim reads each candidate tenant's operations only up to its share of the claim
 * (store/sqlite/claim.ts `readShares`, and the PostgreSQL claim of migration 5, which computes
 * the same shares). Property: for any candidates (virtual times with ties, weights, running-cap
 * room) and any number of operations each has ready, the picks are exactly those of the claim as
 * it was — every candidate read up to its room, served by the loop below, written out as it stood —
 * and no more than twice the entries are read.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { readShares, serve, shares } from '../../src/store/sqlite/claim.js';

interface Served {
  vtime: number;
  weight: number;
  ops: number[];
  taken: number;
}

/** The claim's serving loop before shares, kept here as the reference. */
function referenceServe(candidates: Served[], want: number): number[] {
  const picks: number[] = [];
  while (picks.length < want) {
    let best: Served | undefined;
    for (const c of candidates) if (c.taken < c.ops.length && (!best || c.vtime < best.vtime)) best = c;
    if (!best) break;
    picks.push(best.ops[best.taken]!);
    best.taken++;
    best.vtime += 1 / best.weight;
  }
  return picks;
}

const candidate = fc.record({
  vtime: fc.constantFrom(0, 0.5, 1, 1.25, 2, 3),
  weight: fc.constantFrom(0.5, 1, 2, 3),
  room: fc.integer({ min: 0, max: 12 }),
  ready: fc.integer({ min: 0, max: 14 }),
});

describe('claim shares', () => {
  it('picks what reading every candidate up to its room picks, reading no more', () => {
    fc.assert(
      fc.property(
        fc.array(candidate, { minLength: 1, maxLength: 8 }),
        fc.integer({ min: 1, max: 12 }),
        (cs, want) => {
          const ids = (k: number, n: number) => Array.from({ length: n }, (_, i) => k * 100 + i);
          const rooms = cs.map((c) => Math.min(c.room, want));
          // As the claim was: every candidate read up to its room.
          const full = cs.map((c, k) => ({
            vtime: c.vtime,
            weight: c.weight,
            room: rooms[k]!,
            ops: ids(k, Math.min(rooms[k]!, c.ready)),
            taken: 0,
          }));
          const before = referenceServe(full, want);
          // As it is: read up to the share, then (if one came short) the others up to their room.
          let read = 0;
          const lean = cs.map((c, k) => ({
            vtime: c.vtime,
            weight: c.weight,
            room: rooms[k]!,
            ops: [] as number[],
            taken: 0,
          }));
          readShares(lean, want, (c, limit) => {
            const k = lean.indexOf(c);
            const got = ids(k, Math.min(limit, cs[k]!.ready));
            read += got.length;
            return got;
          });
          const after = serve(lean, want).map((p) => p.seq);
          expect(after).toEqual(before);
          expect(lean.map((c) => c.vtime)).toEqual(full.map((c) => c.vtime));
          expect(read).toBeLessThanOrEqual(2 * full.reduce((n, c) => n + c.ops.length, 0));
        },
      ),
      { numRuns: 2000 },
    );
  });

  it('reads a deep backlog only up to the shares: 32 tenants, 32 wanted, 32 read', () => {
    const cs = Array.from({ length: 32 }, () => ({
      vtime: 0,
      weight: 1,
      room: 32,
      ops: [] as number[],
      taken: 0,
    }));
    expect(shares(cs, 32)).toEqual(cs.map(() => 1));
    let read = 0;
    readShares(cs, 32, (_c, limit) => {
      read += limit;
      return Array.from({ length: limit }, (_, i) => i);
    });
    expect(read).toBe(32);
    expect(serve(cs, 32)).toHaveLength(32);
  });
});
