/**
 * Many dead operations redriven in one call, on a real SQLite store and worker: the dead letters
 * an outage left go back to the queue and run again once the dependency is back, each recorded as
 * a single redrive is; one that is not dead, not there or not a valid reference is refused in its
 * place without refusing the others; a call that cannot be made redrives nothing.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isSluiceError } from '../../src/core/errors/index.js';
import { MAX_REDRIVE_MANY } from '../../src/index.js';
import { type Harness, harness } from '../helpers/engine.js';

let h: Harness | undefined;
afterEach(async () => {
  await h?.close();
  h = undefined;
});

const who = { by: 'ops@example.com', reason: 'the provider is back' };

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (error) {
    if (isSluiceError(error)) return error.code;
    throw error;
  }
  return 'accepted';
}

describe('redriveMany', () => {
  it("sends every tenant's dead operations back, refuses the rest in their places, and they run again", async () => {
    h = await harness();
    let healthy = false;
    const runs: string[] = [];
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 1 },
      run: (_input, ctx) => {
        runs.push(`${ctx.tenant}/${ctx.id}`);
        if (!healthy) throw new Error('the dependency is down');
        return 'done';
      },
    });
    const dead = [
      { tenant: 'North', id: 'n1' },
      { tenant: 'South', id: 's1' },
      { tenant: 'North', id: 'n2' },
    ];
    for (const ref of dead) await h.sluice.submit({ ...ref, kind: 'job', input: {} });
    const worker = h.worker();
    worker.start();
    for (const ref of dead) expect((await h.sluice.wait(ref)).state).toBe('dead');
    await worker.stop();
    // One that is queued, not dead: it must stay as it is.
    await h.sluice.submit({ tenant: 'North', id: 'waiting', kind: 'job', input: {}, delayMs: 600_000 });

    healthy = true;
    const results = await h.sluice.redriveMany(
      [
        dead[0]!,
        { tenant: 'North', id: 'waiting' },
        dead[1]!,
        { tenant: 'North', id: 'nowhere' },
        { tenant: '', id: 'x' },
        dead[2]!,
        dead[0]!, // named twice: queued by the first
      ],
      who,
    );
    expect(
      results.map((r) => [
        r.tenant,
        r.id,
        r.ok ? r.operation.state : r.error.code,
        r.ok && r.operation.attempt,
      ]),
    ).toEqual([
      ['North', 'n1', 'queued', 0],
      ['North', 'waiting', 'operation-state-invalid', false],
      ['South', 's1', 'queued', 0],
      ['North', 'nowhere', 'operation-not-found', false],
      ['', 'x', 'invalid-argument', false],
      ['North', 'n2', 'queued', 0],
      ['North', 'n1', 'operation-state-invalid', false],
    ]);
    // Each recorded as a single redrive is, with who and why and the error it had.
    for (const ref of dead) {
      const op = await h.sluice.get(ref, { include: ['events'] });
      expect(op?.events).toMatchObject([{ action: 'redrive', ...who }]);
      const detail = op?.events?.[0]?.detail as { previousError?: { code?: string } } | undefined;
      expect(detail?.previousError?.code).toBe('attempts-exhausted');
    }
    expect((await h.sluice.get({ tenant: 'North', id: 'waiting' }, { include: ['events'] }))?.events).toEqual(
      [],
    );

    h.worker().start();
    for (const ref of dead) expect((await h.sluice.wait(ref)).state).toBe('succeeded');
    expect(runs.filter((r) => r !== 'North/waiting').sort()).toEqual(
      ['North/n1', 'North/n1', 'North/n2', 'North/n2', 'South/s1', 'South/s1'].sort(),
    );
  });

  it('redrives nothing when the call cannot be made', async () => {
    h = await harness();
    h.sluice.define('job', {
      input: z.object({}),
      limits: { maxAttempts: 1 },
      run: () => {
        throw new Error('down');
      },
    });
    const ref = { tenant: 'North', id: 'd' };
    await h.sluice.submit({ ...ref, kind: 'job', input: {} });
    const worker = h.worker();
    worker.start();
    expect((await h.sluice.wait(ref)).state).toBe('dead');
    await worker.stop();

    const many = Array.from({ length: MAX_REDRIVE_MANY + 1 }, () => ref);
    expect(await code(h.sluice.redriveMany(many, who))).toBe('invalid-argument');
    expect(await code(h.sluice.redriveMany([ref], { by: ' ', reason: 'r' }))).toBe('invalid-argument');
    expect(await code(h.sluice.redriveMany([ref], { by: 'me', reason: 'x'.repeat(2001) }))).toBe(
      'invalid-argument',
    );
    expect(await code(h.sluice.redriveMany('north/d' as never, who))).toBe('invalid-argument');
    expect((await h.sluice.get(ref))?.state).toBe('dead');
    // At the edge, the call is made.
    const edge = await h.sluice.redriveMany(
      Array.from({ length: MAX_REDRIVE_MANY }, () => ref),
      who,
    );
    expect(edge.filter((r) => r.ok)).toHaveLength(1);
    expect(new Set(edge.filter((r) => !r.ok).map((r) => !r.ok && r.error.code))).toEqual(
      new Set(['operation-state-invalid']),
    );
  });
});
