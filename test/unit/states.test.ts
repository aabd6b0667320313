import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  allowedTargets,
  isAllowedMove,
  isTerminal,
  OPERATION_STATES,
  type TransitionEvent,
  transitionTable,
} from '../../src/core/states.js';

const EVENTS = [...new Set(transitionTable().map((r) => r.event))] as TransitionEvent[];

describe('the transition table', () => {
  it('never leaves a terminal state except by redrive (dead) or reconcile (needs_reconciliation)', () => {
    fc.assert(
      fc.property(fc.constantFrom(...OPERATION_STATES), fc.constantFrom(...EVENTS), (from, event) => {
        const to = allowedTargets(from, event);
        if (!isTerminal(from) || to.length === 0) return true;
        return (
          (from === 'dead' && event === 'redrive') ||
          (from === 'needs_reconciliation' && event === 'reconcile')
        );
      }),
    );
  });

  it('only reaches cancelled from queued or running', () => {
    for (const from of OPERATION_STATES) {
      expect(isAllowedMove(from, 'cancelled')).toBe(
        from === 'queued' || from === 'running' || from === 'cancelled',
      );
    }
  });

  it('only runs what was queued, and succeeds only what ran', () => {
    for (const from of OPERATION_STATES) {
      expect(isAllowedMove(from, 'running')).toBe(from === 'queued' || from === 'running');
      expect(isAllowedMove(from, 'succeeded')).toBe(
        from === 'running' || from === 'needs_reconciliation' || from === 'succeeded',
      );
    }
  });

  it('never moves succeeded, failed or cancelled anywhere', () => {
    for (const from of ['succeeded', 'failed', 'cancelled'] as const) {
      for (const to of OPERATION_STATES) if (to !== from) expect(isAllowedMove(from, to)).toBe(false);
    }
  });
});
