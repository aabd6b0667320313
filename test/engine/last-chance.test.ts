/**
 * Operations on their last chance (one more lease expiry parks them, `crash-loop`) never share a
 * worker process: a crash there would count against both, and an operation that ran beside a
 * poison one would be parked with it. A worker running one passes the others over in its claims,
 * and gives back one a claim took all the same, its attempt unused.
 */
import { afterEach, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { FakeClock } from '../../src/testing/index.js';
import { type Harness, harness } from '../helpers/engine.js';
import { Gate } from '../helpers/gate.js';

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

it('runs one operation on its last chance at a time, beside fresh ones, and gives back the other untouched', async () => {
  const clock = new FakeClock();
  h = await harness({ clock });
  const gate = new Gate();
  const lastChance = new Set(['L1', 'L2']);
  const started: string[] = [];
  const running = new Set<string>();
  let mostAtOnce = 0;
  h.sluice.define('job', {
    input: z.object({}),
    limits: { maxAttempts: 10 },
    async run(_input, ctx) {
      started.push(ctx.id);
      running.add(ctx.id);
      mostAtOnce = Math.max(mostAtOnce, [...running].filter((id) => lastChance.has(id)).length);
      try {
        await gate.wait(ctx.signal);
      } finally {
        running.delete(ctx.id);
      }
      return { id: ctx.id };
    },
  });
  const submit = (id: string) => h!.sluice.submit({ tenant: 'North', id, kind: 'job', input: {} });
  await submit('L1');
  await submit('L2');
  // Two workers died under them: each has two lease expiries, one short of the default three.
  for (let crash = 0; crash < 2; crash++) {
    expect(
      (await h.store.operationClaimMany({ class: 'default', owner: 'gone', limit: 10, leaseMs: 1000 })).rows,
    ).toHaveLength(2);
    clock.advance(1001);
    expect(await h.store.leaseRescue({ maxLeaseExpiries: 3, limit: 100 })).toMatchObject([
      { to: 'queued' },
      { to: 'queued' },
    ]);
  }
  await submit('F1');
  await submit('F2');

  // One claim of four slots takes all four; one of the two on their last chance goes back.
  const worker = h.worker({ defaultSlots: 4 });
  worker.start();
  await vi.waitFor(() => expect(started).toHaveLength(3));
  const row = (id: string) => h!.sluice.get({ tenant: 'North', id });
  const [ran] = started.filter((id) => lastChance.has(id));
  const other = ran === 'L1' ? 'L2' : 'L1';
  expect([...started].sort()).toEqual(['F1', 'F2', ran].sort());
  await vi.waitFor(async () => expect((await row(other))?.state).toBe('queued'));
  // Given back with its attempt unused and its count as it was.
  expect(await h.store.operationGet({ tenant: 'North', id: other })).toMatchObject({
    state: 'queued',
    attempt: 2,
    leaseExpiries: 2,
  });
  expect(started).toHaveLength(3);

  gate.open();
  for (const id of ['L1', 'L2', 'F1', 'F2'])
    expect((await h.sluice.wait({ tenant: 'North', id }, { timeoutMs: 10_000 })).state).toBe('succeeded');
  expect(mostAtOnce).toBe(1);
  expect(started.filter((id) => id === other)).toHaveLength(1);
});
