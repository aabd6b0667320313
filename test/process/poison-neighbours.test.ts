/**
 * A poison operation, whose handler crashes its worker process every time it runs, beside
 * operations that do nothing wrong: real worker processes, each taken down by the handler's
 * uncaught exception, the next one started in its place. The poison ends `dead` (`crash-loop`)
 * after three lease expiries; the operations that shared its crashes succeed. Until operations
 * on their last chance were kept apart, the rescue returned the four together, the next claim ran
 * them together again, and all four were parked at the third crash.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { processRig, type Rig } from '../helpers/process-rig.js';
import type { WorkerProcess } from '../helpers/worker-process.js';

const NEIGHBOURS = ['N1', 'N2', 'N3'];
/** A failure guard only: three crashes, then the neighbours one by one, take a few seconds. */
const WORKERS_AT_MOST = 10;

describe.each(['sqlite', 'postgres'] as const)('a poison operation on %s', (store) => {
  let rig: Rig | undefined;
  afterEach(async () => {
    await rig?.close();
    rig = undefined;
  });

  it('is parked alone: the operations beside it when it crashed its workers succeed', async () => {
    rig = await processRig({ store });
    const runsNothing = () => {
      throw new Error('the test process runs no worker');
    };
    for (const kind of ['poison', 'neighbour'])
      rig.h.sluice.define(kind, { input: z.object({}), limits: { maxAttempts: 10 }, run: runsNothing });
    // Submitted before any worker runs: the first claim (four slots) takes the four together.
    await rig.h.sluice.submit({ tenant: 'North', id: 'P', kind: 'poison', input: {} });
    for (const id of NEIGHBOURS)
      await rig.h.sluice.submit({ tenant: 'North', id, kind: 'neighbour', input: {} });

    const ended = Promise.all(
      ['P', ...NEIGHBOURS].map((id) => rig!.h.sluice.wait({ tenant: 'North', id }, { timeoutMs: 90_000 })),
    );
    let settled = false;
    void ended.then(
      () => (settled = true),
      () => (settled = true),
    );
    const workers: WorkerProcess[] = [];
    const env = { POISON: '1', SLOTS: '4', LEASE_MS: '800', RESCUE_MS: '100' };
    while (!settled) {
      expect(workers.length, 'workers started before every operation ended').toBeLessThan(WORKERS_AT_MOST);
      const worker = await rig.start(`w${workers.length + 1}`, { env });
      workers.push(worker);
      // Taken down by the poison, or the operations all end under it.
      await Promise.race([worker.exited, ended]);
    }
    const [poison, ...neighbours] = await ended;
    expect(poison).toMatchObject({ state: 'dead', error: { code: 'crash-loop' } });
    expect(neighbours.map((n) => [n.id, n.state])).toEqual(NEIGHBOURS.map((id) => [id, 'succeeded']));
    // Each worker taken down ran the poison, and exited with its uncaught exception.
    const crashed = workers.filter((w) => !w.alive);
    expect(crashed.length).toBeGreaterThan(0);
    for (const w of crashed) {
      expect((await w.exited).code).toBe(1);
      expect(w.events.filter((e) => e.event === 'poison')).toHaveLength(1);
    }
    // The first crash took the three neighbours with it: one claim of four slots had taken all four.
    expect(crashed[0]!.events.filter((e) => e.event === 'neighbour')).toHaveLength(3);
  });
});
