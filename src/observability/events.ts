/**
 * @module observability/events
 * What the engine tells observers, as typed events on `sluice.events`: metrics (prom-client),
 * dashboards and tests subscribe; the engine knows nothing of them. Emitted synchronously and
 * cheap: a listener must not throw or block.
 */
import { EventEmitter } from 'node:events';
import type { OperationState } from '../core/states.js';

export interface OperationRef {
  tenant: string;
  id: string;
  kind: string;
  class: string;
}

export type AttemptEndOutcome =
  | 'succeeded'
  | 'failed'
  | 'retry'
  | 'dead'
  | 'needs_reconciliation'
  | 'cancelled'
  | 'released'
  | 'deferred'
  | 'crashed'
  | 'abandoned';

export interface SluiceEventMap {
  /** An operation was accepted (`created`) or answered from its record (a duplicate). */
  submitted: [OperationRef & { created: boolean }];
  /** A submission was refused before anything was stored; `reason` is the error code. */
  rejected: [{ tenant: string; kind: string; class: string | null; reason: string }];
  /** An attempt started. `firstAttemptAgeMs`: for a first attempt, how long it waited since acceptance. */
  'attempt-started': [OperationRef & { attempt: number; firstAttemptAgeMs: number | null }];
  /**
   * An attempt ended. `outcome`: how the attempt ended. `state`: the terminal state the operation
   * reached through it, which the store may have decided otherwise than the attempt asked (a
   * failure with an effect pending is `needs_reconciliation`), or null while it goes on.
   * `endToEndMs`: acceptance to that end, with `state`.
   */
  'attempt-ended': [
    OperationRef & {
      attempt: number;
      outcome: AttemptEndOutcome;
      state: OperationState | null;
      durationMs: number;
      endToEndMs: number | null;
      errorCode: string | null;
    },
  ];
  /** A request to a provider (or a lookup) and how it went. */
  effect: [OperationRef & { effect: string; provider: string | null; outcome: string }];
  /**
   * An expired lease was rescued: redelivered (`queued`) or ended. `endToEndMs`: acceptance to that
   * end when `to` is terminal, else null.
   */
  rescued: [OperationRef & { to: OperationState; endToEndMs: number | null }];
  /** A queued operation was cancelled: it ended without another attempt. `endToEndMs`: acceptance to now. */
  cancelled: [OperationRef & { endToEndMs: number }];
  /** The service-wide retry budget denied a retry. */
  'retry-denied': [OperationRef];
}

export type SluiceEvents = EventEmitter<SluiceEventMap>;

export function createEvents(): SluiceEvents {
  const events = new EventEmitter<SluiceEventMap>();
  events.setMaxListeners(0);
  return events;
}
