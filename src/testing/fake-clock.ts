/**
 * @module testing/fake-clock
 * A clock that moves only when told to, for stores and the provider stub in tests.
 */
import type { Clock } from '../core/clock.js';

export class FakeClock implements Clock {
  private ms: number;

  constructor(start: number | string | Date = '2026-01-01T12:00:00Z') {
    this.ms = typeof start === 'number' ? start : new Date(start).getTime();
  }

  now(): number {
    return this.ms;
  }

  set(at: number | string | Date): void {
    this.ms = typeof at === 'number' ? at : new Date(at).getTime();
  }

  advance(ms: number): void {
    this.ms += ms;
  }
}
