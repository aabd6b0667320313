/**
 * @module bench/lib/meter
 * Times one phase and collects what it cost: wall time, this process's CPU, and for PostgreSQL
 * the server's counters (commits, rows, WAL) and its backends' CPU. The timed window is exactly
 * `start()` to `stop()`; the counters cover the phase's connections from open to close, which
 * adds only their connection set-up to the window's work.
 */
import { diff, type PgCounters, type PgObserver } from './pg-admin.js';

export class PhaseMeter {
  private t0 = 0;
  private t1 = 0;
  private cpu0: NodeJS.CpuUsage = { user: 0, system: 0 };
  private cpu: NodeJS.CpuUsage = { user: 0, system: 0 };
  private before: PgCounters | undefined;
  private delta: PgCounters | undefined;
  private pgCpu = Number.NaN;
  /** Backends' CPU seconds by pid when the window started after a warm-up on the same connections. */
  private pgCpuAtStart: Map<number, number> | undefined;
  /** Operations done on the phase's connections before the window: counted by the server too. */
  private warmed = 0;
  startUs = 0;
  endUs = 0;
  private stopSampling: (() => Promise<Record<string, number>>) | undefined;
  /** With `sampleWaits`: the mean number of the phase's backends in each wait state. */
  waits: Record<string, number> | undefined;

  constructor(
    private readonly observer: PgObserver | undefined,
    private readonly applications: string[] = ['sluice', 'bench'],
    private readonly sampleWaits = false,
  ) {}

  /** Before the phase's connections open: the server's counters as they are. */
  async open(): Promise<void> {
    if (!this.observer) return;
    await this.observer.waitForDisconnect(this.applications);
    this.before = await this.observer.counters();
  }

  /**
   * Starts the window after `warmed` operations already ran on the phase's own connections (a
   * warm-up on the very client that is timed). The server publishes its counters only when a
   * backend exits, so they still cover the warm-up: per operation they are divided by every
   * operation of the connections' lifetime, the same work each. The backends' CPU is read now
   * and again at the end, so it covers the window alone.
   */
  async startAfter(warmed: number): Promise<void> {
    this.warmed = warmed;
    if (this.observer) this.pgCpuAtStart = await this.observer.backendCpuByPid(this.applications);
    this.start();
  }

  start(): void {
    if (this.sampleWaits && this.observer) this.stopSampling = this.observer.sampleWaits(this.applications);
    this.startUs = Number(process.hrtime.bigint() / 1000n);
    this.cpu0 = process.cpuUsage();
    this.t0 = performance.now();
  }

  stop(): void {
    this.t1 = performance.now();
    this.cpu = process.cpuUsage(this.cpu0);
    this.endUs = Number(process.hrtime.bigint() / 1000n);
  }

  /** While the phase's connections are still open: their backends' CPU time. */
  async sampleServerCpu(): Promise<void> {
    if (this.stopSampling) this.waits = await this.stopSampling();
    if (!this.observer) return;
    if (!this.pgCpuAtStart) {
      this.pgCpu = await this.observer.backendCpuSeconds(this.applications);
      return;
    }
    // A backend opened during the window counts from zero.
    let total = 0;
    for (const [pid, cpu] of await this.observer.backendCpuByPid(this.applications))
      total += cpu - (this.pgCpuAtStart.get(pid) ?? 0);
    this.pgCpu = total;
  }

  /** After the phase's connections closed: the counters' change. */
  async close(): Promise<void> {
    if (!this.observer || !this.before) return;
    await this.observer.waitForDisconnect(this.applications);
    this.delta = diff(await this.observer.counters(), this.before);
  }

  get seconds(): number {
    return (this.t1 - this.t0) / 1000;
  }

  rate(n: number): number {
    return n / this.seconds;
  }

  /** Costs per operation, keys prefixed with `prefix.`. */
  perOp(n: number, prefix: string): Record<string, number> {
    const out: Record<string, number> = {
      [`${prefix}.nodeCpuUs`]: ((this.cpu.user + this.cpu.system) / n) | 0,
      [`${prefix}.nodeCpuShare`]: (this.cpu.user + this.cpu.system) / 1e6 / this.seconds,
    };
    if (this.delta) {
      const all = n + this.warmed;
      out[`${prefix}.commits`] = this.delta.xactCommit / all;
      out[`${prefix}.rowsWritten`] =
        (this.delta.tupInserted + this.delta.tupUpdated + this.delta.tupDeleted) / all;
      out[`${prefix}.walSyncs`] = this.delta.walSync / all;
      out[`${prefix}.walBytes`] = this.delta.walBytes / all;
    }
    if (Number.isFinite(this.pgCpu)) {
      out[`${prefix}.pgCpuUs`] = (this.pgCpu * 1e6) / n;
      out[`${prefix}.pgCpuShare`] = this.pgCpu / this.seconds;
    }
    return out;
  }
}
