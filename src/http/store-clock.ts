/**
 * @module http/store-clock
 * The store's clock, read on this host: the host's clock plus the offset last measured against
 * the store's. An operation's times (`runAfter`) are on the store's clock, the PostgreSQL
 * server's, and an API host whose clock is off by ten minutes told clients polling a queued
 * operation to come back in ten minutes. One `store.now()` a minute keeps the offset, off the
 * request path but for the first: a poll hint counts in whole seconds, and a round trip's error
 * is milliseconds.
 */
import type { Store } from '../store/store.js';

export const STORE_CLOCK_REFRESH_MS = 60_000;

export class StoreClock {
  private offsetMs = 0;
  /** `performance.now()` when the last measurement began; it is not repeated sooner than a minute. */
  private measuredAt = Number.NEGATIVE_INFINITY;
  private measuring: Promise<void> | undefined;
  /** Whether a measurement has succeeded. */
  private known = false;

  constructor(
    private readonly store: Pick<Store, 'now'>,
    private readonly refreshMs = STORE_CLOCK_REFRESH_MS,
  ) {}

  /**
   * The store's time now. The first call waits for the first measurement (and calls made while
   * it runs wait for the same one); later ones take the last offset and, once it is a minute old,
   * start the next measurement without waiting for it.
   */
  async now(): Promise<number> {
    if (!this.measuring && performance.now() - this.measuredAt >= this.refreshMs) void this.measure();
    if (!this.known && this.measuring) await this.measuring;
    return Date.now() + this.offsetMs;
  }

  /**
   * Measures the offset: the store's answer against the start of the call on this host. A
   * store that cannot answer keeps the last offset (the host's own clock at first) until the
   * next try, a minute later: the hint is advice, and the request that wanted it is not failed.
   */
  measure(): Promise<void> {
    this.measuredAt = performance.now();
    this.measuring ??= (async () => {
      try {
        // Against the call's start: the store read its clock after it, so the offset can only come
        // out long, by up to the call's time, and a hint only short. Against the middle, a call
        // whose answer waited for a busy event loop came out short, and told clients to wait on.
        const before = Date.now();
        const storeNow = await this.store.now();
        this.offsetMs = storeNow - before;
        this.known = true;
      } catch {
        // Kept: the last offset.
      } finally {
        this.measuring = undefined;
      }
    })();
    return this.measuring;
  }
}
