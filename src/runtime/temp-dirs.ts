/**
 * @module runtime/temp-dirs
 * Temporary directories for handlers. Each worker owns `<root>/<pid>-<nonce>/`; a handler's
 * directories live under it and are removed on every exit path of the attempt (success, error,
 * timeout, abort). A worker killed outright leaves its folder behind: the next worker to start
 * on the machine removes the folders of processes that no longer exist.
 */
import { randomBytes } from 'node:crypto';
import { lstatSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const safe = (s: string) => s.replace(/[^A-Za-z0-9_.-]/g, '_').slice(0, 40);

export class TempDirs {
  readonly ownerDir: string;

  constructor(readonly root: string) {
    this.ownerDir = join(root, `${process.pid}-${randomBytes(4).toString('hex')}`);
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
      if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid || alive(pid)) continue;
      rmSync(join(this.root, name), { recursive: true, force: true });
      removed++;
    }
    return removed;
  }

  /** A new directory for one attempt of one operation. */
  create(tenant: string, id: string, epoch: number): string {
    mkdirSync(this.ownerDir, { recursive: true });
    return mkdtempSync(join(this.ownerDir, `${safe(tenant)}-${safe(id)}-${epoch}-`));
  }

  remove(path: string): void {
    rmSync(path, { recursive: true, force: true });
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

  /** Removes this worker's own folder (at stop). */
  removeOwn(): void {
    rmSync(this.ownerDir, { recursive: true, force: true });
  }
}
