/**
 * @module core/clock
 * Time as the engine sees it. Stores stamp leases, `run_after`, deadlines and effect send times
 * with one clock (on PostgreSQL the server's own, unless a test injects one), so no decision
 * compares two hosts' wall clocks. Durations inside a process (heartbeats, attempt timeouts) use
 * ordinary timers.
 */

export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };
