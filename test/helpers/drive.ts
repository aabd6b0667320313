/**
 * Drives an operation to a terminal state on a fake clock: whenever it waits for a back-off,
 * the clock jumps to its `runAfter`, so retries happen at once and deterministically.
 */
import { isTerminal, type Operation, type Sluice } from '../../src/index.js';
import type { FakeClock } from '../../src/testing/index.js';

export async function settleOnFakeClock(
  sluice: Sluice,
  clock: FakeClock,
  ref: { tenant: string; id: string },
  maxSteps = 100,
): Promise<Operation> {
  for (let step = 0; step < maxSteps; step++) {
    const op = await sluice.wait(ref, {
      timeoutMs: 10_000,
      pollMs: 10,
      until: (o) => isTerminal(o.state) || (o.state === 'queued' && Date.parse(o.runAfter) > clock.now()),
    });
    if (isTerminal(op.state)) return op;
    clock.set(Date.parse(op.runAfter));
  }
  throw new Error(`operation ${ref.id} did not settle in ${maxSteps} steps`);
}
