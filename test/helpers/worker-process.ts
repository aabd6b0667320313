/**
 * Real worker processes for the process-level fault tests: spawns test/fixtures/worker-process.mjs
 * (which runs the built dist/), reads the JSON lines it prints (its events on stdout, the engine's
 * pino log on stderr), and lets a test wait on them, on its exit, or on the kernel reporting it
 * stopped. Every process spawned here is tracked so `killAllWorkers()` can leave nothing behind
 * after a test.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { SluiceOptions } from '../../src/index.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '../..');
const script = join(root, 'test/fixtures/worker-process.mjs');

/** One line the worker printed. */
export interface WorkerEvent {
  event:
    | 'ready'
    | 'attempt'
    | 'effect-error'
    | 'stopped'
    | 'temp-held'
    | 'exec-held'
    | 'poison'
    | 'neighbour';
  [field: string]: unknown;
}

/** One line of the engine's pino log (stderr), e.g. `{level: 40, msg: 'claim failed', retryInMs: 400}`. */
export interface WorkerLog {
  level: number;
  msg: string;
  [field: string]: unknown;
}

export interface WorkerExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/**
 * Admission and budget configuration of a worker process (its `SLUICE_CONFIG`, JSON): the same
 * object configures the test process's own `Sluice` in the rig (test/helpers/process-rig.ts),
 * so both sides of the store agree on classes, caps and kinds.
 */
export interface WorkerConfig {
  classes?: SluiceOptions['classes'];
  tenants?: SluiceOptions['tenants'];
  retryBudget?: SluiceOptions['retryBudget'];
  /** Worker slots per class in each process (classes not listed: `SLOTS`). */
  slots?: Record<string, number>;
  /** The `charge` kind's class (default `default`) and work before its effect, in ms. */
  charge?: { class?: string; workMs?: number };
  /** Also define an `export` kind (input `{ n }`, no effect) in this class, working `workMs`. */
  export?: { class?: string; workMs?: number };
}

export interface WorkerProcessOptions {
  /** The store: a SQLite file path, or a `postgres://` URL. */
  db: string;
  /** The PostgreSQL schema (with a `postgres://` db). */
  schema?: string;
  providerUrl: string;
  /** Identity in leases and attempt history. */
  id: string;
  /** `SLUICE_FAILPOINTS`, e.g. `C2=kill`. */
  failpoints?: string;
  /** Admission and budget configuration (`SLUICE_CONFIG`). */
  config?: WorkerConfig;
  /** Further environment: LEASE_MS, SLOTS, MAX_LEASE_EXPIRIES, LOOKUP… */
  env?: Record<string, string>;
}

const live = new Set<WorkerProcess>();

export class WorkerProcess {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly events: WorkerEvent[] = [];
  /** The engine's log lines, parsed (only those at or above `SLUICE_LOG_LEVEL`: default `error`). */
  readonly logs: WorkerLog[] = [];
  readonly exited: Promise<WorkerExit>;
  private stderr = '';
  private exitInfo: WorkerExit | undefined;
  private readonly listeners = new Set<() => void>();

  constructor(readonly options: WorkerProcessOptions) {
    this.child = spawn(process.execPath, [script], {
      cwd: root,
      stdio: ['pipe', 'pipe', 'pipe'],
      env: {
        ...process.env,
        SLUICE_DB: options.db,
        SLUICE_SCHEMA: options.schema ?? '',
        PROVIDER_URL: options.providerUrl,
        WORKER_ID: options.id,
        SLUICE_FAILPOINTS: options.failpoints ?? '',
        SLUICE_LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'error',
        SLUICE_CONFIG: options.config ? JSON.stringify(options.config) : '',
        ...options.env,
      },
    });
    if (this.child.pid === undefined) throw new Error(`could not spawn worker ${options.id}`);
    this.pid = this.child.pid;
    live.add(this);
    this.child.stdin?.on('error', () => {});
    createInterface({ input: this.child.stderr! }).on('line', (line) => {
      this.stderr = `${this.stderr}${line}\n`.slice(-20_000);
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        return; // a crash's stack trace, a warning from Node: kept in the tail only
      }
      if (typeof (parsed as WorkerLog | null)?.msg !== 'string') return;
      this.logs.push(parsed as WorkerLog);
      for (const notify of [...this.listeners]) notify();
    });
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      try {
        this.events.push(JSON.parse(line) as WorkerEvent);
      } catch {
        return; // not one of ours (a stray console.log): ignore
      }
      for (const notify of [...this.listeners]) notify();
    });
    this.exited = new Promise((resolve) => {
      this.child.once('exit', (code, signal) => {
        this.exitInfo = { code, signal };
        live.delete(this);
        for (const notify of [...this.listeners]) notify();
        resolve(this.exitInfo);
      });
    });
  }

  get alive(): boolean {
    return this.exitInfo === undefined;
  }

  /** The tail of its stderr (pino warnings, crashes): for failure messages. */
  get log(): string {
    return this.stderr;
  }

  /**
   * The first event (already printed or still to come) that matches. Fails if the process
   * exits without printing one, or after `timeoutMs` (a failure guard, not a synchroniser).
   */
  waitFor(match: (e: WorkerEvent) => boolean, what: string, timeoutMs = 20_000): Promise<WorkerEvent> {
    return this.until(() => this.events.find(match), what, timeoutMs);
  }

  /** Like `waitFor`, on the engine's log lines (stderr). */
  waitForLog(match: (l: WorkerLog) => boolean, what: string, timeoutMs = 20_000): Promise<WorkerLog> {
    return this.until(() => this.logs.find(match), what, timeoutMs);
  }

  /**
   * Resolves with `check()`'s first defined value, evaluated now and after every line the
   * process prints. Fails if it exits first, or after `timeoutMs` (a failure guard).
   */
  until<T>(check: () => T | undefined, what: string, timeoutMs = 20_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const test = () => {
        const found = check();
        if (found !== undefined) return done(() => resolve(found));
        if (this.exitInfo)
          return done(() =>
            reject(
              new Error(
                `worker ${this.options.id} exited (${JSON.stringify(this.exitInfo)}) before ${what}\n${this.stderr}`,
              ),
            ),
          );
      };
      const timer = setTimeout(
        () =>
          done(() =>
            reject(new Error(`worker ${this.options.id}: no ${what} in ${timeoutMs} ms\n${this.stderr}`)),
          ),
        timeoutMs,
      );
      const done = (settle: () => void) => {
        clearTimeout(timer);
        this.listeners.delete(test);
        settle();
      };
      this.listeners.add(test);
      test();
    });
  }

  /** Resolves once the worker has started its claim loops. */
  ready(): Promise<WorkerEvent> {
    return this.waitFor((e) => e.event === 'ready', '"ready"');
  }

  signal(signal: NodeJS.Signals): void {
    if (this.alive) this.child.kill(signal);
  }

  /** Resolves with how the process ended; fails after `timeoutMs` (a failure guard) if it has not. */
  exit(timeoutMs = 20_000): Promise<WorkerExit> {
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      this.exited,
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(new Error(`worker ${this.options.id} still alive after ${timeoutMs} ms\n${this.stderr}`)),
          timeoutMs,
        );
      }),
    ]).finally(() => clearTimeout(timer));
  }

  /** Waits until the kernel reports the process stopped (SIGSTOP): scheduler state `T`. */
  async stopped(timeoutMs = 20_000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      if (processState(this.pid) === 'T') return;
      if (!this.alive)
        throw new Error(`worker ${this.options.id} exited instead of stopping\n${this.stderr}`);
      if (performance.now() > deadline)
        throw new Error(`worker ${this.options.id} did not stop in ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }
}

/** The scheduler state letter of a process (`R`, `S`, `T` stopped…), or undefined if it is gone. */
function processState(pid: number): string | undefined {
  if (existsSync('/proc/self/stat')) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      // The command name (field 2) is parenthesised and may contain spaces: the state follows it.
      return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    } catch {
      return undefined;
    }
  }
  try {
    return execFileSync('ps', ['-o', 'stat=', '-p', String(pid)], { encoding: 'utf8' }).trim()[0];
  } catch {
    return undefined; // ps exits 1 when there is no such process
  }
}

export function assertBuilt(): void {
  for (const file of ['dist/index.js', 'dist/testing/index.js']) {
    if (!existsSync(join(root, file)))
      throw new Error(`${file} is missing: build first (node scripts/build.mjs, or npm test)`);
  }
}

/** SIGKILLs every worker process still alive (stopped ones included) and waits for their exit. */
export async function killAllWorkers(): Promise<void> {
  const all = [...live];
  for (const w of all) w.child.kill('SIGKILL');
  await Promise.all(all.map((w) => w.exited));
}
