/**
 * @module drill/sampler
 * Samples the deployment every `intervalMs` (200 ms) into a `Sample`, plus what the invariants
 * need beside it (lease holders, retry-budget counters). What each field is, and where it comes
 * from:
 *
 * | field | source |
 * |---|---|
 * | `workersAlive` | worker processes of the deployment running (started, not yet exited: drill/deployment.ts) |
 * | `running`, `waiting` | the store's queue counters (`queueStats`, one statement), class → tenant |
 * | `dbConnections` | measured by the observer (drill/observer.ts): `pg_stat_activity`, or SQLite file descriptors |
 * | `tempBytes` | a walk of the workers' temp root (every handler's `ctx.tempDir()` lives under it) |
 * | `providerCalls`, `providerCharges` | the stub's counters (charge requests + lookups) and its ledger |
 * | `rejections` | the drill's clients' refused submissions by problem code (drill/client.ts) |
 * | `retryDenials` | the store's retry-budget counters (`retryBudgetStats`), cumulative since the start |
 * | `northLatencyMs` | North's operations that succeeded since the previous sample (drill/load.ts) |
 *
 * The lease holders come from a second statement: every running operation with its lease
 * owner (`<host>/<pid>/<nonce>`), mapped to the worker incarnation by pid, alive or dead.
 */
import { TempDirs } from '../runtime/temp-dirs.js';
import type { RetryBudgetStats } from '../store/types.js';
import type { DrillClient } from './client.js';
import type { Deployment } from './deployment.js';
import type { Workload } from './load.js';
import type { Observer } from './observer.js';
import type { PhaseName, Sample } from './types.js';

export interface Observation {
  sample: Sample;
  phase: PhaseName;
  /** class → lease owner (worker incarnation name) → running operations it holds. */
  byOwner: Record<string, Record<string, number>>;
  /**
   * class → tenant → running operations, counted from the rows themselves: not from the queue
   * counters (`sample.running`) that admission enforces the caps with, which a check must not
   * take on trust.
   */
  runningRows: Record<string, Record<string, number>>;
  /** Lease owners in this sample whose process has exited (their leases are not rescued yet). */
  deadOwners: string[];
  /** Lease owners that are none of the deployment's workers. */
  unknownOwners: string[];
  /** The retry budget's counters over its window… */
  retry: RetryBudgetStats;
  /** … and the first attempts over twice the window (what a retry in the window may have counted on). */
  firstAttempts2w: number;
  /** The most connections the deployment's processes may hold now (processes × per-process maximum). */
  connectionBound: number;
}

export class Sampler {
  readonly observations: Observation[] = [];
  readonly errors: string[] = [];
  private stopped = false;
  private loop: Promise<void> | undefined;
  private readonly listeners = new Set<(o: Observation) => void>();

  constructor(
    private readonly deps: {
      observer: Observer;
      deployment: Deployment;
      client: DrillClient;
      workload: Workload;
      tempRoot: string;
      retryWindowMs: number;
      /** When the deployment started (epoch ms). */
      startedAtEpoch: number;
      /** Ms since the drill started. */
      now: () => number;
      phase: () => PhaseName;
    },
    private readonly intervalMs = 200,
  ) {}

  get latest(): Observation | undefined {
    return this.observations.at(-1);
  }

  /** Calls `fn` after every sample; returns the function that stops it. */
  onSample(fn: (o: Observation) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  start(): void {
    this.loop = (async () => {
      while (!this.stopped) {
        const started = performance.now();
        try {
          const o = await this.sampleOnce();
          this.observations.push(o);
          for (const fn of [...this.listeners]) fn(o);
        } catch (error) {
          this.errors.push(`sample at ${this.deps.now()} ms failed: ${String(error)}`);
        }
        const spent = performance.now() - started;
        await new Promise((r) => setTimeout(r, Math.max(0, this.intervalMs - spent)));
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.loop;
  }

  private async sampleOnce(): Promise<Observation> {
    const { observer, deployment, client, workload, tempRoot } = this.deps;
    const t = this.deps.now();
    const phase = this.deps.phase();
    const holders = deployment.connectionHolders();
    const [stats, rows, retry, retry2w, retryAll, dbConnections] = await Promise.all([
      observer.queueStats(),
      observer.running(),
      observer.retryStats(this.deps.retryWindowMs),
      observer.retryStats(2 * this.deps.retryWindowMs),
      // Since the deployment started (the store is the run's own): cumulative denials.
      observer.retryStats(Date.now() - this.deps.startedAtEpoch + 60_000),
      observer.connections(deployment.livePids()),
    ]);
    const running: Sample['running'] = {};
    const waiting: Sample['waiting'] = {};
    for (const q of stats) {
      running[q.class] = { ...running[q.class], [q.tenant]: q.running };
      waiting[q.class] = { ...waiting[q.class], [q.tenant]: q.waiting };
    }
    const byPid = new Map(deployment.incarnations.map((i) => [i.pid, i]));
    const byOwner: Observation['byOwner'] = {};
    const runningRows: Observation['runningRows'] = {};
    const dead = new Set<string>();
    const unknown = new Set<string>();
    for (const r of rows) {
      const pid = Number(r.leaseOwner?.split('/')[1]);
      const inc = byPid.get(pid);
      const owner = inc?.name ?? r.leaseOwner ?? '(none)';
      if (!inc) unknown.add(owner);
      else if (inc.exit) dead.add(owner);
      const cls = byOwner[r.class] ?? {};
      cls[owner] = (cls[owner] ?? 0) + 1;
      byOwner[r.class] = cls;
      const tenants = runningRows[r.class] ?? {};
      tenants[r.tenant] = (tenants[r.tenant] ?? 0) + 1;
      runningRows[r.class] = tenants;
    }
    const stub = deployment.stub.stub;
    const sample: Sample = {
      t,
      workersAlive: deployment.workersAlive(),
      running,
      waiting,
      dbConnections,
      tempBytes: TempDirs.bytes(tempRoot),
      providerCalls: stub.calls + stub.lookups + stub.refundCalls,
      providerCharges: stub.ledger().length,
      rejections: { ...client.rejections },
      retryDenials: retryAll.denials,
      northLatencyMs: workload.drainLatencies(),
    };
    return {
      sample,
      phase,
      byOwner,
      runningRows,
      deadOwners: [...dead],
      unknownOwners: [...unknown],
      retry,
      firstAttempts2w: retry2w.firstAttempts,
      connectionBound: holders * observer.connectionsPerProcess,
    };
  }
}
