/**
 * Seeded randomness for the tests that draw their faults and inputs at random: a run prints its
 * seed, and the same seed replays the same choices (not the OS's timing).
 */

/** mulberry32: a small seeded PRNG, uniform in [0, 1). */
export function prng(seed: number): () => number {
  let s = seed | 0;
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** A chaos loop's draws from one seed. */
export function chaos(seed: number) {
  const random = prng(seed);
  /** An integer in [lo, hi]. */
  const between = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
  return {
    random,
    between,
    /** Pacing: WHEN the next fault, wave or sample happens. Never used to wait for an outcome. */
    pause: (lo: number, hi: number) => new Promise<void>((r) => setTimeout(r, between(lo, hi))),
  };
}
