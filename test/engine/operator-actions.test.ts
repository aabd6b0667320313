/**
 * An operator's redrive and reconcile through the engine, on a real SQLite store and worker: what
 * they send back to the queue runs again even when its deadline passed while it was parked, and a
 * reconcile refuses what would hide a possible charge or misread an outcome.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isSluiceError } from '../../src/core/errors/index.js';
import { Ambiguous } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { settleOnFakeClock } from '../helpers/drive.js';
import { type Harness, harness } from '../helpers/engine.js';

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const who = { by: 'ops@example.com', reason: 'checked at the provider' };

async function refusal(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (error) {
    if (isSluiceError(error)) return `${error.code}: ${error.message}`;
    throw error;
  }
  return 'accepted';
}

describe('an operator sending an operation back to the queue after its deadline passed', () => {
  it('redrive: the handler runs again and the operation succeeds', async () => {
    const clock = new FakeClock();
    h = await harness({ clock });
    let healthy = false;
    const runs: number[] = [];
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 1, deadlineMs: 60_000 },
      run: (_input, ctx) => {
        runs.push(ctx.attempt);
        if (!healthy) throw new Error('the dependency is down');
        return 'done';
      },
    });
    const ref = { tenant: 'North', id: 'd1' };
    await h.sluice.submit({ ...ref, kind: 'job', input: {} });
    const worker = h.worker();
    worker.start();
    expect((await h.sluice.wait(ref)).state).toBe('dead');
    // An hour later someone looks: the operation's minute is long gone.
    clock.advance(3_600_000);
    healthy = true;
    await h.sluice.redrive(ref, who);
    const done = await h.sluice.wait(ref);
    expect([done.state, done.result]).toEqual(['succeeded', 'done']);
    expect(runs).toEqual([1, 1]);
  });

  it('reconcile requeue: the handler runs again and gets the committed effect from the journal', async () => {
    const clock = new FakeClock();
    // Jitter at 90% of the ceiling: the second retry would start past the deadline, which parks
    // the operation with its effect's outcome unknown (test/engine/deadlines.test.ts).
    h = await harness({ clock, sluice: { random: () => 0.9 } });
    let calls = 0;
    h.sluice.define('charge', {
      input: z.object({}),
      limits: { backoff: { baseMs: 1000, capMs: 1000 } },
      run: (_input, ctx) =>
        ctx.effect<{ id: string }>('charge', {
          call: async () => {
            calls++;
            throw new Ambiguous('timed out after sending');
          },
        }),
    });
    const ref = { tenant: 'North', id: 'c1' };
    h.worker().start();
    await h.sluice.submit({ ...ref, kind: 'charge', input: {}, deadlineMs: 1500 });
    const parked = await settleOnFakeClock(h.sluice, clock, ref);
    expect([parked.state, parked.error?.code]).toEqual(['needs_reconciliation', 'deadline-exceeded']);
    const sent = calls;
    clock.advance(3_600_000);
    await h.sluice.reconcile(ref, {
      ...who,
      effects: [{ name: 'charge', outcome: 'committed', result: { id: 'ch_1' }, reference: 'ch_1' }],
      resolution: 'requeue',
    });
    const done = await h.sluice.wait(ref);
    expect([done.state, done.result]).toEqual(['succeeded', { id: 'ch_1' }]);
    expect(calls).toBe(sent);
  });
});

describe('a reconcile the engine refuses before writing anything', () => {
  /** An operation parked with its `charge` effect pending. */
  async function parked(): Promise<{ tenant: string; id: string }> {
    h = await harness();
    h.sluice.define('charge', {
      input: z.object({}),
      limits: { backoff: { baseMs: 0, capMs: 0 } },
      run: (_input, ctx) =>
        ctx.effect('charge', {
          retentionMs: 1, // past the window at once: no blind resend, the operation parks
          call: async () => {
            throw new Ambiguous('timed out after sending');
          },
        }),
    });
    const ref = { tenant: 'North', id: 'p1' };
    await h.sluice.submit({ ...ref, kind: 'charge', input: {} });
    const worker = h.worker();
    worker.start();
    expect((await h.sluice.wait(ref)).state).toBe('needs_reconciliation');
    await worker.stop();
    return ref;
  }

  it('ending it succeeded or failed while an effect it does not name is still pending', async () => {
    const ref = await parked();
    for (const resolution of ['succeeded', 'failed'] as const)
      expect(await refusal(h!.sluice.reconcile(ref, { ...who, resolution }))).toMatch(
        /^invalid-argument: the outcome of effect charge is unknown/,
      );
    const still = await h!.sluice.get(ref, { include: ['effects'] });
    expect([still?.state, still?.effects?.[0]?.state]).toEqual(['needs_reconciliation', 'pending']);
    // Named, it ends as asked.
    const ended = await h!.sluice.reconcile(ref, {
      ...who,
      effects: [{ name: 'charge', outcome: 'absent' }],
      resolution: 'failed',
    });
    expect(ended.state).toBe('failed');
  });

  it('an outcome, reference or resolution outside what the API takes', async () => {
    const ref = await parked();
    const cases: Array<[string, unknown]> = [
      ['a misspelt outcome', { effects: [{ name: 'charge', outcome: 'comitted' }], resolution: 'requeue' }],
      [
        'a reference of 501 characters',
        {
          effects: [{ name: 'charge', outcome: 'committed', reference: 'r'.repeat(501) }],
          resolution: 'requeue',
        },
      ],
      [
        'a reference that is not text',
        { effects: [{ name: 'charge', outcome: 'committed', reference: 7 }], resolution: 'requeue' },
      ],
      [
        'an absent effect with a result',
        { effects: [{ name: 'charge', outcome: 'absent', result: 1 }], resolution: 'requeue' },
      ],
      ['an effect without a name', { effects: [{ outcome: 'absent' }], resolution: 'requeue' }],
      ['a misspelt resolution', { resolution: 'done' }],
    ];
    for (const [what, given] of cases)
      expect([
        what,
        await refusal(h!.sluice.reconcile(ref, { ...who, ...(given as object) } as never)),
      ]).toEqual([what, expect.stringMatching(/^invalid-argument: /)]);
    const still = await h!.sluice.get(ref, { include: ['effects', 'events'] });
    expect([still?.state, still?.effects?.[0]?.state, still?.events]).toEqual([
      'needs_reconciliation',
      'pending',
      [],
    ]);
    // At the edge: 500 characters are kept.
    const kept = await h!.sluice.reconcile(ref, {
      ...who,
      effects: [{ name: 'charge', outcome: 'committed', result: { id: 'x' }, reference: 'r'.repeat(500) }],
      resolution: 'succeeded',
    });
    expect(kept.state).toBe('succeeded');
  });
});
