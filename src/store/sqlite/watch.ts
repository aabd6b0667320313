/**
 * @module store/sqlite/watch
 * Wake-ups across processes on one SQLite file. SQLite has no notifications, but two things
 * together make one: every commit writes the write-ahead log (an OS file-change event), and
 * `PRAGMA data_version` changes when another connection has committed (a read of shared memory,
 * no I/O). A subscribed store watches the WAL file; on a change it reads data_version and, only
 * when that moved, how many operations ever entered each class's queue (`classes.entered`, one
 * row per class, a count that only grows), and wakes each class whose count rose: a submit, a
 * retry, a redrive or a rescue in another process. An API process's submit then starts in an
 * idle worker process within milliseconds instead of at that worker's next poll (500 ms by
 * default), and an idle worker spends nothing between commits.
 *
 * A commit writes its frames, then flushes, then publishes itself in shared memory: the file
 * event comes before the commit is visible. So an event starts a short series of looks (2, 4, 8,
 * 16, 32 and 64 ms after it) that ends at the first one that sees data_version move. This
 * process's own commits raise events too, and cost such a series; while the file is busy, a look
 * every 2 ms at most.
 *
 * Only while a worker waits for work (`WakeInterest`): a busy one claims by itself whenever a
 * slot frees, and hearing the file then cost a draining worker a few percent of its rate. The
 * first event with nobody waiting closes the watch; when a loop starts to wait again, the file is
 * watched anew and a series of looks starts at once: the first compares with the counts last
 * seen, so it wakes for whatever entered meanwhile, and the rest catch a commit still being
 * published. Where the OS cannot watch the file (no inotify watches left, say), the store looks
 * every FALLBACK_INTERVAL_MS instead.
 *
 * The waiting count would not do: this process's own claims lower it unheard (its own commits do
 * not move data_version), so a submit elsewhere could bring it back to what the last look saw.
 */
import { type FSWatcher, watch } from 'node:fs';
import type { WakeInterest } from '../store.js';
import type { SqliteContext } from './connection.js';

/** After a file event, the pauses before each look for the commit it announced (64 ms in all). */
const LOOKS_AFTER_EVENT_MS = [2, 2, 4, 8, 16, 32];
/** How often to look where the WAL file cannot be watched. */
export const FALLBACK_INTERVAL_MS = 25;

export interface ClassWatch {
  /**
   * The classes that operations entered since the last look; `undefined` when no other
   * connection committed since (data_version did not move).
   */
  look(): string[] | undefined;
}

export function classWatch(ctx: SqliteContext): ClassWatch {
  const dataVersion = ctx.db.prepare('PRAGMA data_version').pluck();
  const counts = ctx.db.prepare('SELECT class, entered FROM classes').raw();
  const entered = new Map<string, number>();
  const read = () => {
    const rows = ctx.read(() => counts.all() as Array<[string, number]>);
    const rose: string[] = [];
    for (const [cls, n] of rows) {
      if (n > (entered.get(cls) ?? 0)) rose.push(cls);
      entered.set(cls, n);
    }
    return rose;
  };
  read(); // what is waiting now is the poll's to find; only what comes later wakes
  let version = dataVersion.get() as number;
  return {
    look() {
      const now = ctx.read(() => dataVersion.get() as number);
      if (now === version) return undefined;
      version = now;
      return read();
    },
  };
}

export interface WatchHandle {
  /**
   * `events`: the WAL file is watched (while a worker waits for work); `interval`: the OS could
   * not watch it, and the store looks on a timer.
   */
  readonly mode: 'events' | 'interval';
  /** Whether the WAL file is being watched at this moment. */
  readonly listening: boolean;
  stop(): void;
}

const ALWAYS: WakeInterest = { now: () => true, onStart: () => () => {} };

/**
 * Calls `onClass` for each class that another connection's commits put operations in, until
 * stopped (or the connection closes). Holds no timer or handle that would keep the process alive.
 */
export function watchClasses(
  ctx: SqliteContext,
  walPath: string,
  onClass: (cls: string) => void,
  interest: WakeInterest = ALWAYS,
): WatchHandle {
  const classes = classWatch(ctx);
  let stopped = false;
  let mode: WatchHandle['mode'] = 'events';
  let timer: NodeJS.Timeout | undefined;
  let watcher: FSWatcher | undefined;
  let removeInterest = () => {};
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
    clearInterval(timer);
    watcher?.close();
    watcher = undefined;
    removeInterest();
  };
  /** One look; true when another connection had committed since the last. */
  const look = (): boolean => {
    if (stopped) return false;
    if (!ctx.db.open) {
      stop();
      return false;
    }
    let rose: string[] | undefined;
    try {
      rose = classes.look();
    } catch {
      return false; // a look that failed (a closing file, say) is made again at the next event
    }
    for (const cls of rose ?? []) onClass(cls);
    return rose !== undefined;
  };

  // The series of looks after a file event (see the module header). Each event starts the
  // series again, or keeps a look already due within its first delay: while the file is busy
  // (this process's own commits too) that is a look every LOOKS_AFTER_EVENT_MS[0] at most.
  let step = 0;
  let due = Number.POSITIVE_INFINITY;
  const lookIn = (ms: number) => {
    const at = performance.now() + ms;
    if (timer !== undefined && due <= at) return;
    clearTimeout(timer);
    due = at;
    timer = setTimeout(tick, ms);
    timer.unref();
  };
  const tick = () => {
    timer = undefined;
    due = Number.POSITIVE_INFINITY;
    if (!interest.now() || look() || ++step >= LOOKS_AFTER_EVENT_MS.length) step = 0;
    else lookIn(LOOKS_AFTER_EVENT_MS[step]!);
  };
  const series = () => {
    step = 0;
    lookIn(LOOKS_AFTER_EVENT_MS[0]!);
  };
  const poll = () => {
    mode = 'interval';
    watcher?.close();
    watcher = undefined;
    clearTimeout(timer);
    timer = setInterval(() => interest.now() && look(), FALLBACK_INTERVAL_MS);
    timer.unref();
  };
  const onEvent = () => {
    if (stopped || !watcher) return;
    if (interest.now()) return series();
    // Nobody waits for work: stop hearing the file (a draining worker's own commits would cost it
    // a few percent of its rate) until someone does.
    watcher.close();
    watcher = undefined;
  };
  const listen = (): boolean => {
    try {
      watcher = watch(walPath, { persistent: false }, onEvent);
    } catch {
      poll();
      return false;
    }
    watcher.on('error', () => {
      if (!stopped) poll();
    });
    return true;
  };

  if (listen()) {
    removeInterest = interest.onStart(() => {
      if (stopped || mode === 'interval' || watcher) return;
      // Commits made while nobody listened: the first look compares with what was last seen, and
      // the series catches one still being published.
      if (listen()) series();
    });
  }
  return {
    get mode() {
      return mode;
    },
    get listening() {
      return watcher !== undefined;
    },
    stop,
  };
}
