/**
 * @module bench/lib/cost-window
 * What one timed phase cost when the processes and pools involved stay up across several phases
 * (an API server that serves two phases, an engine kept warm between them). PostgreSQL backends
 * publish their cumulative counters only at exit or about once a second, so commits and rows
 * cannot be cut per phase here (PhaseMeter does that where a phase owns its connections); CPU
 * can: this process's (`process.cpuUsage`), a server child's and the database backends' (both
 * from /proc), and the store calls made meanwhile, by method.
 *
 * Keys of `perOp` follow PhaseMeter's: `<phase>.nodeCpuUs` is the CPU of the Node process that
 * runs Sluice — the server child when there is one, and this process's CPU is then the load
 * generator's (`<phase>.clientCpuUs`).
 */
import { WRITE_METHODS } from './engine.js';
import { type PgObserver, processCpuSeconds } from './pg-admin.js';

const APPLICATIONS = ['sluice'];

/** Store calls so far by method, and their summed latency (a `CallCounts`, here or in a child). */
export interface CallsSoFar {
  byMethod: ReadonlyMap<string, number>;
  msByMethod: ReadonlyMap<string, number>;
}

export interface WindowSources {
  observer?: PgObserver;
  /** The process that runs Sluice, when it is not this one. */
  pid?: number;
  counts?: () => CallsSoFar | Promise<CallsSoFar>;
}

export class CostWindow {
  private ms = 0;
  private ownUs = 0;
  private childS = 0;
  private pgS = 0;
  private readonly calls = new Map<string, number>();
  private readonly callMs = new Map<string, number>();
  private at:
    | {
        t: number;
        own: NodeJS.CpuUsage;
        child: number;
        pg: Map<number, number>;
        calls: Map<string, number>;
        ms: Map<string, number>;
      }
    | undefined;

  constructor(private readonly o: WindowSources) {}

  /** Reads the starting points, then starts the clock. A window may be started and stopped again: it adds up. */
  async start(): Promise<void> {
    const pg = this.o.observer ? await this.o.observer.backendCpuByPid(APPLICATIONS) : new Map();
    const child = this.o.pid === undefined ? 0 : processCpuSeconds(this.o.pid);
    const counts = await this.o.counts?.();
    const calls = new Map(counts?.byMethod);
    const ms = new Map(counts?.msByMethod);
    this.at = { t: performance.now(), own: process.cpuUsage(), child, pg, calls, ms };
  }

  /** Stops the clock, then reads the end points. */
  async stop(): Promise<void> {
    const at = this.at;
    if (!at) throw new Error('the window was not started');
    this.at = undefined;
    this.ms += performance.now() - at.t;
    const own = process.cpuUsage(at.own);
    this.ownUs += own.user + own.system;
    const counts = await this.o.counts?.();
    for (const [m, c] of counts?.byMethod ?? []) {
      this.calls.set(m, (this.calls.get(m) ?? 0) + c - (at.calls.get(m) ?? 0));
      const t = (counts?.msByMethod.get(m) ?? 0) - (at.ms.get(m) ?? 0);
      this.callMs.set(m, (this.callMs.get(m) ?? 0) + t);
    }
    if (this.o.pid !== undefined) this.childS += processCpuSeconds(this.o.pid) - at.child;
    // A backend that closed meanwhile was idle (the pool's idle timeout): it used nothing here.
    if (this.o.observer)
      for (const [pid, s] of await this.o.observer.backendCpuByPid(APPLICATIONS))
        this.pgS += s - (at.pg.get(pid) ?? 0);
  }

  get seconds(): number {
    return this.ms / 1000;
  }

  perOp(n: number, phase: string): Record<string, number> {
    const out: Record<string, number> = {};
    const sluiceUs = this.o.pid === undefined ? this.ownUs : this.childS * 1e6;
    out[`${phase}.nodeCpuUs`] = sluiceUs / n;
    out[`${phase}.nodeCpuShare`] = sluiceUs / 1e6 / this.seconds;
    if (this.o.pid !== undefined) {
      out[`${phase}.clientCpuUs`] = this.ownUs / n;
      out[`${phase}.clientCpuShare`] = this.ownUs / 1e6 / this.seconds;
    }
    if (this.o.observer) {
      out[`${phase}.pgCpuUs`] = (this.pgS * 1e6) / n;
      out[`${phase}.pgCpuShare`] = this.pgS / this.seconds;
    }
    if (this.o.counts) {
      let all = 0;
      let writes = 0;
      for (const [m, c] of this.calls) {
        if (c <= 0) continue;
        out[`${phase}.calls.${m}`] = c / n;
        out[`${phase}.ms.${m}`] = (this.callMs.get(m) ?? 0) / c;
        all += c;
        if (WRITE_METHODS.includes(m)) writes += c;
      }
      out[`${phase}.storeCalls`] = all / n;
      out[`${phase}.storeWrites`] = writes / n;
    }
    return out;
  }
}
