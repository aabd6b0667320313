/**
 * @module admission/retry-after
 * How long a refused client should wait before trying again (`CapacityExceeded.retryAfterMs`,
 * the HTTP `Retry-After`). An estimate from what this process has seen: the recent duration of
 * attempts in the class (an exponentially weighted mean), times how many operations must finish
 * before there is room, divided by how many run at once. A tenant whose waiting operations are all
 * delayed makes no room before the earliest is due, however fast the class runs: then the wait is
 * at least that long. Clamped to [1 s, 5 min] and rounded up to whole seconds, the unit of
 * `Retry-After`.
 */

const DEFAULT_MS = 1000;

export class RetryAfterEstimator {
  private readonly mean = new Map<string, number>();

  /** Records how long an attempt of `cls` took. */
  observe(cls: string, durationMs: number): void {
    const prev = this.mean.get(cls);
    this.mean.set(cls, prev === undefined ? durationMs : prev * 0.8 + durationMs * 0.2);
  }

  /** `dueInMs`: how long until the earliest waiting operation is due, when the store knows. */
  estimate(cls: string, excess: number, running: number, dueInMs: number | null = null): number {
    const perOp = this.mean.get(cls) ?? DEFAULT_MS;
    const ms = Math.max((Math.max(1, excess) * perOp) / Math.max(1, running), dueInMs ?? 0);
    return Math.ceil(Math.min(300_000, Math.max(1000, ms)) / 1000) * 1000;
  }
}
