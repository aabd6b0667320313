/**
 * @module store/sqlite/file-identity
 * Whether the path a store opened still names the file it has open. Deleted under a running
 * process (a clean-up script, a volume re-provisioned, `rm -rf data/`), the file lives on for that
 * process alone: every submit is acknowledged and every end written, and all of it is gone when
 * the process exits, while the next process to open the path makes an empty store. SQLite raises
 * nothing. Checked once a second by the file's device and inode: from the first check that finds
 * the path gone or naming another file, every call of the store fails `store-unavailable`, so
 * clients are refused (`503`) instead of answered with work that will be lost, and `/readyz` says
 * not ready. Up to a second of calls may still be taken in between.
 */
import { statSync } from 'node:fs';
import { resolve } from 'node:path';

const CHECK_MS = 1000;

/** The device and inode a store's path named when it was opened, checked once a second. */
export class FileIdentity {
  private readonly path: string;
  private readonly dev: number;
  private readonly ino: number;
  private lostReason: string | undefined;
  private readonly timer: NodeJS.Timeout;

  private constructor(path: string, dev: number, ino: number) {
    this.path = path;
    this.dev = dev;
    this.ino = ino;
    this.timer = setInterval(() => this.check(), CHECK_MS);
    this.timer.unref();
  }

  /** After the file is open; undefined for a database that has no file of its own to lose. */
  static watch(path: string): FileIdentity | undefined {
    if (path === '' || path === ':memory:' || path.startsWith('file:')) return undefined;
    const absolute = resolve(path);
    try {
      const { dev, ino } = statSync(absolute);
      return new FileIdentity(absolute, dev, ino);
    } catch {
      return undefined;
    }
  }

  /** Why the store must refuse calls, once the path no longer names the open file. */
  get lost(): string | undefined {
    return this.lostReason;
  }

  check(): string | undefined {
    if (this.lostReason) return this.lostReason;
    let now: { dev: number; ino: number } | undefined;
    try {
      now = statSync(this.path);
    } catch (error) {
      // Unreadable for a moment (EACCES on a folder being fixed, say) is not proof it is gone.
      if ((error as { code?: string }).code !== 'ENOENT') return undefined;
    }
    if (now && now.dev === this.dev && now.ino === this.ino) return undefined;
    this.lostReason =
      `SQLite: the database file ${this.path} was ${now ? 'replaced by another file' : 'deleted'} while ` +
      'this process had it open: what the store writes now would be lost when the process exits, so it ' +
      'takes nothing more. Before this process ends, copy the file it still has open out of ' +
      `/proc/${process.pid}/fd/ (on Linux; its -wal beside it, if listed) to the path, then restart it`;
    clearInterval(this.timer);
    return this.lostReason;
  }

  stop(): void {
    clearInterval(this.timer);
  }
}
