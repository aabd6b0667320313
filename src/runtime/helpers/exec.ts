/**
 * @module runtime/helpers/exec
 * `ctx.exec`: a subprocess bound to its attempt.
 *
 * - Started with `child_process.spawn`, no shell unless asked: the arguments reach the program as
 *   they are, never parsed by `/bin/sh` (no injection through an input value).
 * - The leader of its own process group (process-group.ts): when the call's signal fires
 *   (deadline, attempt timeout, cancel, lost lease, shutdown, the caller's signal, the end of the
 *   attempt) the whole group gets `SIGTERM`, then `SIGKILL` after `killGraceMs`, and the promise
 *   rejects with the signal's typed reason once the group is gone.
 * - Output: stdout and stderr are each kept in memory up to `maxOutputBytes` (beyond it the rest
 *   is read and dropped, so the child never blocks on a full pipe, and the result says
 *   `…Truncated: true`), or written to a file in a fresh `ctx.tempDir()` (`stdout: 'file'`):
 *   the child writes to the file directly, and the bytes count against the kind's
 *   `maxTempBytes`, the only cap in that mode.
 * - Tracked: the attempt's cleanup stops and awaits every group still alive, including one whose
 *   leader exited normally but left members running. Nothing outlives the attempt, except a
 *   process that left the group on purpose (`setsid`, a daemon): see process-group.ts.
 *
 * A normal run resolves when the leader has exited and its output is closed, whatever its exit
 * code: the handler decides what a non-zero code means. Only a spawn failure (`ENOENT`: no such
 * program, `EACCES`, a missing `cwd`) rejects with Node's own error.
 */
import { spawn } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { InvalidArgument } from '../../core/errors/index.js';
import { groupsSupported, ProcessGroup } from './process-group.js';
import type { AttemptScope } from './scope.js';

export const DEFAULT_KILL_GRACE_MS = 2000;
export const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024;

export interface ExecOptions {
  /**
   * Working directory. `'temp'`: a fresh directory from `ctx.tempDir()` (so a relative directory
   * named `temp` must be written `./temp`). Default: the worker's own working directory.
   */
  cwd?: string;
  /** The child's environment. Default: the worker's (`process.env`): pass one to limit what it sees. */
  env?: NodeJS.ProcessEnv;
  /** Written to the child's stdin, which is then closed. Default: stdin is `/dev/null`. */
  input?: string | Uint8Array;
  /** Run the command through a shell (`true`: `/bin/sh`). Default false. Never with untrusted input. */
  shell?: boolean | string;
  /** Between `SIGTERM` and `SIGKILL` once the call is aborted. Default 2000 ms. */
  killGraceMs?: number;
  /** Bytes of stdout, and of stderr, kept in memory (`'capture'` mode). Default 1 MiB each. */
  maxOutputBytes?: number;
  /** `'capture'` (default): in memory up to `maxOutputBytes`; `'file'`: to `stdoutPath`. */
  stdout?: 'capture' | 'file';
  /** Like `stdout`, for stderr. */
  stderr?: 'capture' | 'file';
  /** Another signal that stops the process (besides the attempt's own). */
  signal?: AbortSignal;
}

export interface ExecResult {
  pid: number;
  /** The exit code, or null if the process was ended by a signal. */
  code: number | null;
  /** The signal that ended the process, or null. */
  signal: NodeJS.Signals | null;
  /** Captured stdout (UTF-8; empty in `'file'` mode). */
  stdout: string;
  stderr: string;
  /** The process wrote more than `maxOutputBytes` to stdout: `stdout` holds the first bytes only. */
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** In `'file'` mode: the file inside a `ctx.tempDir()` folder that holds all of stdout. */
  stdoutPath: string | null;
  stderrPath: string | null;
}

export interface ExecEnv {
  scope: AttemptScope;
  /** The attempt's `ctx.tempDir()` (tracked, counted, removed at the end of the attempt). */
  tempDir(): string;
}

/** The first `cap` bytes of a stream; the rest is read and counted, not kept. */
class Capture {
  readonly #chunks: Buffer[] = [];
  #kept = 0;
  truncated = false;

  constructor(
    stream: Readable | null,
    private readonly cap: number,
  ) {
    stream?.on('data', (chunk: Buffer) => this.#add(chunk));
  }

  #add(chunk: Buffer): void {
    const room = this.cap - this.#kept;
    if (chunk.length > room) this.truncated = true;
    if (room <= 0) return;
    const part = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.#chunks.push(part);
    this.#kept += part.length;
  }

  text(): string {
    return Buffer.concat(this.#chunks).toString('utf8');
  }
}

function checkOptions(options: ExecOptions): { graceMs: number; cap: number } {
  const graceMs = options.killGraceMs ?? DEFAULT_KILL_GRACE_MS;
  const cap = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
  if (!Number.isFinite(graceMs) || graceMs < 0)
    throw new InvalidArgument('exec: killGraceMs must be a finite number ≥ 0');
  if (!Number.isSafeInteger(cap) || cap < 0)
    throw new InvalidArgument('exec: maxOutputBytes must be an integer ≥ 0');
  return { graceMs, cap };
}

/** Runs `command` with `args` as a subprocess bound to the attempt (see the module header). */
export async function exec(
  env: ExecEnv,
  command: string,
  args: readonly string[] = [],
  options: ExecOptions = {},
): Promise<ExecResult> {
  const { graceMs, cap } = checkOptions(options);
  const { scope } = env;
  const bound = scope.bind(options.signal);
  if (bound.signal.aborted) throw bound.reason();

  const cwd = options.cwd === 'temp' ? env.tempDir() : options.cwd;
  const outDir = options.stdout === 'file' || options.stderr === 'file' ? env.tempDir() : undefined;
  const stdoutPath = options.stdout === 'file' ? join(outDir!, 'stdout') : null;
  const stderrPath = options.stderr === 'file' ? join(outDir!, 'stderr') : null;
  // The child gets its own copy of each descriptor at spawn; the worker closes its copy at once.
  const fds: number[] = [];
  const open = (path: string | null) => {
    if (path === null) return 'pipe' as const;
    const fd = openSync(path, 'w');
    fds.push(fd);
    return fd;
  };
  let child: ReturnType<typeof spawn>;
  try {
    child = spawn(command, [...args], {
      cwd,
      env: options.env,
      shell: options.shell ?? false,
      detached: groupsSupported,
      windowsHide: true,
      stdio: [options.input === undefined ? 'ignore' : 'pipe', open(stdoutPath), open(stderrPath)],
    });
  } finally {
    for (const fd of fds) closeSync(fd);
  }
  const out = new Capture(child.stdout, cap);
  const err = new Capture(child.stderr, cap);
  if (options.input !== undefined) {
    // A child that exits without reading its input closes the pipe: EPIPE is not our failure.
    child.stdin?.on('error', () => {});
    child.stdin?.end(options.input);
  }

  const pid = child.pid;
  if (pid === undefined) {
    // Spawning failed; Node reports why on the next tick.
    return new Promise((_resolve, reject) => child.once('error', reject));
  }
  const group = new ProcessGroup(child as typeof child & { pid: number }, scope.log);
  scope.log.debug({ command, pid }, 'subprocess started');
  // If this worker is killed outright, the next one to start kills the group (temp-dirs.ts).
  const forgetGroup = groupsSupported ? scope.registerGroup(pid) : () => {};

  const removeTracked = scope.track({
    stop: () => (group.gone() ? Promise.resolve() : group.terminate(graceMs)).finally(forgetGroup),
  });
  const untrack = () => {
    removeTracked();
    if (group.gone()) forgetGroup();
  };
  let settled = false;
  return new Promise<ExecResult>((resolve, reject) => {
    const onAbort = () => {
      const reason = bound.reason();
      scope.log.debug(
        { command, pid, reason: (reason as { code?: unknown })?.code },
        'stopping a subprocess',
      );
      void group.terminate(graceMs).then(() => {
        // Only a process that left the group could still hold the pipes: stop reading them.
        child.stdout?.destroy();
        child.stderr?.destroy();
        settled = true;
        untrack();
        reject(reason);
      });
    };
    child.once('close', (code, signal) => {
      if (bound.signal.aborted) return; // the abort path settles, once the group is gone
      settled = true;
      bound.signal.removeEventListener('abort', onAbort);
      // A leader that exited normally may have left members of its group running: they stay
      // tracked, and the end of the attempt stops them.
      if (group.gone()) untrack();
      scope.log.debug({ command, pid, code, signal }, 'subprocess exited');
      resolve({
        pid,
        code,
        signal,
        stdout: out.text(),
        stderr: err.text(),
        stdoutTruncated: out.truncated,
        stderrTruncated: err.truncated,
        stdoutPath,
        stderrPath,
      });
    });
    child.once('error', (error) => {
      // After a successful spawn, `error` only reports a failed kill(); the group handles those.
      if (!settled) scope.log.warn({ err: error, command, pid }, 'subprocess error');
    });
    bound.signal.addEventListener('abort', onAbort, { once: true });
    if (bound.signal.aborted) onAbort();
  });
}
