/**
 * @module runtime/temp-dirs
 * Temporary directories for handlers. Each worker owns `<root>/<pid>-<nonce>/`; a handler's
 * directories live under it and are removed on every exit path of the attempt (success, error,
 * timeout, abort). A worker killed outright leaves its folder behind: the next worker to start
 * on the machine removes the folders of processes that no longer exist, and those named for its
 * own pid that no worker of its own made (an earlier process had the pid).
 *
 * The same folder records the process groups of the worker's running subprocesses (`ctx.exec`,
 * `.group-<pgid>` holding the leader's start time), so the sweep can also kill what a killed
 * worker left running — re-parented to init, nothing else would stop it. A group is killed only
 * when it is provably the recorded one: its leader is alive with the recorded start time, or the
 * leader is gone (Linux never gives a new process a pid still used as a group id, so remaining
 * members belong to the recorded group). Linux only; elsewhere groups are not recorded.
 *
 * And only when this user recorded it: the folder and its `.group-` file must be this process's
 * user's. Anyone who can write into the root could otherwise plant a file naming any process
 * group, and a worker would kill it (every process on the machine, for a worker run as root).
 * The default root is the user's own (`<tmpdir>/sluice-<uid>`), made private (0700).
 */
import { randomBytes } from 'node:crypto';
import { lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { lstat, readdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeFolder } from '../core/make-folder.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * The owner folders this process made, whichever copy of this module made them: a folder named
 * for this process's pid is a sibling worker's only if it is here. Any other one with the same
 * pid was left by an earlier process that had it (a container's PID 1 after a restart).
 */
const OWNED = ownedFolders();

function ownedFolders(): Set<string> {
  const registry = globalThis as Record<symbol, Set<string> | undefined>;
  const key = Symbol.for('sluice.temp-dirs.owned');
  const owned = registry[key] ?? new Set<string>();
  registry[key] = owned;
  return owned;
}

/** Folders this module makes: the user's alone (a handler's files may hold a tenant's data). */
const PRIVATE = 0o700;

const safe = (s: string) => s.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 40);

/** A recorded subprocess group: `.group-<pgid>` in the worker's folder (never a temp dir's name). */
const GROUP_PREFIX = '.group-';

/** A process's start time (clock ticks since boot, /proc/<pid>/stat field 22), or null. */
function startTime(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may contain spaces: count fields after its closing parenthesis.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

/** This process's user, where the platform has users (not on Windows). */
const UID = process.getuid?.();

/** The default root: this user's own, so that no other user can write into it. */
export function defaultTempRoot(): string {
  return join(tmpdir(), UID === undefined ? 'sluice' : `sluice-${UID}`);
}

/** A plain file or folder (not a link) this process's user owns. */
function ours(path: string): boolean {
  if (UID === undefined) return true;
  try {
    const stat = lstatSync(path);
    return !stat.isSymbolicLink() && stat.uid === UID;
  } catch {
    return false;
  }
}

/** Kills the groups a dead worker recorded, where they are provably still the recorded ones. */
function killRecordedGroups(folder: string): void {
  if (!ours(folder)) return;
  let files: string[];
  try {
    files = readdirSync(folder).filter((f) => f.startsWith(GROUP_PREFIX));
  } catch {
    return;
  }
  for (const name of files) {
    const pgid = Number(name.slice(GROUP_PREFIX.length));
    if (!Number.isInteger(pgid) || pgid <= 1) continue;
    if (!ours(join(folder, name))) continue;
    const recorded = readFileSync(join(folder, name), 'utf8').trim();
    const now = startTime(pgid);
    if (now !== null && now !== recorded) continue; // the pid was reused: not our group
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      // ESRCH: nothing left in the group
    }
  }
}

export class TempDirs {
  readonly ownerDir: string;

  constructor(readonly root: string) {
    this.ownerDir = join(root, `${process.pid}-${randomBytes(4).toString('hex')}`);
    OWNED.add(this.ownerDir);
  }

  /** Removes the folders of dead workers; returns how many it removed. */
  sweepOrphans(): number {
    let removed = 0;
    let entries: string[];
    try {
      entries = readdirSync(this.root);
    } catch {
      return 0;
    }
    for (const name of entries) {
      const pid = Number(name.split('-')[0]);
      if (!Number.isInteger(pid) || pid <= 0) continue;
      if (pid === process.pid ? OWNED.has(join(this.root, name)) : alive(pid)) continue;
      killRecordedGroups(join(this.root, name));
      rmSync(join(this.root, name), { recursive: true, force: true });
      removed++;
    }
    return removed;
  }

  /** A new directory for one attempt of one operation. */
  create(tenant: string, id: string, epoch: number): string {
    makeFolder(this.ownerDir, PRIVATE);
    return mkdtempSync(join(this.ownerDir, `${safe(tenant)}-${safe(id)}-${epoch}-`));
  }

  remove(path: string): void {
    rmSync(path, { recursive: true, force: true });
  }

  /**
   * Records a running subprocess group of this worker (see the module header); returns the
   * function that forgets it once the group is gone.
   */
  registerGroup(pgid: number): () => void {
    const start = process.platform === 'linux' ? startTime(pgid) : null;
    if (start === null) return () => {};
    const file = join(this.ownerDir, `${GROUP_PREFIX}${pgid}`);
    try {
      makeFolder(this.ownerDir, PRIVATE);
      writeFileSync(file, start);
    } catch {
      return () => {};
    }
    return () => rmSync(file, { force: true });
  }

  /** Bytes on disk under `path` (files, recursively; symlinks are not followed). */
  static bytes(path: string): number {
    let total = 0;
    let entries: import('node:fs').Dirent[];
    try {
      entries = readdirSync(path, { withFileTypes: true });
    } catch {
      return 0;
    }
    for (const entry of entries) {
      const child = join(path, entry.name);
      if (entry.isDirectory()) total += TempDirs.bytes(child);
      else {
        try {
          total += lstatSync(child).size;
        } catch {
          // removed meanwhile
        }
      }
    }
    return total;
  }

  /**
   * `bytes`, walked without holding the event loop: every read of the folder and every file's
   * size is a call of its own the loop turns between. A handler that fills its folder with
   * hundreds of thousands of files made the synchronous walk take over a second, every quarter
   * of a second, and with it the heartbeats of every attempt of the worker.
   */
  static async bytesAsync(path: string): Promise<number> {
    let total = 0;
    let entries: import('node:fs').Dirent[];
    try {
      entries = await readdir(path, { withFileTypes: true });
    } catch {
      return 0;
    }
    for (const entry of entries) {
      const child = join(path, entry.name);
      if (entry.isDirectory()) total += await TempDirs.bytesAsync(child);
      else {
        try {
          total += (await lstat(child)).size;
        } catch {
          // removed meanwhile
        }
      }
    }
    return total;
  }

  /** Removes this worker's own folder (at stop). */
  removeOwn(): void {
    rmSync(this.ownerDir, { recursive: true, force: true });
    OWNED.delete(this.ownerDir);
  }
}
