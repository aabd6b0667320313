import { describe, expect, it } from 'vitest';
import { engineMade } from '../../src/core/errors/engine-made.js';
import {
  Ambiguous,
  AttemptTimeout,
  BudgetExhausted,
  CancelRequested,
  CapacityExceeded,
  DeadlineExceeded,
  EffectConflict,
  EffectOutcomeUnknown,
  InputInvalid,
  InvalidArgument,
  LeaseLost,
  MAX_RETRY_AFTER_MS,
  OperationConflict,
  OperationExpired,
  Permanent,
  Retryable,
  StoreError,
  WorkerShutdown,
} from '../../src/core/errors/index.js';
import { classifyFailure, type FailureFacts } from '../../src/retry/classify.js';

const facts = (over: Partial<FailureFacts>): FailureFacts => ({
  error: new Error('x'),
  abortReason: undefined,
  attempt: 1,
  maxAttempts: 5,
  backoff: { baseMs: 200, capMs: 10_000 },
  deadlineInMs: null,
  ...over,
});

describe("a retry's wait", () => {
  it("is at least a failure's retryAfterMs, past the back-off's jitter, and fails at the deadline", () => {
    const retry = (error: unknown, deadlineInMs: number | null = null) =>
      classifyFailure(facts({ error, deadlineInMs }), () => 0.5);
    // The back-off of attempt 1 with jitter 0.5 is 100 ms: a provider's Retry-After of 60 s wins.
    expect(retry(new Retryable('429', { retryAfterMs: 60_000 }))).toMatchObject({
      outcome: 'retry',
      delayMs: 60_000,
    });
    expect(retry(new Ambiguous('reset', { retryAfterMs: 2500 }))).toMatchObject({ delayMs: 2500 });
    expect(retry(new Retryable('429', { retryAfterMs: 10 }))).toMatchObject({ delayMs: 100 });
    expect(retry(new Retryable('429', { retryAfterMs: 60_000 }), 30_000)).toMatchObject({
      outcome: 'failed',
    });
    // Bounded at a day; what is not a wait is ignored.
    expect(retry(new Retryable('429', { retryAfterMs: 1e12 }))).toMatchObject({
      delayMs: MAX_RETRY_AFTER_MS,
    });
    for (const bad of [Number.NaN, -5, Number.POSITIVE_INFINITY])
      expect(retry(new Retryable('429', { retryAfterMs: bad }))).toMatchObject({ delayMs: 100 });
  });

  it('keeps the wait of a failure another copy of the package made, read as the is… helpers read it', () => {
    // What a second copy's Retryable is to this one: its mark, its properties, not this class.
    const foreign = (outcome: string, retryAfterMs: unknown) => {
      const error = Object.assign(new Error('429'), {
        code: 'retryable-failure',
        retryable: true,
        retryAfterMs,
      });
      Object.defineProperty(error, Symbol.for('sluice.outcome'), { value: outcome });
      return error;
    };
    const retry = (error: unknown) => classifyFailure(facts({ error }), () => 0.5);
    expect(retry(foreign('retryable', 60_000))).toMatchObject({ outcome: 'retry', delayMs: 60_000 });
    expect(retry(foreign('ambiguous', 2500))).toMatchObject({ outcome: 'retry', delayMs: 2500 });
    expect(retry(foreign('retryable', 1e12))).toMatchObject({ delayMs: MAX_RETRY_AFTER_MS });
    expect(retry(foreign('retryable', '60000'))).toMatchObject({ delayMs: 100 });
  });
});

describe('classifying the end of an attempt', () => {
  it('maps each outcome to what happens to the operation', () => {
    const end = (f: Partial<FailureFacts>) => classifyFailure(facts(f), () => 0.5).outcome;
    expect(end({ error: new Permanent('no') })).toBe('failed');
    expect(end({ error: new InputInvalid('k', []) })).toBe('failed');
    expect(end({ error: new Retryable('503') })).toBe('retry');
    expect(end({ error: new Ambiguous('reset') })).toBe('retry');
    expect(end({ error: new TypeError('bug') })).toBe('retry');
    // Sluice's refusals of a call the handler made: a bug, dead at once for a fix and a redrive.
    expect(end({ error: new InvalidArgument('effect name "" must match …') })).toBe('dead');
    expect(end({ error: new OperationConflict('North', 'child-1') })).toBe('dead');
    expect(end({ error: new OperationExpired('North', 'child-1') })).toBe('dead');
    // A handler's own Permanent with such a code fails, as any Permanent; a timeout decides first.
    expect(end({ error: new Permanent('bad amount', { code: 'invalid-argument' }) })).toBe('failed');
    expect(end({ error: new InvalidArgument('x'), abortReason: new AttemptTimeout('x', 1000) })).toBe(
      'retry',
    );
    // Its refusals that pass: a store outage, a full queue.
    expect(end({ error: new StoreError('unavailable', 'gone') })).toBe('retry');
    expect(end({ error: new CapacityExceeded('class-queue-full', 1000, 'full') })).toBe('retry');
    expect(end({ error: new EffectConflict('key reused') })).toBe('dead');
    // The engine's own outcomes, from errors it made (a handler may rethrow one it was given).
    expect(end({ error: engineMade(new BudgetExhausted('spend:p:*', 5000)) })).toBe('deferred');
    expect(end({ error: new Permanent('over budget', { code: 'budget-exhausted' }) })).toBe('failed');
    expect(end({ error: engineMade(new EffectOutcomeUnknown('charge', 'past retention')) })).toBe(
      'needs_reconciliation',
    );
    expect(end({ error: engineMade(new LeaseLost('x')) })).toBe('abandon');
    expect(end({ error: engineMade(new CancelRequested('x')) })).toBe('cancelled');
    expect(end({ error: new Error('aborted'), abortReason: new LeaseLost('x') })).toBe('abandon');
    expect(end({ error: new Error('aborted'), abortReason: new WorkerShutdown() })).toBe('released');
    expect(end({ error: new Error('aborted'), abortReason: new CancelRequested('x') })).toBe('cancelled');
    expect(end({ error: new Error('aborted'), abortReason: new DeadlineExceeded('x') })).toBe('failed');
    expect(end({ error: new Error('aborted'), abortReason: new AttemptTimeout('x', 5) })).toBe('retry');
    // The timeout is why it ended, whatever the handler made of it on the way out.
    expect(
      end({ error: new Permanent('the call was aborted'), abortReason: new AttemptTimeout('x', 5) }),
    ).toBe('retry');
  });

  it("takes a handler's error carrying one of the engine's codes for what its class says, its code kept", () => {
    const end = (error: unknown) => classifyFailure(facts({ error }), () => 0.5);
    const forged = (code: string) =>
      Object.defineProperty(Object.assign(new Error('forged'), { code }), Symbol.for('sluice.error'), {
        value: true,
      });
    for (const code of [
      'cancel-requested',
      'lease-lost',
      'worker-shutdown',
      'deadline-exceeded',
      'attempt-timeout',
      'temp-limit-exceeded',
      'provider-call-limit-exceeded',
      'effect-outcome-unknown',
      'budget-exhausted',
      'input-invalid',
      'effect-key-conflict',
    ]) {
      expect([code, end(new Permanent('mine', { code }))]).toEqual([
        code,
        { outcome: 'failed', error: { code, message: 'mine', outcome: 'permanent' } },
      ]);
      // (An object marked as Sluice's with the code of a conflict is another copy's EffectConflict.)
      const others = code === 'effect-key-conflict' ? [] : [forged(code)];
      for (const error of [new Retryable('mine', { code }), new Ambiguous('mine', { code }), ...others])
        expect([code, end(error)]).toEqual([
          code,
          expect.objectContaining({ outcome: 'retry', error: expect.objectContaining({ code }) }),
        ]);
    }
    // The engine's classes, made by the handler rather than the engine: as any error of Sluice's.
    for (const error of [
      new CancelRequested('x'),
      new LeaseLost('x'),
      new WorkerShutdown(),
      new DeadlineExceeded('x'),
      new BudgetExhausted('spend:p:*', 0),
      new EffectOutcomeUnknown('charge', 'mine'),
    ])
      expect(end(error)).toMatchObject({ outcome: 'retry', error: { code: error.code } });
  });

  it('never throws, whatever was thrown: a revoked Proxy, one whose every trap throws another', () => {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    const abyss = (): object =>
      new Proxy(
        {},
        new Proxy(
          {},
          {
            get: () => () => {
              throw abyss();
            },
          },
        ),
      );
    for (const error of [proxy, abyss()])
      for (const abortReason of [undefined, new AttemptTimeout('x', 5)])
        expect(classifyFailure(facts({ error, abortReason }), () => 0.5)).toMatchObject({ outcome: 'retry' });
  });

  it('dead-letters when attempts are exhausted, keeping the last error', () => {
    const out = classifyFailure(facts({ error: new Retryable('503'), attempt: 5 }));
    expect(out).toMatchObject({ outcome: 'dead', error: { code: 'attempts-exhausted' } });
    expect(
      (out as { error: { details: { lastError: { message: string } } } }).error.details.lastError.message,
    ).toBe('503');
  });

  it('does not schedule a retry past the deadline', () => {
    const out = classifyFailure(facts({ error: new Retryable('503'), deadlineInMs: 50 }), () => 0.9);
    expect(out).toMatchObject({ outcome: 'failed', error: { code: 'deadline-exceeded' } });
  });

  it('labels unclassified errors as retryable in the history', () => {
    const out = classifyFailure(facts({ error: new TypeError('bug') }), () => 0);
    expect(out).toMatchObject({
      outcome: 'retry',
      error: { code: 'unclassified-error', outcome: 'retryable' },
    });
  });
});

describe('failpoint specs', () => {
  it('accepts the C0–C4 aliases and point names, and refuses unknown points', async () => {
    const { failpoints } = await import('../../src/runtime/failpoints.js');
    expect(() => failpoints.enableFromSpec('C2=kill,operation.before-complete=crash@2#O7')).not.toThrow();
    const code = (f: () => void) => {
      try {
        f();
      } catch (error) {
        return [(error as { code?: string }).code, (error as Error).message];
      }
    };
    expect(code(() => failpoints.enableFromSpec('effect.afterr-call=kill'))).toEqual([
      'invalid-argument',
      expect.stringMatching(/unknown failpoint/),
    ]);
    expect(code(() => failpoints.enableFromSpec('C2=explode'))).toEqual([
      'invalid-argument',
      expect.stringMatching(/bad failpoint spec/),
    ]);
    // So is a point named in code that is not one (a caller without the types).
    expect(code(() => failpoints.enable('effect.nope' as never, 'crash'))).toEqual([
      'invalid-argument',
      expect.stringMatching(/unknown failpoint "effect.nope"/),
    ]);
    failpoints.reset();
  });
});
