/**
 * A retry comes back when its back-off ends, not at the worker's next poll: the worker that wrote
 * it wakes its class then (queue/due-wakes.ts). The worker here polls once a minute, so only that
 * wake can bring the retry back within the test's time.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Retryable } from '../../src/index.js';
import { type Harness, harness } from '../helpers/engine.js';

describe("a retry's wake-up", () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('runs the retry once its back-off has passed, without a poll', async () => {
    h = await harness();
    let calls = 0;
    h.sluice.define('flaky', {
      input: z.object({}),
      limits: { backoff: { baseMs: 200, capMs: 200 } },
      run() {
        calls++;
        if (calls < 3) throw new Retryable('not yet');
        return { calls };
      },
    });
    const worker = h.worker({ pollIntervalMs: 60_000 });
    const submitted = await h.sluice.submit({ tenant: 't', id: 'r1', kind: 'flaky', input: {} });
    expect(submitted.created).toBe(true);
    worker.start();
    const done = await h.sluice.wait({ tenant: 't', id: 'r1' }, { timeoutMs: 10_000, pollMs: 10 });
    expect(done.state).toBe('succeeded');
    expect(done.result).toEqual({ calls: 3 });
    const attempts = (await h.sluice.get({ tenant: 't', id: 'r1' }, { include: ['attempts'] }))?.attempts;
    expect(attempts?.map((a) => a.outcome)).toEqual(['retry', 'retry', 'succeeded']);
  });
});
