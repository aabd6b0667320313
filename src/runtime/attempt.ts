/**
 * @module runtime/attempt
 * One attempt: the handler run under a lease, from claim to the fenced write that ends it.
 *
 * Every exit path releases what the attempt holds: its timers, its heartbeat registration, its
 * temporary directories, its slot (the caller's `finally`). The end is decided by
 * retry/classify.ts and written through the finish batcher; a lost lease writes nothing. A
 * simulated crash (failpoint) also writes nothing: the lease is left to expire, exactly as if the
 * process had died.
 */
import type { Logger } from 'pino';
import { chargesFor, type ProviderBudgets } from '../admission/budgets.js';
import type { RetryBudgetConfig } from '../admission/retry-budget.js';
import { budgetedRetry, deferRetry, RETRY_DENIED, takeRetry } from '../admission/retry-draw.js';
import { endAtDeadline, notingEffectsHappened } from '../core/decisions.js';
import { assertPlainJson } from '../core/digest.js';
import { engineMade, isEngineMade } from '../core/errors/engine-made.js';
import {
  AttemptEnded,
  AttemptTimeout,
  CancelRequested,
  DeadlineExceeded,
  isAttemptTimeout,
  isInputNotJson,
  isLeaseLost,
  isOperationLimitExceeded,
  LeaseLost,
  messageOf,
  OperationLimitExceeded,
  ResultRefused,
  UnknownKind,
} from '../core/errors/index.js';
import { readThrown } from '../core/errors/thrown.js';
import { utf8BytesOver } from '../core/json-size.js';
import { JsonText } from '../core/json-text.js';
import { isTerminal, type OperationState } from '../core/states.js';
import { AttemptMarks } from '../effects/attempt-marks.js';
import type { EffectKeyFn } from '../effects/effect-key.js';
import { InflightEffects } from '../effects/inflight.js';
import type { Journal } from '../effects/run-effect.js';
import type { SluiceEvents } from '../observability/events.js';
import type { Heartbeat } from '../queue/heartbeat.js';
import { type AttemptEnd, classifyFailure } from '../retry/classify.js';
import { byteOrder } from '../store/byte-order.js';
import type { Store } from '../store/store.js';
import type { EffectMarkParams, FinishParams, LeaseRef, OperationRow } from '../store/types.js';
import { logFailure, warnUnbudgeted } from './attempt-log.js';
import { AttemptStop, untilAbortedPlusGrace } from './attempt-stop.js';
import { OperationContext } from './context.js';
import { failpoint, failpointArmed, isSimulatedCrash, SimulatedCrash } from './failpoints.js';
import { AttemptScope } from './helpers/scope.js';
import { type Kind, validateInput } from './kinds.js';
import { LazyLog } from './lazy-log.js';
import { TempDirs } from './temp-dirs.js';

export interface AttemptEnv {
  store: Store;
  kinds: ReadonlyMap<string, Kind>;
  log: Logger;
  heartbeat: Heartbeat;
  tempDirs: TempDirs;
  effectKey: EffectKeyFn;
  random: () => number;
  finish(params: FinishParams): Promise<boolean>;
  /** Registry of running attempts' stops, for in-process cancel and shutdown. */
  stops: Map<string, AttemptStop>;
  /** How long to wait for a handler that ignores its aborted signal before ending the attempt. */
  abortGraceMs: number;
  /** performance.now() when the claim that took the operation was sent: where its lease starts. */
  claimSentAt?: number;
  /** The visibility timeout the heartbeat keeps extending. */
  leaseMs: number;
  /** How often an attempt's temporary folders are measured against its `maxTempBytes`. */
  tempCheckMs: number;
  /** Bytes currently held in temporary folders, by attempt: read by metrics. */
  tempBytes: Map<string, number>;
  events: SluiceEvents;
  /** The effect journal's writes, group-committed across this worker's attempts. */
  journal: Journal;
  providers: ProviderBudgets;
  retryBudget: (RetryBudgetConfig & { shard: number }) | false;
}

export type AttemptReport =
  | { outcome: 'crashed' | 'abandoned' }
  | {
      outcome: 'written';
      end: FinishParams['outcome'];
      accepted: boolean;
      errorCode: string | null;
      /** For an end that put the operation back in the queue for later (`retry`, `deferred`): after how long. */
      dueInMs?: number;
    };

export const operationKey = (tenant: string, id: string) => `${tenant}\u0000${id}`;

const refOf = (row: OperationRow) => ({ tenant: row.tenant, id: row.id, kind: row.kind, class: row.class });

/** Ends the store writes as asked: the operation's state is the end's name. */
const KEPT_ENDS = new Set(['succeeded', 'dead', 'needs_reconciliation']);

/**
 * The state an accepted end left the operation in. The store may write another than the end asked
 * for: `failed` with an effect pending is `needs_reconciliation`; a retry, a release or a deferral
 * with a cancel pending is `cancelled`; a cancel past the point of no return goes back to the
 * queue. Those ends are read back (failures and cancels, not the common success).
 */
async function stateAfter(env: AttemptEnv, row: OperationRow, end: string): Promise<OperationState | null> {
  if (KEPT_ENDS.has(end)) return end as OperationState;
  return (await env.store.operationGet(row).catch(() => undefined))?.state ?? null;
}

/**
 * A result is stored on the operation's row and sent with every read of it, so it is bounded as
 * an input is, as the JSON the store writes (core/json-size.ts). The same handler would return
 * the same result again: dead at once, for a fix and a redrive (ResultRefused).
 */
function assertResultSize(text: string, max: number): void {
  const bytes = utf8BytesOver(text, max);
  if (bytes !== null)
    throw engineMade(
      new ResultRefused(
        `the handler's result is ${bytes} bytes as JSON, over the kind's maxResultBytes (${max})`,
        {
          code: 'result-too-large',
          details: { bytes, maxResultBytes: max },
        },
      ),
    );
}

/** Runs one attempt and tells observers when it starts and how it ends (sluice.events). */
export async function runAttempt(
  env: AttemptEnv,
  row: OperationRow,
  claimNow: number,
): Promise<AttemptReport> {
  const started = performance.now();
  // The events' payloads are built only for someone listening (metrics, tests): most attempts of
  // an engine without observers would build and drop two objects each.
  if (env.events.listenerCount('attempt-started') > 0)
    env.events.emit('attempt-started', {
      ...refOf(row),
      attempt: row.attempt,
      // A deferral gives attempt 1 back and leaves its reason in `error`: not a first start again.
      // (A release at shutdown gives it back too and leaves no trace on the row; the store's own
      // count of first attempts, for the retry budget, reads `started_at` and is exact.)
      // Counted from when it was due: a submit's `delayMs` is the caller's wish, not a backlog.
      firstAttemptAgeMs:
        row.attempt === 1 && row.error === null
          ? Math.max(0, claimNow - Math.max(row.createdAt, row.runAfter))
          : null,
    });
  const report = await attemptOnce(env, row, claimNow);
  if (env.events.listenerCount('attempt-ended') === 0) return report;
  const durationMs = performance.now() - started;
  // An end the store refused (the lease was lost) is the attempt abandoned, as one that never
  // wrote: counted as the end it asked for, a lost lease's `succeeded` or `retry` would be
  // counted again by the attempt that runs the operation next.
  const accepted = report.outcome === 'written' && report.accepted;
  const ended = report.outcome === 'written' ? (accepted ? report.end : 'abandoned') : report.outcome;
  const state = accepted ? await stateAfter(env, row, ended) : null;
  const terminal = state !== null && isTerminal(state) ? state : null;
  env.events.emit('attempt-ended', {
    ...refOf(row),
    attempt: row.attempt,
    outcome: ended,
    state: terminal,
    durationMs,
    endToEndMs: terminal ? Math.max(0, claimNow + durationMs - row.createdAt) : null,
    errorCode: report.outcome === 'written' ? report.errorCode : null,
  });
  return report;
}

async function attemptOnce(env: AttemptEnv, row: OperationRow, claimNow: number): Promise<AttemptReport> {
  const lease: LeaseRef = { tenant: row.tenant, id: row.id, epoch: row.epoch };
  const logs = new LazyLog(env.log, {
    tenant: row.tenant,
    operation: row.id,
    attempt: row.attempt,
    kind: row.kind,
  });
  const info = { tenant: row.tenant, id: row.id, attempt: row.attempt };
  const kind = env.kinds.get(row.kind);
  const deadlineInMs = row.deadlineAt === null ? null : row.deadlineAt - claimNow;

  let end: AttemptEnd | { outcome: 'succeeded'; result: unknown };
  let crashed = false;
  const marks = new AttemptMarks(env.journal, lease);
  if (!kind) {
    // A worker that does not know the kind (a rolling deploy): retry, so one that does can run it.
    end = await budgetedRetry(
      env,
      row,
      logs,
      deadlineInMs,
      classifyFailure(
        {
          error: new UnknownKind(row.kind),
          abortReason: undefined,
          attempt: row.attempt,
          maxAttempts: row.maxAttempts,
          backoff: { baseMs: 1000, capMs: 30_000 },
          deadlineInMs,
        },
        env.random,
      ),
    );
  } else if (deadlineInMs !== null && deadlineInMs <= 0) {
    // Never start an operation whose deadline has already passed.
    end = { outcome: 'failed', error: endAtDeadline(false).error! };
  } else if (row.error?.code === RETRY_DENIED && env.retryBudget && !(await takeRetry(env, row, logs))) {
    // A retry the service-wide budget denied earlier asks again, and is denied again: not now.
    end = deferRetry(env, row.error, deadlineInMs);
  } else {
    const result = await execute(env, kind, row, lease, deadlineInMs, logs, marks);
    if (result === 'crashed') crashed = true;
    end =
      result === 'crashed'
        ? { outcome: 'abandon' }
        : await budgetedRetry(env, row, logs, deadlineInMs, result);
  }

  if (crashed) {
    marks.drop();
    logs.log.warn('attempt abandoned by a simulated crash');
    return { outcome: 'crashed' };
  }
  if (end.outcome === 'abandon') {
    marks.drop();
    logs.log.warn('lease lost: attempt abandoned without writing');
    return { outcome: 'abandoned' };
  }
  // The effects' marks not yet written ride with the end (effects/attempt-marks.ts); a test that
  // crashes at C3 has them written first, as a handler that works on after its effects does.
  const riding = marks.made ? await marks.forEnd(failpointArmed('operation.before-complete')) : undefined;
  if (end.outcome === 'failed' || end.outcome === 'dead')
    end = {
      ...end,
      error: notingEffectsHappened(end.error, await effectsHappened(env.store, lease, riding)),
    };
  try {
    await failpoint('operation.before-complete', info);
  } catch (error) {
    if (isSimulatedCrash(error)) {
      marks.drop();
      return { outcome: 'crashed' };
    }
    throw error;
  }
  const params = { lease, ...end } as FinishParams;
  if (riding && riding.length > 0) params.marks = riding;
  let accepted: boolean;
  try {
    accepted = await env.finish(params);
  } catch (error) {
    marks.ended(false);
    throw error;
  }
  marks.ended(accepted);
  if (!accepted) logs.log.warn({ end: end.outcome }, 'attempt end refused: the lease was lost');
  else if (logs.isLevelEnabled('debug')) logs.log.debug({ end: end.outcome }, 'attempt ended');
  try {
    await failpoint('operation.after-complete', info);
  } catch (error) {
    if (isSimulatedCrash(error)) return { outcome: 'crashed' };
    throw error;
  }
  return {
    outcome: 'written',
    end: end.outcome,
    accepted,
    errorCode: 'error' in end ? end.error.code : null,
    ...('delayMs' in end ? { dueInMs: end.delayMs } : {}),
  };
}

/**
 * The effects of the operation that happened, for an end that fails it: the journal's `committed`
 * rows, and the marks riding with the end (an effect of this attempt whose mark is not written
 * yet). A journal that cannot be read leaves those of the marks: the end is written all the same.
 */
async function effectsHappened(
  store: Store,
  lease: LeaseRef,
  riding: EffectMarkParams[] | undefined,
): Promise<string[]> {
  const names = new Set((riding ?? []).filter((m) => m.state === 'committed').map((m) => m.name));
  try {
    for (const row of await store.effectList({ tenant: lease.tenant, id: lease.id }))
      if (row.state === 'committed') names.add(row.name);
  } catch {
    // The end's own write says whether the store answers.
  }
  return [...names].sort(byteOrder);
}

async function execute(
  env: AttemptEnv,
  kind: Kind,
  row: OperationRow,
  lease: LeaseRef,
  deadlineInMs: number | null,
  logs: LazyLog,
  marks: AttemptMarks,
): Promise<AttemptEnd | { outcome: 'succeeded'; result: unknown } | 'crashed'> {
  const stop = new AttemptStop();
  marks.stop = stop;
  const started = performance.now();
  const timeLimit = Math.min(kind.limits.attemptTimeoutMs, deadlineInMs ?? Number.POSITIVE_INFINITY);
  const byDeadline = deadlineInMs !== null && deadlineInMs <= kind.limits.attemptTimeoutMs;
  // The engine's own, as every reason it stops an attempt for (AttemptStop.abort): a helper's
  // clock gives one to the handler, which may throw it (core/errors/engine-made.ts).
  const timeUp = () =>
    engineMade(byDeadline ? new DeadlineExceeded(row.id) : new AttemptTimeout(row.id, timeLimit));
  const timer = setTimeout(() => stop.abort(timeUp()), timeLimit);
  const remainingMs = () => Math.max(0, timeLimit - (performance.now() - started));
  // What the context helpers start (subprocesses, queries, requests): stopped before the
  // attempt's temporary folders are removed, on every exit path.
  const scope = new AttemptScope({
    attempt: stop,
    remainingMs,
    timeUp,
    logs,
    registerGroup: (pgid) => env.tempDirs.registerGroup(pgid),
  });
  let crashed = false;
  // The attempt is over (its `finally` has run): what a leftover callback asks for now is refused.
  let over = false;
  const checkAlive = () => {
    if (crashed) throw new SimulatedCrash('after crash');
  };
  env.heartbeat.watch(
    {
      lease,
      leaseMs: env.leaseMs,
      onLost: () => stop.abort(new LeaseLost(row.id)),
      onCancel: () => stop.abort(new CancelRequested(row.id)),
    },
    env.claimSentAt,
  );
  const ckey = operationKey(row.tenant, row.id);
  env.stops.set(ckey, stop);
  const temps: string[] = [];
  // Effects this attempt committed and was asked for again (warned once each).
  const repeated = new Set<string>();
  let tempTimer: NodeJS.Timeout | undefined;
  // The temp budget is enforced, not alerted: over it, the attempt's signal fires.
  // One walk at a time, off the event loop (temp-dirs.ts `bytesAsync`): a tick that finds the
  // last walk still going skips its own.
  let measuring: Promise<void> | undefined;
  const measureTemps = (): Promise<void> =>
    (measuring ??= (async () => {
      let bytes = 0;
      for (const path of temps) bytes += await TempDirs.bytesAsync(path);
      env.tempBytes.set(ckey, bytes);
      if (bytes > kind.limits.maxTempBytes && !stop.aborted) {
        stop.abort(
          new OperationLimitExceeded(
            'temp-bytes',
            `temporary files reached ${bytes} bytes; the limit of kind ${kind.name} is ${kind.limits.maxTempBytes}`,
          ),
        );
      }
    })().finally(() => {
      measuring = undefined;
    }));

  const effects = new InflightEffects({
    late: (effect) =>
      logs.log.warn(
        { effect },
        'ctx.effect was called after its handler had returned or thrown: refused, nothing was journaled or sent',
      ),
  });
  marks.onLateRefusal = (effect) =>
    logs.log.warn(
      { effect },
      "an effect's call answered after its attempt had ended: its committed mark was refused, and the " +
        'effect stays pending for the next attempt to recover under its key',
    );
  // An effect the handler started and did not await is waited for before the end is decided,
  // as long as a handler would be: until it settles, or the attempt is stopped and its grace
  // runs out (effects/inflight.ts). Once: the end's two paths may both ask.
  let settling: Promise<void> | undefined;
  const effectsSettled = () =>
    (settling ??= untilAbortedPlusGrace(effects.settled(), stop, env.abortGraceMs).catch(() => {}));
  const ctx = new OperationContext(
    {
      tenant: row.tenant,
      id: row.id,
      kind: row.kind,
      attempt: row.attempt,
      stop,
      deadline: row.deadlineAt,
      logs,
    },
    {
      remainingMs,
      scope,
      effects,
      ended: () => over,
      tempDir: () => {
        checkAlive();
        // Refused as the attempt's end, whatever stopped it first: a helper's folder (`exec`'s
        // `cwd: 'temp'`) asked for by a leftover callback.
        if (over) throw engineMade(new AttemptEnded());
        stop.throwIfAborted();
        const path = env.tempDirs.create(row.tenant, row.id, row.epoch);
        temps.push(path);
        if (!tempTimer) {
          tempTimer = setInterval(() => void measureTemps(), env.tempCheckMs);
          tempTimer.unref();
        }
        return path;
      },
      effectRuntime: {
        store: env.store,
        journal: env.journal,
        lease,
        stop,
        effectKey: (name) => env.effectKey(row.tenant, row.id, name),
        retentionMs: kind.limits.effectRetentionMs,
        marginMs: kind.limits.attemptTimeoutMs,
        maxCalls: kind.limits.maxProviderCalls,
        maxResultBytes: kind.limits.maxResultBytes,
        lastAttempt: row.attempt >= row.maxAttempts,
        charges: (provider, cost) => {
          warnUnbudgeted(env.providers, provider, env.log);
          return chargesFor(env.providers, provider, row.tenant, cost);
        },
        failpointInfo: { tenant: row.tenant, id: row.id, attempt: row.attempt },
        marks,
        inflight: effects,
        checkAlive,
        markCrashed: () => {
          crashed = true;
        },
        onUnkeptReference: (effect, why) =>
          env.log.warn(
            { tenant: row.tenant, operation: row.id, effect, why },
            "an effect's reference cannot be kept; the effect is recorded committed without it",
          ),
        onRepeat: (effect) => {
          // Once per name and attempt: a loop that names every effect alike would say it per turn.
          if (repeated.has(effect)) return;
          repeated.add(effect);
          env.log.warn(
            { tenant: row.tenant, operation: row.id, effect },
            'an effect this attempt committed was asked again: its recorded result is returned and ' +
              'nothing is sent (a name is an effect: a loop names each one: charge:1, charge:2)',
          );
        },
        onCall: (effect, provider, outcome) => {
          if (env.events.listenerCount('effect') > 0)
            env.events.emit('effect', { ...refOf(row), effect, provider, outcome });
        },
      },
    },
  );

  try {
    // The input's schema runs under the attempt's limits too: an async one that never settles
    // held the slot and the lease for ever, past the timeout and the deadline.
    const result = await untilAbortedPlusGrace(
      validateInput(kind, row.input).then((input) => kind.run(input, ctx)),
      stop,
      env.abortGraceMs,
    );
    effects.close();
    // Checked here, not in the function: an attempt without effects pays no promise for it.
    if (effects.size > 0 && !crashed) await effectsSettled();
    if (effects.size > 0 && !crashed) {
      // An effect of its own still under way past the grace: the provider may yet act, and the
      // journal says `pending`. Completed, the operation would be `succeeded` over a charge that
      // lands afterwards, its `committed` mark refused. The attempt ends as the stop says (a
      // timeout is retried, and the next attempt recovers the effect under its key).
      logs.log.warn(
        { effects: effects.names() },
        'the handler returned with an effect still under way past its grace: the attempt does not complete',
      );
      throw engineMade(new AttemptEnded());
    }
    checkAlive();
    if (temps.length > 0) {
      // A walk still going listed the folders before the handler's last writes: a fresh one.
      await measuring;
      await measureTemps();
    }
    // Over a limit is over, even if the handler finished before the next check.
    if (stop.aborted && isOperationLimitExceeded(stop.reason)) throw stop.reason;
    const value = result === undefined ? null : result;
    // Written out as JSON here, once, and that text is what the store keeps: a value the
    // handler's unawaited work changed after this check (grown past the limit, or made
    // unserialisable, which failed the end's store call with no store error) cannot reach it.
    let text: string;
    try {
      assertPlainJson(value);
      text = JSON.stringify(value);
    } catch (thrown) {
      // A getter or a Proxy's trap in the result may throw anything, another Proxy included.
      const error = readThrown(thrown, "reading the handler's result");
      throw engineMade(
        new ResultRefused(
          `the handler's result is not plain JSON: ${isEngineMade(error) && isInputNotJson(error) ? error.reason : messageOf(error).slice(0, 1000)}`,
          {
            code: 'result-not-json',
          },
        ),
      );
    }
    assertResultSize(text, kind.limits.maxResultBytes);
    return { outcome: 'succeeded', result: new JsonText(text) };
  } catch (thrown) {
    // Read once, here, before anything else reads it (core/errors/thrown.ts).
    const error = readThrown(thrown, 'the handler');
    effects.close();
    if (effects.size > 0 && !crashed && !isSimulatedCrash(error)) await effectsSettled();
    if (isSimulatedCrash(error) || crashed) {
      crashed = true;
      return 'crashed';
    }
    let abortReason = stop.aborted ? stop.reason : undefined;
    // Timed out with an effect still under way past the grace: its outcome is unknown to the
    // journal, and the next attempt recovers it under its key. The history says which it was.
    const under = effects.names();
    if (under.length > 0 && isAttemptTimeout(abortReason))
      abortReason = engineMade(
        new AttemptTimeout(
          row.id,
          timeLimit,
          `effect ${under.join(', ')} was still under way: its outcome is unknown, and a later attempt recovers it under its key`,
        ),
      );
    if (!isLeaseLost(abortReason)) logFailure(logs.log, error, abortReason);
    return classifyFailure(
      {
        error,
        abortReason,
        attempt: row.attempt,
        maxAttempts: row.maxAttempts,
        backoff: kind.limits.backoff,
        deadlineInMs: deadlineInMs === null ? null : deadlineInMs - (performance.now() - started),
      },
      env.random,
    );
  } finally {
    // Nothing the handler left behind may start anything in the attempt's name from now on.
    over = true;
    stop.end();
    // Subprocesses first: they may still be writing into the temporary folders.
    await scope.close();
    clearTimeout(timer);
    clearInterval(tempTimer);
    env.tempBytes.delete(ckey);
    env.heartbeat.unwatch(lease);
    if (env.stops.get(ckey) === stop) env.stops.delete(ckey);
    for (const path of temps) {
      try {
        env.tempDirs.remove(path);
      } catch (error) {
        logs.log.warn({ err: error, path }, 'could not remove a temporary directory');
      }
    }
  }
}
