/**
 * @module runtime/worker
 * A bounded pool of worker slots per workload class. Each class has its own claim loop, so a
 * flood in `bulk` can never occupy an `interactive` slot. A loop claims for its free slots, runs
 * what it got, and sleeps until a wake-up (a local submit, another process's work announced by
 * the store), a freed slot worth a claim, or the poll interval. Claims and the attempts' ends go
 * through one channel per class (runtime/class-channel.ts), which writes ends together and claims
 * for their slots in the same call.
 *
 * A freed slot is worth a claim when work may be waiting that nothing will announce: the last
 * claim filled every slot it asked for (there may be more), the attempt's tenant has a running
 * cap (its next operation became claimable), or the store announces nothing. Otherwise a claim
 * there would find nothing, and one in flight delays the claim that a wake-up asks for meanwhile.
 * A claim that came back short while another transaction held what it needed
 * (`ClaimResult.contended`) is repeated after a short pause, doubling up to the poll interval
 * while it keeps happening: the lock lasts one transaction, and what it hid may be announced by
 * nothing.
 *
 * The worker also runs the process-wide heartbeat and the maintenance services (rescuer,
 * retention), and on `stop()` shuts down gracefully: no new claims, running attempts get a grace
 * period, and those still running are interrupted and released back to the queue.
 */

import { randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import type { Logger } from 'pino';
import type { ProviderBudgets } from '../admission/budgets.js';
import type { RetryBudgetConfig } from '../admission/retry-budget.js';
import { bounded, MAX_TIMER_MS } from '../core/bounds.js';
import { InvalidArgument, isStoreClosed, isStoreError, WorkerShutdown } from '../core/errors/index.js';
import { readThrown } from '../core/errors/thrown.js';
import type { EffectKeyFn } from '../effects/effect-key.js';
import { batchedJournal } from '../effects/journal.js';
import type { Journal } from '../effects/run-effect.js';
import type { SluiceEvents } from '../observability/events.js';
import { DueWakes } from '../queue/due-wakes.js';
import { Heartbeat } from '../queue/heartbeat.js';
import {
  type PeriodicTask,
  type RetentionPolicy,
  rescueAll,
  startMaintenance,
} from '../queue/maintenance.js';
import { listenForWork, type Wakeup } from '../queue/wakeup.js';
import type { Store } from '../store/store.js';
import type {
  ClaimParams,
  EffectBeginParams,
  EffectBeginResult,
  EffectMarkParams,
  FinishParams,
  LeaseRef,
  OperationRow,
  Settled,
} from '../store/types.js';
import { type AttemptReport, operationKey, runAttempt } from './attempt.js';
import type { AttemptStop } from './attempt-stop.js';
import { Batcher } from './batcher.js';
import { type ClaimedBatch, ClassChannel, type EndWritten } from './class-channel.js';
import type { Kind } from './kinds.js';
import { defaultTempRoot, TempDirs } from './temp-dirs.js';
import { checkWorkerOptions, DEFAULT_LEASE_MS, type WorkerOptions } from './worker-options.js';

export { checkWorkerOptions, DEFAULT_LEASE_MS, MAX_SLOTS, type WorkerOptions } from './worker-options.js';

/** The first pause before claiming again after a contended claim: about one commit. */
const CONTENDED_FIRST_MS = 2;

/** How long a stopping worker keeps trying to write the ends of the attempts it interrupted. */
const END_WRITE_GRACE_MS = 5000;

/**
 * How long a running worker keeps trying to write an attempt's end while the store does not
 * answer: past the lease, since an end is taken as long as no rescue has moved the operation
 * (the fence is the epoch, not the expiry), and one written after an outage spares the operation
 * the lease expiry the rescue would count against it. Bounded, so that an end the store keeps
 * refusing gives its slot back.
 */
const END_RETRY_MS = 10 * 60_000;

/** Whether `promise` settled by `deadline` (performance.now()); it is not waited for after. */
async function settledBy(promise: Promise<unknown>, deadline: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const settled = promise.then(
    () => true,
    () => true,
  );
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, deadline - performance.now()));
  });
  try {
    return await Promise.race([settled, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** What a worker needs from its engine. */
export interface WorkerEnv {
  store: Store;
  kinds: ReadonlyMap<string, Kind>;
  log: Logger;
  effectKey: EffectKeyFn;
  random: () => number;
  wakeup: Wakeup;
  retention: RetentionPolicy;
  maxLeaseExpiries: number;
  providers: ProviderBudgets;
  retryBudget: RetryBudgetConfig | false;
  events: SluiceEvents;
  onSettled(row: OperationRow, report: AttemptReport, durationMs?: number): void;
  /** The worker has stopped: the engine forgets it (a process may replace its worker many times). */
  onStopped(worker: Worker): void;
}

export interface WorkerEvents {
  /** An attempt ended (emitted before its slot is released). */
  attempt: [{ tenant: string; id: string; kind: string; attempt: number; report: AttemptReport }];
  /** The last running attempt released its slot. */
  idle: [];
}

const leaseKey = (lease: { tenant: string; id: string; epoch: number }) =>
  `${operationKey(lease.tenant, lease.id)}\u0000${lease.epoch}`;

export class Worker extends EventEmitter<WorkerEvents> {
  /** The owner named in this worker's leases: its `id` option and a nonce of its own. */
  readonly id: string;
  /** @internal The attempts' temporary folders (runtime/temp-dirs.ts). */
  readonly tempDirs: TempDirs;
  /** @internal Running attempts' stops, by tenant and id: for in-process cancel and shutdown. */
  readonly stops = new Map<string, AttemptStop>();
  private readonly tempBytesByAttempt = new Map<string, number>();
  /** Which retry-budget bucket row this worker counts into: spreads concurrent claimers. */
  private readonly shard = Math.floor(Math.random() * 16);
  private readonly slots: Map<string, number>;
  private readonly activeByClass = new Map<string, number>();
  /** Slots of attempts left to expire, kept taken until their leases cannot be this worker's. */
  private readonly heldByClass = new Map<string, number>();
  private readonly holds = new Set<NodeJS.Timeout>();
  /** The rescue task, when this worker runs one (`rescueIntervalMs` not false). */
  private rescuer: PeriodicTask | undefined;
  /** The operations this worker is running, by `operationKey`: from launch to the attempt's settling. */
  private readonly runningKeys = new Set<string>();
  /**
   * The operations on their last chance this worker runs, or holds the slot of (holdSlot), by
   * `operationKey`: one more lease expiry would park them (`crash-loop`). At most one at a time:
   * two in one process would share its next crash, and the count that parks a poison operation
   * would reach the one beside it too (claimParams, releaseLastChance, docs/handlers.md).
   */
  private readonly lastChanceHere = new Set<string>();
  /**
   * Leases of attempts that ran here and ended without writing their end (by tenant, id and
   * epoch; the latest 10,000): the store would not take it, or the attempt was abandoned (its
   * lease went unconfirmed) or crashed. They are left to expire, which counts the attempt: the
   * handler ran. Only a lease no attempt here ran is a lost claim's, released without using one.
   */
  private readonly endsUnwritten = new Set<string>();
  /** Per class: the last claim filled every free slot, so more work may be waiting. */
  private readonly slotBound = new Map<string, boolean>();
  /** Other processes' new work reaches this worker as a wake-up (the store announces work). */
  private announced = false;
  private readonly inflight = new Set<Promise<void>>();
  private readonly heartbeat: Heartbeat;
  private readonly channels = new Map<string, ClassChannel>();
  private readonly begins: Batcher<EffectBeginParams, Settled<EffectBeginResult>>;
  private readonly marks: Batcher<EffectMarkParams, boolean>;
  private readonly journal: Journal;
  private readonly tasks: PeriodicTask[] = [];
  /** Wakes a class when a retry or deferral this worker wrote comes due (before the next poll). */
  private readonly dueWakes = new DueWakes((cls) => this.env.wakeup.notify(cls));
  private readonly loops: Promise<void>[] = [];
  private readonly leaseMs: number;
  private unwritten = 0;
  /** Set when the stop interrupts the attempts: ends are tried again until then at most. */
  private endsGiveUpAt = Number.POSITIVE_INFINITY;
  private readonly pollIntervalMs: number;
  private readonly log: Logger;
  private state: 'new' | 'running' | 'stopping' | 'stopped' = 'new';
  private unsubscribe: Promise<(() => Promise<void>) | undefined> = Promise.resolve(undefined);

  constructor(
    private readonly env: WorkerEnv,
    private readonly options: WorkerOptions = {},
  ) {
    super();
    checkWorkerOptions(options);
    this.id = `${options.id ?? `${hostname()}/${process.pid}`}/${randomBytes(3).toString('hex')}`;
    this.log = env.log.child({ worker: this.id });
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.pollIntervalMs = options.pollIntervalMs ?? 500;
    this.slots = new Map();
    for (const kind of env.kinds.values()) this.slots.set(kind.class, options.defaultSlots ?? 32);
    for (const [cls, n] of Object.entries(options.slots ?? {})) this.slots.set(cls, n);
    this.heartbeat = new Heartbeat(
      env.store,
      this.log,
      options.heartbeatMs ?? Math.min(this.leaseMs / 3, 5000),
      options.abortGraceMs ?? 1000,
    );
    for (const [cls, n] of this.slots) if (n > 0) this.channels.set(cls, this.channel(cls, n));
    this.begins = new Batcher((items) => env.store.effectBeginMany(items));
    this.marks = new Batcher((items) => env.store.effectMarkMany(items));
    this.journal = batchedJournal(this.begins, this.marks);
    this.tempDirs = new TempDirs(options.tempRoot ?? defaultTempRoot());
  }

  /**
   * The classes this worker has slots for (0 included), fixed when it is made: the defined kinds'
   * classes then, and those its `slots` name. It claims for no other.
   */
  get classes(): ReadonlySet<string> {
    return new Set(this.slots.keys());
  }

  /** Attempts running now, in all classes. */
  get running(): number {
    return this.inflight.size;
  }

  runningByClass(): Record<string, number> {
    return Object.fromEntries(this.activeByClass);
  }

  /** Bytes held now in running attempts' temporary folders (as last measured). */
  tempBytes(): number {
    let total = 0;
    for (const b of this.tempBytesByAttempt.values()) total += b;
    return total;
  }

  /** Resolves when no attempt is running in this worker (slots all free). */
  idle(): Promise<void> {
    if (this.inflight.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.once('idle', () => resolve()));
  }

  start(): void {
    if (this.state !== 'new')
      throw new InvalidArgument(
        `worker ${this.id} is ${this.state}: a worker starts once; make another with sluice.worker()`,
      );
    this.state = 'running';
    const swept = this.tempDirs.sweepOrphans();
    if (swept > 0) this.log.info({ swept }, 'removed temporary directories of dead workers');
    this.heartbeat.start();
    // Other processes' submits wake this worker at once where the store can tell; its own
    // retries wake it when due (dueWakes); polling stays as the fallback. While wake-ups are
    // lost, a freed slot claims at once instead of waiting to be told.
    this.unsubscribe = listenForWork(this.env.store, this.env.wakeup, this.log, (announced) => {
      this.announced = announced;
    });
    const { rescueIntervalMs = 5000, purgeIntervalMs = 60_000 } = this.options;
    const maintenance = startMaintenance(
      {
        store: this.env.store,
        log: this.log,
        maxLeaseExpiries: this.env.maxLeaseExpiries,
        retention: this.env.retention,
        onRescued: (r) => this.env.events.emit('rescued', r),
        onRequeued: () => this.env.wakeup.notifyAll(),
      },
      { rescueIntervalMs, purgeIntervalMs },
    );
    this.tasks.push(...maintenance.tasks);
    this.rescuer = maintenance.rescuer;
    for (const [cls, n] of this.slots) if (n > 0) this.loops.push(this.loop(cls, n));
  }

  /**
   * Stops claiming, waits up to `graceMs` for running attempts, then interrupts the rest: they
   * go back to the queue without using an attempt (or stay leased until their lease expires if
   * the store is unreachable).
   */
  async stop(options: { graceMs?: number } = {}): Promise<void> {
    // Checked first: refused, the worker runs on as it was.
    const graceMs = bounded('graceMs', options.graceMs, 10_000, { min: 0, max: MAX_TIMER_MS });
    if (this.state === 'stopped' || this.state === 'new') {
      this.state = 'stopped';
      this.env.onStopped(this);
      return;
    }
    // A second stop waits for the first: returned early, a close() after it shut the store under
    // attempts still running, whose ends were then lost.
    if (this.stopped) return this.stopped;
    this.stopped = this.stopNow(graceMs);
    return this.stopped;
  }

  private stopped: Promise<void> | undefined;

  private async stopNow(graceMs: number): Promise<void> {
    this.state = 'stopping';
    this.env.wakeup.notifyAll();
    // Every wait below is bounded: a store that stops answering (a connection the network dropped
    // without a reset hangs for a quarter of an hour) must not hold the stop with it. What is
    // left then waits for its lease to expire and is redelivered.
    const loopsBy = performance.now() + Math.min(this.leaseMs, END_WRITE_GRACE_MS);
    const loopsDone = await settledBy(Promise.all(this.loops), loopsBy);
    if (this.inflight.size > 0) {
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        Promise.allSettled([...this.inflight]),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, graceMs);
        }),
      ]);
      clearTimeout(timer);
    }
    // From here on an end the store will not take is tried again for a few seconds more, not for
    // a whole lease: a stop must not outlast the grace it was given by the lease's length (an
    // orchestrator kills it first). What is left is redelivered when its lease expires.
    this.endsGiveUpAt = performance.now() + Math.min(this.leaseMs, END_WRITE_GRACE_MS);
    for (const stop of this.stops.values()) stop.abort(new WorkerShutdown());
    // The handlers were given their grace already: what waits now is the store's answers.
    const writesBy = this.endsGiveUpAt + (this.options.abortGraceMs ?? 1000) + END_WRITE_GRACE_MS;
    const ended = await settledBy(Promise.allSettled([...this.inflight]), writesBy);
    const written = await settledBy(
      Promise.all([
        ...[...this.channels.values()].map((c) => c.idle()),
        this.begins.idle(),
        this.marks.idle(),
      ]),
      writesBy,
    );
    if (!loopsDone || !ended || !written) {
      this.unwritten += this.inflight.size;
      this.log.warn(
        { attempts: this.inflight.size },
        'the store did not answer while the worker stopped; the attempts left keep their leases until they expire',
      );
    }
    await this.releaseLostClaims();
    await this.heartbeat.stop();
    await settledBy(Promise.all(this.tasks.map((t) => t.stop())), writesBy);
    this.dueWakes.stop();
    // No claim follows a stop: the slots held for leases left to expire need no freeing.
    for (const timer of this.holds) clearTimeout(timer);
    this.holds.clear();
    await settledBy(
      this.unsubscribe.then((off) => off?.()),
      writesBy,
    );
    this.tempDirs.removeOwn();
    this.state = 'stopped';
    this.env.onStopped(this);
  }

  /**
   * Releases, within the stop's remaining grace for writes, the leases a claim whose answer was
   * lost took for this worker: left, they would wait out their lease and its expiry would cost
   * them an attempt. A store that does not answer in time leaves them to that expiry.
   */
  private async releaseLostClaims(): Promise<void> {
    let outcomes: PromiseSettledResult<void>[] = [];
    const releases = Promise.allSettled([...this.channels.values()].map((c) => c.releaseLost())).then(
      (settled) => {
        outcomes = settled;
      },
    );
    await settledBy(releases, this.endsGiveUpAt);
    for (const r of outcomes)
      if (r.status === 'rejected')
        this.log.warn({ err: r.reason }, 'leases a claim took without its answer left to expire');
  }

  /**
   * Attempts whose end the store would not take while the worker stopped (unreachable past its
   * retries): each keeps its lease until it expires and is then redelivered. A stop that leaves
   * any is not a clean one.
   */
  get unwrittenEnds(): number {
    return this.unwritten;
  }

  /** @internal Runs the rescuer now (tests). */
  rescueNow(): Promise<void> {
    return rescueAll(this.env.store, this.env.maxLeaseExpiries).then(() => undefined);
  }

  /** @internal Extends all leases now (tests). */
  heartbeatNow(): Promise<void> {
    return this.heartbeat.tick();
  }

  private active(cls: string): number {
    return this.activeByClass.get(cls) ?? 0;
  }

  /** Slots not free: attempts running, and those held for leases left to expire (holdSlot). */
  private taken(cls: string): number {
    return this.active(cls) + (this.heldByClass.get(cls) ?? 0);
  }

  private claimParams(cls: string, limit: number): ClaimParams {
    return {
      class: cls,
      owner: this.id,
      limit,
      leaseMs: this.leaseMs,
      retryBudget: this.env.retryBudget
        ? { bucketMs: this.env.retryBudget.bucketMs, shard: this.shard }
        : undefined,
      passOver: this.lastChanceHere.size > 0 ? this.lastChanceFrom() : undefined,
    };
  }

  private channel(cls: string, slots: number): ClassChannel {
    return new ClassChannel(this.env.store, {
      room: (ending) => (this.state === 'running' ? slots - this.taken(cls) + ending : 0),
      refill: (ends) => !this.announced || this.slotBound.get(cls) === true || ends.some((e) => e.capped),
      claimParams: (limit) => this.claimParams(cls, limit),
      launch: (result, limit, asked, sentAt) => {
        // The store answers: a rescue backed off through an outage runs at its next tick.
        for (const task of this.tasks) task.storeAnswered();
        this.slotBound.set(cls, result.rows.length >= limit);
        for (const row of result.rows) {
          const capped = result.capped?.has(row.tenant) ?? false;
          if (this.onLastChance(row) && this.lastChanceHere.size > 0)
            this.releaseLastChance(cls, row, capped);
          else this.launch(cls, row, result.now, capped, sentAt);
        }
        // A claim that rode with ends alone and passed over work: the loop claims again (one
        // the loop asked for, it retries itself after a pause).
        if (result.contended && !asked) this.env.wakeup.notify(cls);
      },
      running: (lease) =>
        this.runningKeys.has(operationKey(lease.tenant, lease.id)) || this.endsUnwritten.has(leaseKey(lease)),
      recovered: (released) => {
        // Which operations, so a line can be followed to them (the first 20).
        const operations = released.slice(0, 20).map((l) => ({ tenant: l.tenant, operation: l.id }));
        this.log.warn(
          { class: cls, released: released.length, operations },
          'released operations a claim took without its answer reaching this worker',
        );
        this.env.wakeup.notify(cls);
      },
    });
  }

  private async loop(cls: string, slots: number): Promise<void> {
    let failures = 0;
    // After a claim that may have left work behind under another transaction's lock: the pause
    // before the next, doubled while it keeps happening (a lock lasts one transaction).
    let contendedMs = 0;
    while (this.state === 'running') {
      if (slots - this.taken(cls) <= 0) {
        await this.env.wakeup.wait(cls, this.pollIntervalMs, false);
        this.env.wakeup.consume(cls);
        continue;
      }
      this.env.wakeup.consume(cls);
      let batch: ClaimedBatch;
      try {
        batch = await this.channels.get(cls)!.claim();
        if (failures > 0) this.log.info({ class: cls, failures }, 'claims answer again');
        failures = 0;
      } catch (error) {
        // Closed under it (the store's owner closed it before stopping this worker): it never
        // answers again, and the back-off would log a failure a minute for ever.
        if (isStoreClosed(error)) {
          this.log.error({ class: cls }, 'the store is closed: this worker claims no more; stop it');
          return;
        }
        failures++;
        const delay = Math.min(5000, 100 * 2 ** Math.min(failures, 6));
        // Each failure while the back-off grows, then one a minute: an outage of hours must not
        // write a line every 5 s for every class.
        if (failures <= 6 || failures % 12 === 0)
          this.log.warn({ err: error, class: cls, retryInMs: delay, failures }, 'claim failed');
        if (!isStoreError(error)) this.log.error({ err: error }, 'unexpected claim error');
        await new Promise((r) => setTimeout(r, delay));
        continue;
      }
      contendedMs = batch.contended
        ? Math.min(this.pollIntervalMs, Math.max(CONTENDED_FIRST_MS, contendedMs * 2))
        : 0;
      if (batch.claimed < batch.limit && this.state === 'running')
        await this.env.wakeup.wait(cls, batch.contended ? contendedMs : this.pollIntervalMs);
    }
  }

  /** `claimSentAt`: performance.now() when the claim that took `row` was sent. */
  private launch(
    cls: string,
    row: OperationRow,
    claimNow: number,
    capped: boolean,
    claimSentAt: number,
  ): void {
    const key = operationKey(row.tenant, row.id);
    this.runningKeys.add(key);
    if (this.onLastChance(row)) this.lastChanceHere.add(key);
    const started = performance.now();
    // Whether the end's write also claimed for this slot: then the slot needs no wake-up.
    let refilled = false;
    // Whether the attempt ended without its end written, its lease perhaps still held.
    let left = false;
    const run = () =>
      runAttempt(
        {
          store: this.env.store,
          kinds: this.env.kinds,
          log: this.log,
          heartbeat: this.heartbeat,
          tempDirs: this.tempDirs,
          effectKey: this.env.effectKey,
          random: this.env.random,
          finish: async (params) => {
            const written = await this.finish(cls, params, capped);
            refilled = written.refilled;
            return written.accepted;
          },
          stops: this.stops,
          abortGraceMs: this.options.abortGraceMs ?? 1000,
          leaseMs: this.leaseMs,
          claimSentAt,
          tempCheckMs: this.options.tempCheckMs ?? 250,
          tempBytes: this.tempBytesByAttempt,
          events: this.env.events,
          journal: this.journal,
          providers: this.env.providers,
          retryBudget: this.env.retryBudget ? { ...this.env.retryBudget, shard: this.shard } : false,
        },
        row,
        claimNow,
      )
        .then((report) => {
          if (report.outcome !== 'written') this.leftToExpire(row);
          left = report.outcome === 'abandoned';
          this.env.onSettled(
            row,
            report,
            report.outcome === 'written' ? performance.now() - started : undefined,
          );
          if (report.outcome === 'written' && report.accepted && report.dueInMs !== undefined)
            this.dueWakes.add(cls, report.dueInMs);
          this.emit('attempt', {
            tenant: row.tenant,
            id: row.id,
            kind: row.kind,
            attempt: row.attempt,
            report,
          });
        })
        .catch((thrown: unknown) => {
          // Whatever failed (a store error, or a bug that threw instead), the attempt ran here: its
          // lease is left to expire, which counts it, never given back for free as a lost claim's.
          if (this.state === 'stopping') this.unwritten++;
          this.leftToExpire(row);
          left = true;
          // Read once, guarded: a value that throws when read (a Proxy a handler threw, and a bug let
          // through) would turn this handler into an unhandled rejection, and Node would exit.
          const error = readThrown(thrown, 'the attempt runner');
          const message = isStoreError(error)
            ? 'could not record the end of the attempt; its lease will expire and it will be redelivered'
            : 'attempt runner failed';
          try {
            this.log.error({ err: error, operation: row.id }, message);
          } catch {
            // pino's serializer reads the stack and every property: a getter may still throw.
            this.log.error({ operation: row.id }, `${message} (with an error that cannot be logged)`);
          }
        });
    this.inSlot(cls, run, () => {
      this.runningKeys.delete(key);
      if (left) this.holdSlot(cls, row, capped, () => this.lastChanceHere.delete(key));
      else {
        this.lastChanceHere.delete(key);
        if (!refilled) this.slotFreed(cls, capped);
      }
    });
  }

  /**
   * Runs `work` in one of the class's slots: taken now, and given back when it settles (`after`
   * says whether it is free or held); the worker is idle when none is taken.
   */
  private inSlot(cls: string, work: () => Promise<void>, after: () => void): void {
    this.activeByClass.set(cls, this.active(cls) + 1);
    const run = work().finally(() => {
      this.activeByClass.set(cls, this.active(cls) - 1);
      this.inflight.delete(run);
      after();
      if (this.inflight.size === 0) this.emit('idle');
    });
    this.inflight.add(run);
  }

  private slotFreed(cls: string, capped: boolean): void {
    if (!this.announced || capped || this.slotBound.get(cls)) this.env.wakeup.notify(cls);
  }

  /**
   * Keeps the slot of an attempt left to expire taken until its lease cannot be this worker's: a
   * lease's length, then a rescue that moves it if it has expired. The heartbeat gives an attempt
   * up when it cannot prove the lease (a claim answered late, a stalled event loop), while the
   * store may still hold it; a slot freed at once was claimed for again, and the worker held more
   * leases than slots (measured under load: 6 for 3 slots, until the rescue).
   */
  private holdSlot(cls: string, lease: LeaseRef, capped: boolean, freed: () => void): void {
    // A stopped worker claims nothing more: no slot to keep.
    if (this.state !== 'running') {
      freed();
      return;
    }
    this.heldByClass.set(cls, (this.heldByClass.get(cls) ?? 0) + 1);
    const free = () => {
      this.heldByClass.set(cls, (this.heldByClass.get(cls) ?? 1) - 1);
      freed();
      this.slotFreed(cls, capped);
    };
    const arm = () => {
      const timer = setTimeout(() => {
        this.holds.delete(timer);
        // The worker's own rescue task, which reports what it moves (events, metrics, the log) and
        // runs once for every hold that ends meanwhile; none where the rescue is left to others.
        void (this.rescuer?.run() ?? Promise.resolve())
          .then(() => this.env.store.leasesHeld({ owner: this.id, class: cls }))
          .then(
            // A beat sent before the attempt was given up may have extended the lease after it:
            // still held, the slot is kept another lease's length.
            (held) =>
              held.some((l) => leaseKey(l) === leaseKey(lease)) && this.state === 'running' ? arm() : free(),
            // The store does not answer: a claim would not either.
            () => free(),
          );
      }, this.leaseMs);
      timer.unref();
      this.holds.add(timer);
    };
    arm();
  }

  /**
   * Lease expiries from which an operation is on its last chance: one fewer than park it, and at
   * least one (with `maxLeaseExpiries` 1 an operation's first expiry parks it: nothing to keep apart).
   */
  private lastChanceFrom(): number {
    return Math.max(1, this.env.maxLeaseExpiries - 1);
  }

  private onLastChance(row: OperationRow): boolean {
    return row.leaseExpiries >= this.lastChanceFrom();
  }

  /**
   * Gives back an operation on its last chance claimed while another runs here (claims of two
   * classes in flight at once, or one claim that took several), the attempt not used. Its slot is
   * taken until the release is written, as an attempt's is until its end: that write may claim
   * for it.
   */
  private releaseLastChance(cls: string, row: OperationRow, capped: boolean): void {
    this.log.debug(
      { class: cls, tenant: row.tenant, operation: row.id, leaseExpiries: row.leaseExpiries },
      'gave back an operation on its last chance: another runs in this process',
    );
    let refilled = false;
    const release = () =>
      this.finish(cls, { lease: row, outcome: 'released' }, capped)
        .then((written) => {
          refilled = written.refilled;
        })
        .catch((error: unknown) => {
          this.log.warn(
            { err: error, class: cls, tenant: row.tenant, operation: row.id },
            'could not give back an operation on its last chance; its lease will expire',
          );
        });
    this.inSlot(cls, release, () => {
      if (!refilled) this.slotFreed(cls, capped);
    });
  }

  /** An attempt that ran here ends without its end written: its lease is never a lost claim's. */
  private leftToExpire(row: LeaseRef): void {
    this.endsUnwritten.add(leaseKey(row));
    if (this.endsUnwritten.size > 10_000)
      this.endsUnwritten.delete(this.endsUnwritten.values().next().value!);
  }

  /**
   * Writes the end of an attempt. While the store is unreachable it keeps trying, past the lease
   * (END_RETRY_MS): once the store answers, the end is taken unless a rescue moved the operation
   * meanwhile, which the fence then reports. Given up (or at a stop, after END_WRITE_GRACE_MS),
   * the lease expires and the operation is redelivered — with its effects journaled, at no risk.
   */
  private async finish(cls: string, params: FinishParams, capped: boolean): Promise<EndWritten> {
    const giveUpAt = performance.now() + Math.max(this.leaseMs, END_RETRY_MS);
    for (let i = 0; ; i++) {
      try {
        return await this.channels.get(cls)!.finish(params, capped);
      } catch (error) {
        const now = performance.now();
        if (!isStoreError(error) || !error.retryable || now >= Math.min(giveUpAt, this.endsGiveUpAt))
          throw error;
        const retryInMs = Math.min(2000, 100 * 2 ** i);
        // The first failure, then one a minute: its slot stays taken meanwhile, and a worker whose
        // slots all wait for their ends claims nothing, so says nothing of claims failing.
        if (i % 30 === 0)
          this.log.warn(
            {
              err: error,
              class: cls,
              tenant: params.lease.tenant,
              operation: params.lease.id,
              failures: i + 1,
              retryInMs,
            },
            'could not write the end of an attempt; it is kept and tried again until the store answers',
          );
        await new Promise((r) => setTimeout(r, retryInMs));
      }
    }
  }
}
