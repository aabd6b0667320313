/**
 * @module queue/heartbeat
 * One heartbeat per worker process, not per operation: every tick extends all the leases the
 * process holds in one store call. A lease the store no longer grants (expired and rescued, or
 * taken by another worker) aborts its handler; so does a cancel request. If the store cannot be
 * reached for longer than a lease lasts, the worker must assume the lease is gone and aborts too:
 * it cannot prove it still owns the operation.
 *
 * That last rule is kept by the clock, not by the store's answers: every interval checks each
 * lease's last confirmation first, whether or not a beat is still out. A beat whose call never
 * comes back (a connection the network dropped without a reset hangs until the kernel gives up,
 * about 15 minutes) would otherwise let the handler run on past its lease, beside the worker the
 * operation was handed to next.
 *
 * And it is kept with room to spare. Another worker may claim the operation once the lease the
 * store granted has run out, and that lease started when the store took the claim, not when
 * this worker heard the answer: a lease is confirmed from the moment the claim was sent. Its
 * handler must then be stopped, its grace for stopping included, before the lease's end, so it
 * is given up `abortGraceMs` plus one check before it (never sooner than two beats, or a beat's
 * ordinary latency would give up healthy leases), and the check runs at least every second,
 * not only at each beat. Measured before this: a worker cut off from the store ran its handler
 * beside the next worker's for up to a beat interval, seconds with the defaults.
 */
import type { Logger } from 'pino';
import type { Store } from '../store/store.js';
import type { LeaseRef } from '../store/types.js';

export interface LeaseWatch {
  lease: LeaseRef;
  leaseMs: number;
  onLost(): void;
  onCancel(): void;
  /** performance.now() of the last time the store confirmed the lease. */
  confirmedAt: number;
}

const keyOf = (l: LeaseRef) => `${l.tenant}\u0000${l.id}\u0000${l.epoch}`;

/** The longest gap between two checks of the leases' confirmations. */
const CHECK_MAX_MS = 1000;

export class Heartbeat {
  private readonly watches = new Map<string, LeaseWatch>();
  private timer: NodeJS.Timeout | undefined;
  private checker: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private readonly checkMs: number;

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    private readonly intervalMs: number,
    /** How long an attempt's handler is given to stop once its signal fired. */
    private readonly abortGraceMs = 0,
  ) {
    this.checkMs = Math.min(intervalMs, CHECK_MAX_MS);
  }

  get size(): number {
    return this.watches.size;
  }

  /**
   * Keeps `w.lease` extended. `confirmedAt`: performance.now() when the claim that granted it
   * was sent (the store's lease started after it); default now.
   */
  watch(w: Omit<LeaseWatch, 'confirmedAt'>, confirmedAt = performance.now()): void {
    this.watches.set(keyOf(w.lease), { ...w, confirmedAt });
  }

  /** How long a lease may go unconfirmed before its attempt is stopped (module header). */
  unconfirmedLimitMs(leaseMs: number): number {
    return Math.max(leaseMs - this.abortGraceMs - this.checkMs, Math.min(2 * this.intervalMs, leaseMs));
  }

  unwatch(lease: LeaseRef): void {
    this.watches.delete(keyOf(lease));
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      this.expire();
      void this.tick();
    }, this.intervalMs);
    this.timer.unref();
    if (this.checkMs < this.intervalMs) {
      this.checker = setInterval(() => this.expire(), this.checkMs);
      this.checker.unref();
    }
  }

  /**
   * Stops beating. A beat still out is waited for one interval at most: one whose call hangs
   * must not hold the worker's shutdown with it (its answer, if it comes, finds no attempt left).
   */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    if (this.checker) clearInterval(this.checker);
    this.timer = undefined;
    this.checker = undefined;
    const ticking = this.ticking;
    if (!ticking) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      ticking,
      new Promise<void>((resolve) => (timer = setTimeout(resolve, this.intervalMs))),
    ]);
    clearTimeout(timer);
  }

  /** Gives up every lease not confirmed for as long as it may be (`unconfirmedLimitMs`). */
  expire(now = performance.now()): void {
    for (const w of this.watches.values()) {
      if (now - w.confirmedAt >= this.unconfirmedLimitMs(w.leaseMs)) {
        this.log.warn(
          { tenant: w.lease.tenant, operation: w.lease.id, unconfirmedMs: Math.round(now - w.confirmedAt) },
          'lease not confirmed for nearly as long as it lasts; its attempt is stopped before it ends',
        );
        this.unwatch(w.lease);
        w.onLost();
      }
    }
  }

  /** Extends every watched lease now. Exposed for tests and for shutdown. */
  tick(): Promise<void> {
    if (this.ticking) return this.ticking;
    this.ticking = this.beat().finally(() => {
      this.ticking = undefined;
    });
    return this.ticking;
  }

  private async beat(): Promise<void> {
    const byLease = new Map<number, LeaseWatch[]>();
    for (const w of this.watches.values()) {
      const group = byLease.get(w.leaseMs) ?? [];
      group.push(w);
      byLease.set(w.leaseMs, group);
    }
    for (const [leaseMs, group] of byLease) {
      const sentAt = performance.now();
      try {
        const statuses = await this.store.leaseExtendMany({ leases: group.map((w) => w.lease), leaseMs });
        statuses.forEach((s, i) => {
          const w = group[i]!;
          if (!s.ok) {
            this.unwatch(w.lease);
            w.onLost();
          } else {
            w.confirmedAt = sentAt;
            if (s.cancelRequested) w.onCancel();
          }
        });
      } catch (error) {
        this.log.warn({ err: error }, 'heartbeat failed; leases not extended');
        this.expire();
      }
    }
  }
}
