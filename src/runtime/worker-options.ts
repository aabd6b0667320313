/**
 * @module runtime/worker-options
 * What a worker accepts (`sluice.worker(options)`, the config's `worker`), and the check that
 * every option is in its range before anything is started (README, "Limits and defaults").
 */
import { bounded, MAX_TIMER_MS } from '../core/bounds.js';
import { InvalidArgument } from '../core/errors/index.js';

export interface WorkerOptions {
  /** Slots per class in this process. Classes not listed get `defaultSlots`. */
  slots?: Record<string, number>;
  /**
   * Slots for a class of a defined kind that `slots` does not list. Default 32: handlers mostly
   * wait on the network, and the store's writes are group-committed across attempts in flight,
   * so more in flight means fewer commits per operation (docs/benchmarks.md). Lower it for
   * classes whose handlers are CPU- or subprocess-heavy.
   */
  defaultSlots?: number;
  /** Visibility timeout: a claim not heartbeated for this long is redelivered. Default 30 s. */
  leaseMs?: number;
  /** Heartbeat period. Default: a third of the lease, at most 5 s. */
  heartbeatMs?: number;
  /** How often to look for other processes' work. Default 500 ms. */
  pollIntervalMs?: number;
  /**
   * How often to rescue expired leases (and, on PostgreSQL, fold the class counts transactional
   * submits leave as deltas); `false` to leave both to other processes. Default 5 s.
   */
  rescueIntervalMs?: number | false;
  /** How often to purge old terminal operations; `false` to disable. Default 60 s. */
  purgeIntervalMs?: number | false;
  /** Root of handlers' temporary directories. Default `<os tmpdir>/sluice-<uid>`, made private (0700). */
  tempRoot?: string;
  /** How long to wait for a handler that ignores its aborted signal. Default 1 s. */
  abortGraceMs?: number;
  /** How often running attempts' temporary folders are measured. Default 250 ms. */
  tempCheckMs?: number;
  /**
   * A name for this worker in leases, attempt history and logs, to which it adds a nonce of its
   * own (`name/nonce`; default `host/pid/nonce`). Workers given one name, as replicas sharing a
   * config are, stay apart: a worker releases leases held in its name that it is not running
   * (those a claim took whose answer was lost), and must never release another's.
   */
  id?: string;
}

/** How long a claim holds an operation unless a heartbeat extends it. */
export const DEFAULT_LEASE_MS = 30_000;

/** Slots one class may have in one process. */
export const MAX_SLOTS = 10_000;

/** Every option in its range (README, "Limits and defaults"), before anything is started. */
export function checkWorkerOptions(o: WorkerOptions): void {
  const period = (name: string, value: number | undefined, min = 1) =>
    bounded(name, value, 0, { min, max: MAX_TIMER_MS });
  const slots = (name: string, value: number | undefined) =>
    bounded(name, value, 0, { min: 0, max: MAX_SLOTS, integer: true });
  slots('defaultSlots', o.defaultSlots);
  if (o.slots !== undefined) {
    if (typeof o.slots !== 'object' || o.slots === null) throw new InvalidArgument('slots must be an object');
    for (const [cls, n] of Object.entries(o.slots)) slots(`slots.${cls}`, n);
  }
  period('leaseMs', o.leaseMs);
  period('heartbeatMs', o.heartbeatMs);
  // A beat as long as the lease lets every lease run out before it is extended; the heartbeat
  // then stops each attempt that outlasts one beat (queue/heartbeat.ts).
  if (o.heartbeatMs !== undefined && o.heartbeatMs >= (o.leaseMs ?? DEFAULT_LEASE_MS))
    throw new InvalidArgument(
      `heartbeatMs (${o.heartbeatMs}) must be shorter than leaseMs (${o.leaseMs ?? DEFAULT_LEASE_MS})`,
    );
  period('pollIntervalMs', o.pollIntervalMs);
  if (o.rescueIntervalMs !== false) period('rescueIntervalMs', o.rescueIntervalMs);
  if (o.purgeIntervalMs !== false) period('purgeIntervalMs', o.purgeIntervalMs);
  period('abortGraceMs', o.abortGraceMs, 0);
  period('tempCheckMs', o.tempCheckMs);
  if (o.id !== undefined && (typeof o.id !== 'string' || o.id.length === 0 || o.id.length > 200))
    throw new InvalidArgument('id must be a string of 1 to 200 characters');
  if (o.tempRoot !== undefined && (typeof o.tempRoot !== 'string' || o.tempRoot.length === 0))
    throw new InvalidArgument('tempRoot must be a directory path');
}
