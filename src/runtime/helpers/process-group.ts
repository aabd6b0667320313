/**
 * @module runtime/helpers/process-group
 * A subprocess started as the leader of its own process group (`spawn(…, {detached: true})`
 * calls `setsid()` in the child, so the group id is the child's pid), and the way to stop the
 * whole group: `SIGTERM` to every member, then `SIGKILL` after a grace.
 *
 * Why the group and not the pid: a handler's `sh -c 'a | b'` or `make` starts grandchildren. Kill
 * only the leader and they are re-parented to init and run on, holding files in the attempt's
 * temporary folder and the output pipes open. Every process they start stays in the group unless
 * it calls `setsid()` itself (a daemon), which nothing short of a container or cgroup can follow.
 *
 * "Gone" means the leader has exited (Node reaps it: it is our child) and no member of the group
 * is still running. Grandchildren are not our children: no event tells us they exited, so after
 * the leader's exit the group is polled (from every 20 ms, backing off, for at most the grace).
 * An orphaned member that died is a zombie until init reaps it, and `kill(-pgid, 0)` still counts
 * zombies; some container inits reap only every second or so. So when `kill` still finds a
 * member, on Linux the process table (/proc) is read to see whether any member is still running
 * (state other than Z/X). Elsewhere the wait for a zombie ends at the grace at worst.
 *
 * POSIX only: on Windows there are no process groups to signal and only the leader is killed.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import type { Logger } from 'pino';
import { waitAtMost } from './scope.js';

const FIRST_POLL_MS = 20;
const MAX_POLL_MS = 200;
/** How long to wait for the group to be gone after `SIGKILL` before reporting it stuck. */
const AFTER_KILL_MS = 5000;

export const groupsSupported = process.platform !== 'win32';
const procfs = existsSync('/proc/self/stat');

/** Whether a process of group `pgid` is running (not a zombie), read from /proc (Linux). */
function runningMember(pgid: number): boolean {
  for (const entry of readdirSync('/proc')) {
    const first = entry.charCodeAt(0);
    if (first < 48 || first > 57) continue; // not a pid
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'latin1');
    } catch {
      continue; // exited meanwhile
    }
    // `pid (comm) state ppid pgrp …`: comm may hold spaces and parentheses, so cut at the last ')'.
    const [state, , pgrp] = stat.slice(stat.lastIndexOf(')') + 2).split(' ', 3);
    if (Number(pgrp) === pgid && state !== 'Z' && state !== 'X') return true;
  }
  return false;
}

export class ProcessGroup {
  readonly pid: number;
  /** Set once the leader has exited (and been reaped). */
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  readonly exited: Promise<void>;
  #terminating: Promise<void> | undefined;

  constructor(
    readonly child: ChildProcess & { pid: number },
    private readonly log: Logger,
  ) {
    this.pid = child.pid;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        resolve();
      });
    });
  }

  /** Sends `signal` to every member; false if none is left (or none may be signalled). */
  signal(signal: NodeJS.Signals | 0): boolean {
    try {
      if (groupsSupported) process.kill(-this.pid, signal);
      else if (this.exit) return false;
      else if (signal !== 0) this.child.kill(signal);
      return true;
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      // ESRCH: no member left. EPERM: the members we could signal are gone; those left changed
      // their user id (setuid) and are out of our reach.
      if (code === 'ESRCH' || code === 'EPERM') return false;
      throw error;
    }
  }

  /** The leader has exited and no member of the group is still running. */
  gone(): boolean {
    if (this.exit === undefined) return false;
    if (!this.signal(0)) return true;
    return groupsSupported && procfs && !runningMember(this.pid);
  }

  /**
   * `SIGTERM` to the group; waits (at most `graceMs`) for the leader to exit and the rest of the
   * group to go; then `SIGKILL` to whatever is left, and waits for it to go too. Idempotent: a
   * second call returns the first call's promise. Never rejects.
   */
  terminate(graceMs: number): Promise<void> {
    this.#terminating ??= this.#terminate(graceMs);
    return this.#terminating;
  }

  async #terminate(graceMs: number): Promise<void> {
    if (!this.signal('SIGTERM') && this.exit) return;
    if (await this.#gone(graceMs)) return;
    this.log.warn(
      { pid: this.pid, graceMs },
      'a subprocess group outlived SIGTERM and its grace: sending SIGKILL',
    );
    this.signal('SIGKILL');
    // SIGKILL cannot be caught, but death is not instant.
    if (!(await this.#gone(AFTER_KILL_MS))) {
      this.log.error(
        { pid: this.pid },
        'a subprocess group is still running after SIGKILL (uninterruptible sleep?): giving up waiting for it',
      );
    }
  }

  /** Waits at most `ms` for the leader's exit (an event), then for the group (polled). */
  async #gone(ms: number): Promise<boolean> {
    const until = performance.now() + ms;
    const left = () => Math.max(0, until - performance.now());
    if (!this.exit) await waitAtMost(this.exited, left());
    for (
      let poll = FIRST_POLL_MS;
      this.exit && left() > 0 && !this.gone();
      poll = Math.min(MAX_POLL_MS, poll * 1.5)
    )
      await sleep(Math.min(poll, left()));
    return this.gone();
  }
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
