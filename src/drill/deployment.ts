/**
 * @module drill/deployment
 * The real deployment the drill drives: the HTTP provider stub (in the drill's own process, so
 * its ledger is read directly), one API process and N worker processes, each a
 * `node dist/cli/main.js serve --role api|worker --config dist/drill/serve-config.js` on the
 * run's store, logging to a file of its own. The store reaches them as `SLUICE_DB` in their
 * environment, not as `--db`: a command line is anyone's to read (`ps`, /proc/<pid>/cmdline),
 * and a PostgreSQL URL may carry its password.
 *
 * Workers live in numbered slots (W1…WN). A slot's process may die — SIGKILLed by the drill, or
 * by itself at an armed failpoint (`SLUICE_FAILPOINTS`) — and is then replaced by a new
 * incarnation (W2.1, W2.2, …) at once, unless the deployment is stopping. Every incarnation's pid
 * is remembered: a dead worker's leases still count as running until they are rescued, and the
 * sampler must know whose they are.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, mkdirSync, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { type ProviderServer, startProviderServer } from '../testing/provider-server.js';

const MAIN = fileURLToPath(new URL('../cli/main.js', import.meta.url));
const CONFIG = fileURLToPath(new URL('./serve-config.js', import.meta.url));
/** A failure guard for a process to come up, not a synchroniser. */
const START_GUARD_MS = 30_000;

export interface DeploymentOptions {
  /** The store as the processes open it (a PostgreSQL URL carries the run's application_name). */
  db: string;
  pgSchema?: string;
  workers: number;
  tempRoot: string;
  logDir: string;
  break?: string;
  /** Provider stub latency per request. */
  stubLatencyMs: number;
}

export interface Incarnation {
  name: string;
  slot: number;
  pid: number;
  /** `SLUICE_FAILPOINTS` it was started with ('' for none). */
  failpoints: string;
  startedAt: number;
  ready: boolean;
  exit?: { code: number | null; signal: NodeJS.Signals | null };
  /** When it exited (epoch ms). */
  exitedAt?: number;
  /** The drill killed it (as opposed to its own failpoint, or a crash). */
  killedByDrill: boolean;
  /** Asked to stop gracefully. */
  stopping: boolean;
}

class Child {
  readonly process: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private readonly log: WriteStream;
  private tail = '';

  constructor(
    readonly name: string,
    args: string[],
    env: NodeJS.ProcessEnv,
    logDir: string,
  ) {
    this.log = createWriteStream(join(logDir, `${name}.log`));
    this.process = spawn(process.execPath, [MAIN, 'serve', ...args], {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.process.stderr!.on('data', (chunk: Buffer) => {
      this.log.write(chunk);
      this.tail = `${this.tail}${chunk.toString('utf8')}`.slice(-4000);
    });
    this.exited = new Promise((resolve) => {
      this.process.once('exit', (code, signal) => {
        this.log.end();
        resolve({ code, signal });
      });
    });
  }

  /** The first stdout line matching `pattern`; fails if the process exits first or after the guard. */
  waitForLine(pattern: RegExp): Promise<RegExpExecArray> {
    return new Promise((resolve, reject) => {
      const lines = createInterface({ input: this.process.stdout! });
      const timer = setTimeout(() => {
        lines.close();
        reject(new Error(`${this.name} did not start in ${START_GUARD_MS} ms\n${this.tail}`));
      }, START_GUARD_MS);
      lines.on('line', (line) => {
        this.log.write(`[stdout] ${line}\n`);
        const m = pattern.exec(line);
        if (m) {
          clearTimeout(timer);
          resolve(m);
        }
      });
      void this.exited.then((exit) => {
        clearTimeout(timer);
        reject(new Error(`${this.name} exited (${JSON.stringify(exit)}) while starting\n${this.tail}`));
      });
    });
  }

  get logTail(): string {
    return this.tail;
  }
}

export class Deployment {
  stub!: ProviderServer;
  apiUrl = '';
  /** Every worker incarnation ever started, in order. */
  readonly incarnations: Incarnation[] = [];
  /** Worker kills: by the drill, and by armed failpoints (a worker's own SIGKILL). */
  kills = { byDrill: 0, byFailpoint: 0, other: 0 };
  /** Called when a worker exits without being asked to: returns the next incarnation's failpoints. */
  failpointsForRestart: () => string = () => '';
  /** Errors while replacing a worker (shown in the result, not thrown from an exit handler). */
  readonly errors: string[] = [];
  private api: Child | undefined;
  private readonly current = new Map<number, { child: Child; inc: Incarnation }>();
  private readonly counts = new Map<number, number>();
  private readonly restarts = new Set<Promise<unknown>>();
  private stopping = false;

  constructor(readonly options: DeploymentOptions) {
    mkdirSync(options.logDir, { recursive: true });
    mkdirSync(options.tempRoot, { recursive: true });
  }

  private env(failpoints: string): NodeJS.ProcessEnv {
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      DRILL_STUB_URL: this.stub.url,
      DRILL_TEMP_ROOT: this.options.tempRoot,
      DRILL_PG_SCHEMA: this.options.pgSchema ?? '',
      SLUICE_DRILL_BREAK: this.options.break ?? '',
      SLUICE_FAILPOINTS: failpoints,
      SLUICE_LOG_LEVEL: process.env.SLUICE_DRILL_LOG_LEVEL ?? 'warn',
      // The run's store, in place of whatever the drill was started with; serve reads it over the
      // config's `db`, and keeps the config's settings.
      SLUICE_DB: this.options.db,
    };
    delete env.PORT;
    return env;
  }

  /** Starts the stub, the API, then the workers; resolves once every process said it is running. */
  async start(): Promise<void> {
    this.stub = await startProviderServer({ latencyMs: this.options.stubLatencyMs });
    const api = new Child(
      'api',
      ['--role', 'api', '--config', CONFIG, '--port', '0', '--host', '127.0.0.1'],
      this.env(''),
      this.options.logDir,
    );
    this.api = api;
    const m = await api.waitForLine(/API on (http:\/\/\S+)/);
    this.apiUrl = m[1]!;
    // The API is not replaced: dead, every later request fails, and a recovery measured on an
    // idle deployment would pass. Its death is a run problem, which fails the drill.
    void api.exited.then((exit) => {
      if (!this.stopping)
        this.errors.push(
          `the API process exited on its own (${JSON.stringify(exit)}): ${api.logTail.slice(-500)}`,
        );
    });
    await Promise.all(Array.from({ length: this.options.workers }, (_, i) => this.startWorker(i + 1, '')));
  }

  /** Starts a new incarnation in `slot` and resolves once it is running. */
  async startWorker(slot: number, failpoints: string): Promise<Incarnation> {
    const n = (this.counts.get(slot) ?? 0) + 1;
    this.counts.set(slot, n);
    const name = n === 1 ? `W${slot}` : `W${slot}.${n - 1}`;
    const child = new Child(
      name,
      ['--role', 'worker', '--config', CONFIG],
      this.env(failpoints),
      this.options.logDir,
    );
    const inc: Incarnation = {
      name,
      slot,
      pid: child.process.pid ?? -1,
      failpoints,
      startedAt: Date.now(),
      ready: false,
      killedByDrill: false,
      stopping: false,
    };
    this.incarnations.push(inc);
    this.current.set(slot, { child, inc });
    void child.exited.then((exit) => this.onExit(slot, child, inc, exit));
    await child.waitForLine(/running/);
    inc.ready = true;
    return inc;
  }

  private onExit(
    slot: number,
    child: Child,
    inc: Incarnation,
    exit: { code: number | null; signal: NodeJS.Signals | null },
  ): void {
    inc.exit = exit;
    inc.exitedAt = Date.now();
    if (inc.killedByDrill) this.kills.byDrill++;
    else if (exit.signal === 'SIGKILL' && inc.failpoints) this.kills.byFailpoint++;
    else if (!inc.stopping) {
      this.kills.other++;
      this.errors.push(
        `${inc.name} exited on its own (${JSON.stringify(exit)}): ${child.logTail.slice(-500)}`,
      );
    }
    if (this.current.get(slot)?.child !== child) return;
    this.current.delete(slot);
    if (this.stopping || inc.stopping) return;
    const restart = this.startWorker(slot, this.failpointsForRestart()).catch((error: unknown) => {
      this.errors.push(`could not restart worker slot ${slot}: ${String(error)}`);
    });
    this.restarts.add(restart);
    void restart.finally(() => this.restarts.delete(restart));
  }

  /** Live, ready worker incarnations. */
  liveWorkers(): Incarnation[] {
    return [...this.current.values()].map((c) => c.inc).filter((i) => i.ready && !i.exit);
  }

  /** Worker processes alive and running now (a replacement counts once it has started its worker). */
  workersAlive(): number {
    return this.incarnations.filter((i) => i.ready && !i.exit).length;
  }

  /**
   * Processes that may hold database connections now: the live ones, and workers that exited in
   * the last `lingerMs` (the server may not have noticed their sockets closing yet).
   */
  connectionHolders(lingerMs = 1000): number {
    const t = Date.now();
    const workers = this.incarnations.filter((i) => !i.exit || t - (i.exitedAt ?? 0) < lingerMs).length;
    const api =
      this.api && this.api.process.exitCode === null && this.api.process.signalCode === null ? 1 : 0;
    return workers + api;
  }

  /** pids of live child processes (API and workers), for the SQLite connection count. */
  livePids(): number[] {
    const pids = this.incarnations.filter((i) => !i.exit && i.pid > 0).map((i) => i.pid);
    if (this.api?.process.pid && this.api.process.exitCode === null && this.api.process.signalCode === null)
      pids.push(this.api.process.pid);
    return pids;
  }

  /** SIGKILLs a worker incarnation; it is replaced by `onExit`. Resolves once it is gone. */
  async kill(inc: Incarnation): Promise<void> {
    const entry = this.current.get(inc.slot);
    if (!entry || entry.inc !== inc || inc.exit) return;
    inc.killedByDrill = true;
    entry.child.process.kill('SIGKILL');
    await entry.child.exited;
  }

  /** Replaces a worker gracefully (SIGTERM, then a clean start): to disarm failpoints. */
  async replace(inc: Incarnation, failpoints = ''): Promise<void> {
    const entry = this.current.get(inc.slot);
    if (!entry || entry.inc !== inc || inc.exit) return;
    inc.stopping = true;
    entry.child.process.kill('SIGTERM');
    await entry.child.exited;
    await this.startWorker(inc.slot, failpoints);
  }

  /** Resolves once no replacement is still starting. */
  async settled(): Promise<void> {
    while (this.restarts.size > 0) await Promise.all([...this.restarts]);
  }

  /** Stops everything: SIGTERM (graceful), then SIGKILL after `graceMs`; closes the stub. */
  async stop(graceMs = 8000): Promise<void> {
    this.stopping = true;
    await this.settled().catch(() => {});
    const children = [...this.current.values()].map((c) => c.child);
    if (this.api) children.push(this.api);
    for (const { inc } of this.current.values()) inc.stopping = true;
    for (const c of children)
      if (c.process.exitCode === null && c.process.signalCode === null) c.process.kill('SIGTERM');
    await Promise.all(
      children.map(async (c) => {
        let timer: NodeJS.Timeout | undefined;
        const killed = new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            c.process.kill('SIGKILL');
            resolve();
          }, graceMs);
        });
        await Promise.race([c.exited, killed]);
        clearTimeout(timer);
        await c.exited;
      }),
    );
    await this.stub?.close();
  }

  /** SIGKILLs every child at once (the drill itself is being interrupted). */
  killAll(): void {
    this.stopping = true;
    for (const { child } of this.current.values()) child.process.kill('SIGKILL');
    this.api?.process.kill('SIGKILL');
  }
}
