/**
 * @module runtime/batcher
 * Application-level group commit. Calls made while a flush is being prepared or is in flight
 * are collected and handed to the store as one array, so N concurrent submits or completions
 * cost one transaction (one fsync) instead of N. One flush runs at a time: the next batch forms
 * while the current one commits, which is what lets throughput grow with load.
 *
 * A batch is one transaction, so one item the store refuses outright (a value a driver cannot
 * bind, text the database will not take) would fail every caller in it. A batch that fails with
 * an error that is not retryable is therefore sent again item by item, each caller answered on
 * its own: nothing of the failed batch was committed (a refused statement rolls its transaction
 * back; a failure after the commit is a lost connection, which is retryable and answered as it
 * came, to every caller).
 */
import { isSluiceError } from '../core/errors/index.js';

/** Whether a failed batch is answered as it failed, to every caller, rather than item by item. */
export const failsTheWholeBatch = (error: unknown): boolean => isSluiceError(error) && error.retryable;

/**
 * Returns a function that runs `fn` once on the next turn of the event loop (setImmediate),
 * however often it is called before then: every call made in this turn joins the same run.
 */
export function nextTurn(fn: () => void): () => void {
  let scheduled = false;
  return () => {
    if (scheduled) return;
    scheduled = true;
    setImmediate(() => {
      scheduled = false;
      fn();
    });
  };
}

/** An item waiting for the next flush, with the callbacks that answer its caller. */
export interface Queued<In, Out> {
  item: In;
  resolve: (out: Out) => void;
  reject: (error: unknown) => void;
}

export class Batcher<In, Out> {
  private queue: Array<Queued<In, Out>> = [];
  private running = false;
  private readonly kick = nextTurn(() => void this.flush());
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly flushFn: (items: In[]) => Promise<Out[]>,
    private readonly maxBatch = 500,
  ) {}

  add(item: In): Promise<Out> {
    return new Promise<Out>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.schedule();
    });
  }

  /**
   * Takes back the queued items `match` picks, before a flush sends them: the caller writes them
   * some other way and settles them with `resolve` or `reject`. Items already in flight are not
   * touched.
   */
  take(match: (item: In) => boolean): Array<Queued<In, Out>> {
    const taken: Array<Queued<In, Out>> = [];
    this.queue = this.queue.filter((q) => {
      if (!match(q.item)) return true;
      taken.push(q);
      return false;
    });
    return taken;
  }

  /** Resolves when nothing is queued or in flight. */
  idle(): Promise<void> {
    if (!this.running && this.queue.length === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private schedule(): void {
    if (!this.running) this.kick();
  }

  private async flush(): Promise<void> {
    if (this.running) return;
    const batch = this.queue.splice(0, this.maxBatch);
    if (batch.length === 0) {
      for (const w of this.idleWaiters.splice(0)) w();
      return;
    }
    this.running = true;
    try {
      const outs = await this.flushFn(batch.map((b) => b.item));
      for (const [i, b] of batch.entries()) b.resolve(outs[i] as Out);
    } catch (error) {
      if (batch.length === 1 || failsTheWholeBatch(error)) for (const b of batch) b.reject(error);
      else
        for (const b of batch) {
          try {
            b.resolve((await this.flushFn([b.item]))[0] as Out);
          } catch (alone) {
            b.reject(alone);
          }
        }
    } finally {
      this.running = false;
      if (this.queue.length > 0) this.schedule();
      else for (const w of this.idleWaiters.splice(0)) w();
    }
  }
}
