/**
 * The drill's stall check (drill/invariants/service.ts) on made-up attempt histories, and the
 * stall phase's floor (drill/config.ts): a timeout the engine does not enforce must be seen even
 * in the shortest run.
 */
import { describe, expect, it } from 'vitest';
import { MIN_DURATION_MS, MIN_STALL_MS, planPhases } from '../../src/drill/config.js';
import type { Evidence } from '../../src/drill/invariants/evidence.js';
import { stallBounded } from '../../src/drill/invariants/service.js';
import type { AttemptRow } from '../../src/store/types.js';

/** Evidence of one charge operation whose attempts are `attempts` (ms on the drill's clock). */
function evidence(stallMs: number, attempts: Array<{ start: number; end: number; code?: string }>): Evidence {
  const rows = attempts.map(
    (a, i) =>
      ({
        attempt: i + 1,
        startedAt: a.start,
        endedAt: a.end,
        outcome: 'retry',
        error: a.code ? { code: a.code, message: '' } : null,
      }) as AttemptRow,
  );
  return {
    t0: 0,
    phases: [{ name: 'stall', startMs: 1000, endMs: 1000 + stallMs }],
    chargeAttempts: new Map([['north/c1', rows]]),
  } as unknown as Evidence;
}

describe('the drill stall check', () => {
  it('gives the stall twice the longest an attempt may last, whatever the duration', () => {
    const stall = planPhases('all', MIN_DURATION_MS).find((p) => p.name === 'stall');
    expect(stall?.ms).toBe(MIN_STALL_MS);
    expect(planPhases('all', 60_000).find((p) => p.name === 'stall')?.ms).toBe(9000);
  });

  it('fails an attempt the timeout did not stop, and counts only attempt-timeout ends as timeouts', () => {
    const stopped = stallBounded(
      evidence(MIN_STALL_MS, [{ start: 1100, end: 2600, code: 'attempt-timeout' }]),
    );
    expect(stopped?.pass).toBe(true);
    // Not stopped: it ran until the stall let it go, past the 3 s bound.
    const unenforced = stallBounded(
      evidence(MIN_STALL_MS, [
        { start: 1100, end: 2600, code: 'attempt-timeout' },
        { start: 1100, end: 1000 + MIN_STALL_MS },
      ]),
    );
    expect(unenforced?.pass).toBe(false);
    // A long attempt that ended otherwise is not a timeout: nothing proven.
    const noTimeout = stallBounded(evidence(MIN_STALL_MS, [{ start: 1100, end: 2590 }]));
    expect(noTimeout?.pass).toBe(false);
  });
});
