import { setTimeout as delay } from 'node:timers/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { Permanent } from '../../src/index.js';
import { type Harness, harness } from '../helpers/engine.js';
import { captureLog } from '../helpers/log-capture.js';

describe('an attempt failure in the log', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('keeps type, code, message and stack, not the request an error carries', async () => {
    const { logger, lines } = captureLog('info');
    h = await harness({ sluice: { logger } });
    // The shape of an HTTP client's error: what it sent, credentials included.
    const client = Object.assign(new Error('Request failed with status code 402'), {
      config: { headers: { Authorization: 'Bearer sk_live_SECRET' }, data: '{"card":"4111111111111111"}' },
    });
    const thrown: Record<string, unknown> = {
      client,
      declined: new Permanent('declined', { details: { input: { ssn: '123-45-6789' } } }),
    };
    h.sluice.define('job', {
      input: z.object({ what: z.string() }),
      limits: { maxAttempts: 1 },
      run: ({ what }) => {
        throw thrown[what];
      },
    });
    h.worker().start();
    for (const what of Object.keys(thrown)) {
      await h.sluice.submit({ tenant: 'North', id: what, kind: 'job', input: { what } });
      await h.sluice.wait({ tenant: 'North', id: what });
    }
    const failures = lines.filter((l) => String(l.msg).startsWith('attempt failed'));
    expect(
      failures.map((l) => [
        l.level,
        l.operation,
        (l.error as { type: string }).type,
        (l.error as { code: string }).code,
        (l.error as { message: string }).message,
      ]),
    ).toEqual([
      [40, 'client', 'Error', 'unclassified-error', 'Request failed with status code 402'],
      [30, 'declined', 'Permanent', 'permanent-failure', 'declined'],
    ]);
    const text = JSON.stringify(failures);
    for (const secret of ['sk_live_SECRET', '4111111111111111', '123-45-6789'])
      expect(text).not.toContain(secret);
    expect((failures[0]!.error as { stack: string }).stack).toContain('Request failed');
    // A classified failure is its code and message: no stack for every provider refusal.
    expect((failures[1]!.error as { stack?: string }).stack).toBeUndefined();
  });

  it('says why an attempt was stopped, at info, not what the handler threw on its way out', async () => {
    const { logger, lines } = captureLog('info');
    h = await harness({ sluice: { logger } });
    h.sluice.define('job', {
      input: z.object({}),
      // As docs/handlers.md recommends: a wait that ends when the signal fires (an AbortError).
      run: (_i, ctx) => delay(600_000, undefined, { signal: ctx.signal }),
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'c', kind: 'job', input: {} });
    await vi.waitFor(async () =>
      expect((await h.sluice.get({ tenant: 'North', id: 'c' }))?.state).toBe('running'),
    );
    await h.sluice.cancel({ tenant: 'North', id: 'c' });
    expect((await h.sluice.wait({ tenant: 'North', id: 'c' })).state).toBe('cancelled');
    const about = lines.filter((l) => l.operation === 'c' && String(l.msg).startsWith('attempt'));
    expect(about.map((l) => [l.level, l.msg, l.reason, (l.error as { type: string }).type])).toEqual([
      [30, 'attempt stopped', 'cancel-requested', 'AbortError'],
    ]);
  });
});
