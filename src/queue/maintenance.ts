/**
 * @module queue/maintenance
 * Background services of a worker process, each a small start/stop unit: the rescuer returns
 * operations whose lease expired to the queue (or parks poison ones), and the retention purge
 * turns old terminal operations into tombstones. Running them in every worker is safe: each
 * call is one short transaction over a bounded batch, and the stores serialise them.
 */
import type { Logger } from 'pino';
import { isStoreClosed } from '../core/errors/index.js';
import type { Store } from '../store/store.js';
import type { RescuedOperation } from '../store/types.js';

export interface RetentionPolicy {
  /** How long terminal operations stay readable. Default 7 days. */
  terminalMs: number;
  /** How long a purged id stays refused (since the operation finished). Default 30 days. */
  tombstoneMs: number;
}

export const DEFAULT_RETENTION: RetentionPolicy = {
  terminalMs: 7 * 86_400_000,
  tombstoneMs: 30 * 86_400_000,
};

export class PeriodicTask {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  /** Consecutive failures: while the store is down the task skips ticks instead of logging each. */
  private failures = 0;
  private skip = 0;

  constructor(
    private readonly name: string,
    private readonly intervalMs: number,
    private readonly fn: () => Promise<unknown>,
    private readonly log: Logger,
  ) {}

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      if (this.skip > 0) this.skip--;
      else void this.run();
    }, this.intervalMs);
    this.timer.unref();
  }

  run(): Promise<void> {
    if (this.running) return this.running;
    this.running = this.fn()
      .then(
        () => {
          this.failures = 0;
        },
        (error) => {
          // A store closed under it never answers again: said once, and the task stops.
          if (isStoreClosed(error)) {
            this.log.error({ task: this.name }, 'the store is closed: this maintenance task stops');
            if (this.timer) clearInterval(this.timer);
            this.timer = undefined;
            return;
          }
          this.failures++;
          // Back off: skip 1, 3, 7… ticks (at most 63) before trying again.
          this.skip = Math.min(63, 2 ** Math.min(this.failures, 6) - 1);
          this.log.warn({ err: error, task: this.name, failures: this.failures }, 'maintenance task failed');
        },
      )
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  /**
   * Another call reached the store: a back-off taken while it was down ends, and the task runs at
   * its next tick. Without it, expired leases waited up to 63 ticks (5 min) after an outage.
   */
  storeAnswered(): void {
    if (this.failures > 0) this.skip = 0;
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }
}

/** Rescues expired leases in batches until none is left. */
export async function rescueAll(
  store: Store,
  maxLeaseExpiries: number,
  batch = 200,
): Promise<RescuedOperation[]> {
  const all: RescuedOperation[] = [];
  for (;;) {
    const rescued = await store.leaseRescue({ maxLeaseExpiries, limit: batch });
    all.push(...rescued);
    if (rescued.length < batch) return all;
  }
}

/** Purges in batches until nothing old is left. */
export async function purgeAll(store: Store, policy: RetentionPolicy, batch = 500): Promise<number> {
  let total = 0;
  for (;;) {
    const { purged } = await store.retentionPurge({
      retentionMs: policy.terminalMs,
      tombstoneMs: policy.tombstoneMs,
      limit: batch,
    });
    total += purged;
    if (purged < batch) return total;
  }
}

/** What the maintenance services of a worker need from its engine. */
export interface MaintenanceEnv {
  store: Store;
  log: Logger;
  maxLeaseExpiries: number;
  retention: RetentionPolicy;
  /** Each operation a rescue moved, as it moved it. */
  onRescued(rescued: RescuedOperation): void;
  /** A rescue queued work again: the claim loops look for it. */
  onRequeued(): void;
}

/** The services started, to stop with the worker; `rescuer` to run a rescue at once. */
export interface Maintenance {
  tasks: PeriodicTask[];
  rescuer: PeriodicTask | undefined;
}

/**
 * Starts a worker's rescuer (with the counters' fold, where the store folds them) and retention
 * purge, each on its interval; `false` leaves that service to other processes.
 */
export function startMaintenance(
  env: MaintenanceEnv,
  intervals: { rescueIntervalMs: number | false; purgeIntervalMs: number | false },
): Maintenance {
  const tasks: PeriodicTask[] = [];
  let rescuer: PeriodicTask | undefined;
  const { store, log } = env;
  if (intervals.rescueIntervalMs !== false) {
    rescuer = new PeriodicTask(
      'rescue',
      intervals.rescueIntervalMs,
      async () => {
        const rescued = await rescueAll(store, env.maxLeaseExpiries);
        for (const r of rescued) env.onRescued(r);
        if (rescued.length === 0) return;
        // Which operations, so a line can be followed to them (the first 20 of a large sweep).
        const operations = rescued.slice(0, 20).map((r) => ({ tenant: r.tenant, operation: r.id, to: r.to }));
        log.warn({ rescued: rescued.length, operations }, 'expired leases rescued');
        if (rescued.some((r) => r.to === 'queued')) env.onRequeued();
      },
      log,
    );
    tasks.push(rescuer);
    const fold = store.countersFold?.bind(store);
    // A task of its own: a fold that fails does not hold up the rescues.
    if (fold) tasks.push(new PeriodicTask('fold-counters', intervals.rescueIntervalMs, fold, log));
  }
  if (intervals.purgeIntervalMs !== false)
    tasks.push(
      new PeriodicTask('purge', intervals.purgeIntervalMs, () => purgeAll(store, env.retention), log),
    );
  for (const task of tasks) task.start();
  return { tasks, rescuer };
}
