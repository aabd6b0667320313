/**
 * The attempt scope's end signal (runtime/helpers/scope.ts), made on first use: a helper bound
 * before the end is stopped by it with `AttemptEnded`; one bound after it starts already stopped;
 * a scope no helper used closes without making anything.
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { AttemptScope, isAttemptEnded } from '../../src/runtime/helpers/scope.js';

const scope = (attempt: { readonly signal: AbortSignal } = new AbortController()) =>
  new AttemptScope({
    attempt,
    remainingMs: () => Number.POSITIVE_INFINITY,
    timeUp: () => new Error('time up'),
    logs: { log: pino({ enabled: false }) },
  });

describe('the attempt scope', () => {
  it('stops a helper bound before the attempt ended, with AttemptEnded', async () => {
    const s = scope();
    const bound = s.bind();
    expect(bound.signal.aborted).toBe(false);
    await s.close();
    expect(bound.signal.aborted).toBe(true);
    expect(isAttemptEnded(bound.reason())).toBe(true);
  });

  it('gives a helper bound after the attempt ended a signal already fired, with AttemptEnded', async () => {
    const s = scope();
    await s.close();
    const bound = s.bind();
    expect(bound.signal.aborted).toBe(true);
    expect(isAttemptEnded(bound.reason())).toBe(true);
  });

  it("keeps the attempt's own reason when the attempt was aborted first", async () => {
    const attempt = new AbortController();
    const s = scope(attempt);
    const bound = s.bind();
    const why = new Error('lease lost');
    attempt.abort(why);
    await s.close();
    expect(bound.reason()).toBe(why);
  });
});
