/**
 * @module bench/lib/child
 * Node processes a case starts for one part of its work: an API server that must not share the
 * load generator's event loop and CPU accounting, or a worker whose memory must be its own (the
 * backlog's RSS would otherwise include the heap that built the backlog). A child gets its spec
 * as one JSON argument and answers on stdout with marker lines (`@@result <json>`,
 * `@@url <url>`, and a server's store calls so far as `@@calls <json>` when sent SIGUSR2);
 * anything else it prints goes to the case's stderr, or to a file for a server that logs a line
 * per request.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { openSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CallsSoFar } from './cost-window.js';

const distDir = join(dirname(fileURLToPath(import.meta.url)), '..');

/** The last `lines` lines of a log file, for the error message of a failed child. */
export function tail(file: string, lines = 20): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '';
  }
}

function onLines(child: ChildProcess, each: (line: string) => void): void {
  let out = '';
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
    out += chunk;
    let nl = out.indexOf('\n');
    while (nl >= 0) {
      each(out.slice(0, nl));
      out = out.slice(nl + 1);
      nl = out.indexOf('\n');
    }
  });
}

/** Runs `dist/<script>` to its end and returns what it printed as `@@result`. */
export function runChild<T>(script: string, spec: unknown, label: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(distDir, script), JSON.stringify(spec)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let result: T | undefined;
    onLines(child, (line) => {
      if (line.startsWith('@@result ')) result = JSON.parse(line.slice(9)) as T;
      else if (line.trim()) console.log(`(${label}) ${line}`);
    });
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0 && result !== undefined) resolve(result);
      else reject(new Error(`${label} exited with code ${code}${result === undefined ? ', no result' : ''}`));
    });
  });
}

export interface Server {
  url: string;
  pid: number;
  /** The store calls the server made so far (asks it with SIGUSR2). */
  calls(): Promise<CallsSoFar>;
  /** SIGTERM, then waits for the exit (the service shuts down gracefully). */
  stop(): Promise<void>;
}

/**
 * Starts `dist/<script>`, whose stderr goes to `logFile`, and resolves once it printed
 * `@@url <url>`. A server that exits first, or takes over `timeoutMs`, fails with its log's tail.
 */
export function startServer(
  script: string,
  spec: unknown,
  logFile: string,
  timeoutMs = 60_000,
): Promise<Server> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(distDir, script), JSON.stringify(spec)], {
      stdio: ['ignore', 'pipe', openSync(logFile, 'a')],
    });
    const exited = new Promise<void>((done) => child.once('close', () => done()));
    const waiting: Array<(calls: CallsSoFar) => void> = [];
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${script} did not listen within ${timeoutMs} ms\n${tail(logFile)}`));
    }, timeoutMs);
    onLines(child, (line) => {
      if (line.startsWith('@@calls ')) {
        const raw = JSON.parse(line.slice(8)) as {
          byMethod: [string, number][];
          msByMethod: [string, number][];
        };
        waiting.shift()?.({ byMethod: new Map(raw.byMethod), msByMethod: new Map(raw.msByMethod) });
        return;
      }
      if (!line.startsWith('@@url ')) return;
      clearTimeout(timer);
      resolve({
        url: line.slice(6).trim(),
        pid: child.pid!,
        calls() {
          return new Promise((answer) => {
            waiting.push(answer);
            child.kill('SIGUSR2');
          });
        },
        async stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
          await exited;
        },
      });
    });
    child.on('error', reject);
    child.once('close', (code) => {
      clearTimeout(timer);
      reject(new Error(`${script} exited (code ${code}) before it listened\n${tail(logFile)}`));
    });
  });
}
