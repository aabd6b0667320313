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

export class Heartbeat {
  private readonly watches = new Map<string, LeaseWatch>();
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;

  constructor(
    private readonly store: Store,
    private readonly log: Logger,
    private readonly intervalMs: number,
  ) {}

  get size(): number {
    return this.watches.size;
  }

  watch(w: Omit<LeaseWatch, 'confirmedAt'>): void {
    this.watches.set(keyOf(w.lease), { ...w, confirmedAt: performance.now() });
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
  }

  /**
   * Stops beating. A beat still out is waited for one interval at most: one whose call hangs
   * must not hold the worker's shutdown with it (its answer, if it comes, finds no attempt left).
   */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    const ticking = this.ticking;
    if (!ticking) return;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      ticking,
      new Promise<void>((resolve) => (timer = setTimeout(resolve, this.intervalMs))),
    ]);
    clearTimeout(timer);
  }

  /** Gives up every lease not confirmed for as long as it lasts. */
  expire(now = performance.now()): void {
    for (const w of this.watches.values()) {
      if (now - w.confirmedAt >= w.leaseMs) {
        this.log.warn(
          { tenant: w.lease.tenant, operation: w.lease.id, unconfirmedMs: Math.round(now - w.confirmedAt) },
          'lease not confirmed for as long as it lasts; its attempt is stopped',
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
