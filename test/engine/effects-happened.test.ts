/**
 * An operation that ends `failed` or `dead` after some of its effects happened says which, in its
 * error's message and `details.effectsHappened`: a charge that went through before a permanent
 * error, a deadline or the last attempt must not read as if nothing had happened, since a new
 * operation for the same work would charge again. One that failed before any effect reads as it
 * always did.
 */
import { afterEach, expect, it } from 'vitest';
import { z } from 'zod';
import { type ErrorRecord, Permanent, Retryable } from '../../src/index.js';
import { type Harness, harness } from '../helpers/engine.js';

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

/** Kind `job`: charges (unless `charge` is false), then ends as `end` says. */
async function run(
  input: { charge: boolean; end: 'permanent' | 'deadline' | 'retryable' },
  submit: { deadlineMs?: number } = {},
): Promise<{ state: string; error: ErrorRecord | null }> {
  h = await harness();
  h.sluice.define('job', {
    input: z.object({ charge: z.boolean(), end: z.enum(['permanent', 'deadline', 'retryable']) }),
    limits: { maxAttempts: 1 },
    async run({ charge, end }, ctx) {
      if (charge) await ctx.effect('charge', { call: async () => ({ id: 'ch_1' }) });
      if (end === 'permanent') throw new Permanent('the invoice was voided', { code: 'invoice-void' });
      if (end === 'retryable') throw new Retryable('the ledger answered 503');
      // Waits for the deadline, which aborts the attempt.
      await new Promise((_resolve, reject) =>
        ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true }),
      );
    },
  });
  const worker = h.worker();
  worker.start();
  await h.sluice.submit({ tenant: 'North', id: 'op', kind: 'job', input, ...submit });
  const ended = await h.sluice.wait({ tenant: 'North', id: 'op' }, { timeoutMs: 20_000 });
  return { state: ended.state, error: ended.error };
}

it('a permanent error after a charge: failed, naming the charge', async () => {
  expect(await run({ charge: true, end: 'permanent' })).toEqual({
    state: 'failed',
    error: {
      code: 'invoice-void',
      message: 'the invoice was voided (after an effect that happened: charge)',
      outcome: 'permanent',
      details: { effectsHappened: ['charge'] },
    },
  });
});

it('the deadline after a charge: failed deadline-exceeded, naming the charge', async () => {
  const { state, error } = await run({ charge: true, end: 'deadline' }, { deadlineMs: 500 });
  expect([state, error?.code, error?.details]).toEqual([
    'failed',
    'deadline-exceeded',
    { effectsHappened: ['charge'] },
  ]);
  expect(error?.message).toMatch(/\(after an effect that happened: charge\)$/);
});

it('the last attempt after a charge: dead, its details keeping the last error beside the charge', async () => {
  const { state, error } = await run({ charge: true, end: 'retryable' });
  expect([state, error?.code]).toEqual(['dead', 'attempts-exhausted']);
  expect(error?.details).toMatchObject({
    lastError: { code: 'retryable-failure', message: 'the ledger answered 503' },
    effectsHappened: ['charge'],
  });
});

it('a permanent error before any effect: failed as it always was', async () => {
  expect(await run({ charge: false, end: 'permanent' })).toEqual({
    state: 'failed',
    error: { code: 'invoice-void', message: 'the invoice was voided', outcome: 'permanent' },
  });
});
