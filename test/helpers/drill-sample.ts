/** Drill samples for tests that build their own runs. */
import type { Sample } from '../../src/drill/types.js';

/** A sample at `t` with nothing running, waiting, open or counted, and `over` on top. */
export function zeroSample(t: number, over: Partial<Sample> = {}): Sample {
  return {
    t,
    workersAlive: 0,
    running: {},
    waiting: {},
    dbConnections: 0,
    tempBytes: 0,
    providerCalls: 0,
    providerCharges: 0,
    rejections: {},
    retryDenials: 0,
    northLatencyMs: [],
    ...over,
  };
}
