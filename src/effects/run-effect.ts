/**
 * @module effects/run-effect
 * The effect protocol, the heart of Sluice. Inside a handler every external effect goes through
 * `ctx.effect(name, {call, lookup?, retentionMs})`, which runs these steps:
 *
 * 1. If the journal says `committed`, return the stored result: no call.
 * 2. Draw on the budgets: reserve spend units, count a call against the provider's rate cap,
 *    check the operation's cap on requests. Over any of them, no request is sent.
 * 3. Durably write `pending` with the effect key and the first-sent time (kept from the first
 *    try), fenced by the lease. This also marks the operation's point of no return for cancel.
 * 4. Call the provider with the key and the attempt's `AbortSignal`.
 * 5. Durably write `committed` with the result. Only then may the operation complete. The
 *    handler has the result at once: the mark goes with the journal's next batch, or, when the
 *    handler ends first, in the same transaction as the attempt's end (effects/attempt-marks.ts).
 *
 * A `pending` row found at step 3 means an earlier attempt may have sent the request (it crashed,
 * or the outcome was ambiguous). Recovery:
 * - inside the provider's retention window: ask `lookup` if given; if it finds the effect, record
 *   it; otherwise call again under the same key, which the provider deduplicates;
 * - past the window: never call blindly. Only an authoritative `lookup` answer (found, or
 *   confirmed absent) lets the operation go on; otherwise it ends `needs_reconciliation`.
 *
 * "Inside the window" keeps a margin of one attempt timeout, so a resent request cannot reach
 * the provider after it has forgotten the key.
 */

import type { EffectCharges } from '../admission/budgets.js';
import { bounded, knownKeys, MAX_DURATION_MS } from '../core/bounds.js';
import { assertPlainJson } from '../core/digest.js';
import { engineMade, isEngineMade } from '../core/errors/engine-made.js';
import {
  EffectOutcomeUnknown,
  type ErrorRecord,
  InvalidArgument,
  isBudgetExhausted,
  isCancelRequested,
  isEffectConflict,
  isInputNotJson,
  isInvalidArgument,
  isLeaseLost,
  isPermanent,
  isRetryable,
  isStoreError,
  LeaseLost,
  messageOf,
  Permanent,
  toErrorRecord,
} from '../core/errors/index.js';
import { readThrown } from '../core/errors/thrown.js';
import { utf8BytesOver } from '../core/json-size.js';
import { JsonText } from '../core/json-text.js';
import { isStoredText } from '../core/stored-text.js';
import type { Queued } from '../runtime/batcher.js';
import {
  type FailpointInfo,
  type FailpointName,
  failpoint,
  isSimulatedCrash,
} from '../runtime/failpoints.js';
import type { Store } from '../store/store.js';
import type {
  EffectBeginParams,
  EffectBeginResult,
  EffectMarkParams,
  EffectRow,
  LeaseRef,
} from '../store/types.js';
import type { AttemptMarks } from './attempt-marks.js';

/** The arguments a provider call receives. */
export interface EffectCall {
  /** The provider idempotency key. Send it with every request for this effect. */
  key: string;
  /** Fires when the attempt must stop (deadline, timeout, lost lease, shutdown). */
  signal: AbortSignal;
  /** 1 for the first request under this key, then 2, 3… across attempts. */
  send: number;
}

/** What `lookup` learned from the provider about the effect key. */
export type LookupResult<T> =
  | { status: 'committed'; result: T; reference?: string | null }
  | { status: 'absent' }
  | { status: 'unknown' };

/**
 * What `ctx.effect` takes. `T`, the provider's answer, is inferred from `call` alone (`NoInfer`
 * elsewhere): a `lookup` written as `found ? { status: 'committed', result: found } : { status:
 * 'absent' }` would otherwise make it `T | undefined`. The callbacks that take it are properties,
 * so that their parameter is checked strictly, not bivariantly as a method's is.
 */
export interface EffectOptions<T, R = T> {
  /** Performs the effect under `key`. Throw `Permanent`, `Retryable`, `Ambiguous` or `EffectConflict`. */
  call(args: EffectCall): Promise<T>;
  /**
   * What the journal keeps of the provider's answer, and what `ctx.effect` returns on every
   * attempt: plain JSON. Without it the answer itself is kept, and must be plain JSON. For an SDK
   * that answers with `Date`s or class instances, or more than the handler needs:
   * `record: (charge) => ({ id: charge.id, created: charge.created.toISOString() })`. It also
   * receives a `lookup`'s answer. It may be async. One that throws (or rejects) is an answer the
   * journal cannot keep.
   */
  record?: (result: NoInfer<T>) => R | Promise<R>;
  /** Asks the provider whether an effect exists under `key`; authoritative answers only. */
  lookup?(args: {
    key: string;
    signal: AbortSignal;
    firstSentAt: number;
    reference: string | null;
  }): Promise<LookupResult<NoInfer<T>>>;
  /** How long the provider honours the key. Default: the kind's `effectRetentionMs`. */
  retentionMs?: number;
  /** The provider's own reference for the result (a charge id), kept with the journal row. */
  reference?: (result: NoInfer<T>) => string | null;
  /** A paid provider's name, for budgets and metrics. */
  provider?: string;
  /** Units this call spends against the provider's budgets. */
  cost?: number;
}

/**
 * The journal writes of the protocol, group-committed by the worker across its concurrent
 * attempts (effects/journal.ts): N attempts at the same step cost one transaction.
 */
export interface Journal {
  begin(params: EffectBeginParams): Promise<EffectBeginResult>;
  mark(params: EffectMarkParams): Promise<boolean>;
  /** The lease's marks still waiting for their batch (`lease` is the attempt's own object). */
  takeMarks(lease: LeaseRef): Array<Queued<EffectMarkParams, boolean>>;
}

export interface EffectRuntime {
  store: Store;
  journal: Journal;
  lease: LeaseRef;
  /** The attempt's stop; its `signal` is made on first read (runtime/attempt-stop.ts). */
  stop: {
    readonly signal: AbortSignal;
    readonly aborted: boolean;
    abort(reason: unknown): void;
    throwIfAborted(): void;
  };
  effectKey: (name: string) => string;
  retentionMs: number;
  /** Safety margin subtracted from retention: the longest a request may be outstanding. */
  marginMs: number;
  failpointInfo: FailpointInfo;
  /** Requests the whole operation may send (all attempts). */
  maxCalls: number;
  /** The largest result the journal keeps for one effect, as JSON bytes: the kind's `maxResultBytes`. */
  maxResultBytes: number;
  /** This attempt is the operation's last: a failure now is not retried. */
  lastAttempt: boolean;
  /** The budgets an effect with this provider and cost draws on. */
  charges(provider: string | undefined, cost: number | undefined): EffectCharges;
  /**
   * Step 5 for the `committed` mark: written before the attempt's end, or with it in its
   * transaction (effects/attempt-marks.ts). Without it the mark is written and waited for here.
   */
  marks?: AttemptMarks;
  /** Throws if the attempt has been abandoned (simulated crash). */
  checkAlive(): void;
  /** Called when a failpoint simulates this worker's death: the attempt writes nothing more. */
  markCrashed(): void;
  /**
   * Invokes one of the effect's callbacks (`call`, `lookup`, `record`), so that the attempt can
   * refuse the same effect asked for from inside it (effects/inflight.ts); without it, just calls.
   */
  inflight?: { invoke<T>(name: string, callback: () => T): T };
  onCall?(name: string, provider: string | null, outcome: string): void;
  /** A committed effect's reference the journal cannot keep, and why: recorded without it. */
  onUnkeptReference?(name: string, why: string): void;
  /** An effect this attempt committed, asked again: answered from the journal, nothing sent. */
  onRepeat?(name: string): void;
}

const NAME = /^[A-Za-z0-9_.:-]{1,100}$/;
const OPTION_KEYS = [
  'call',
  'record',
  'lookup',
  'retentionMs',
  'reference',
  'provider',
  'cost',
] as const satisfies ReadonlyArray<keyof EffectOptions<unknown>>;
const FUNCTION_KEYS = ['call', 'record', 'lookup', 'reference'] as const;
/** As a budget's provider is named: it labels the journal's row and the effect metrics. */
const PROVIDER = /^[A-Za-z0-9_.-]{1,100}$/;

/**
 * The options a handler wrote, before anything is journaled: a misspelt key was its default
 * without a word (`refrence`, `retention`), a missing `call` failed after the `pending` row, as a
 * request that may have been sent, and a `retentionMs` of NaN read every recovery as out of the
 * window. A handler's wrong call ends its operation `dead` (retry/classify.ts).
 */
export function assertEffectCall(name: string, options: EffectOptions<unknown, unknown>): void {
  if (typeof name !== 'string' || !NAME.test(name))
    throw new InvalidArgument(`effect name ${JSON.stringify(name)} must match ${NAME}`);
  if (typeof options !== 'object' || options === null)
    throw new InvalidArgument(`effect ${name}: options must be an object, not ${String(options)}`);
  // The keys of a literal (or of an object made as one); an instance of a class of the caller's
  // own may carry fields of its own beside its methods.
  const proto: unknown = Object.getPrototypeOf(options);
  if (proto === Object.prototype || proto === null)
    knownKeys(`effect ${name}: options`, options, OPTION_KEYS);
  for (const key of FUNCTION_KEYS) {
    const value = options[key];
    if (value !== undefined && typeof value !== 'function')
      throw new InvalidArgument(`effect ${name}: ${key} must be a function, not ${typeof value}`);
  }
  if (options.call === undefined) throw new InvalidArgument(`effect ${name}: call is required`);
  if (options.retentionMs !== undefined)
    // Compared with a time, never stored: a product of hours need not be a whole number.
    bounded(`effect ${name}: retentionMs`, options.retentionMs, 0, { min: 1, max: MAX_DURATION_MS });
  if (
    options.provider !== undefined &&
    (typeof options.provider !== 'string' || !PROVIDER.test(options.provider))
  )
    throw new InvalidArgument(
      `effect ${name}: provider ${JSON.stringify(options.provider) ?? String(options.provider)} must match ${PROVIDER}`,
    );
}

export async function runEffect<T, R = T>(
  rt: EffectRuntime,
  name: string,
  options: EffectOptions<T, R>,
): Promise<R> {
  // `assertEffectCall` ran in `ctx.effect`, before a call of the same name could be joined.
  rt.checkAlive();
  rt.stop.throwIfAborted();
  const info = { ...rt.failpointInfo, effect: name };
  await hit(rt, 'effect.before-pending', info);
  rt.checkAlive();
  // Step 1 for an effect this attempt committed already, whose mark may still be on its way.
  const known = rt.marks?.committed(name);
  if (known) {
    rt.onRepeat?.(name);
    return known.result as R;
  }
  const refused = await rt.marks?.refusal(name);
  if (refused) throw failedAnswer(name, refused.error);

  const key = rt.effectKey(name);
  const charges = rt.charges(options.provider, options.cost);
  const budgeted = <T>(work: Promise<T>): Promise<T> =>
    work.catch((error) => {
      // A provider set to `fail` ends the operation; `wait` defers it (retry/classify.ts).
      if (isBudgetExhausted(error) && charges.onExhausted === 'fail') {
        throw new Permanent(error.message, {
          code: 'budget-exhausted',
          cause: error,
          details: error.details,
        });
      }
      throw error;
    });
  const begin = await fenced(
    rt,
    budgeted(
      rt.journal.begin({
        lease: rt.lease,
        name,
        key,
        provider: options.provider ?? null,
        cost: options.cost ?? null,
        spend: charges.spend,
        rates: charges.rates,
        maxCalls: rt.maxCalls,
      }),
    ),
  );
  rt.checkAlive();
  let row: EffectRow = begin.row;
  if (row.state === 'committed') return row.result as R;
  if (row.state === 'failed') throw failedAnswer(name, row.error);

  // `clean`: nothing sent under the key so far can have taken effect, so a definite refusal of
  // the next request proves the effect absent.
  let clean = begin.created || row.state === 'absent';
  if (row.state === 'pending' && !begin.created) {
    const retentionMs = options.retentionMs ?? rt.retentionMs;
    const insideWindow = begin.now - row.firstSentAt + rt.marginMs <= retentionMs;
    if (options.lookup) {
      let found: LookupResult<T>;
      try {
        // Called as a method: an instance of a class of the handler's may use `this`.
        found = await invoke(rt, name, () =>
          options.lookup!({
            key: row.key,
            signal: rt.stop.signal,
            firstSentAt: row.firstSentAt,
            reference: row.reference,
          }),
        );
        assertLookupAnswer(name, found);
      } catch (thrown) {
        const error = readThrown(thrown, `effect ${name}'s lookup`);
        rt.checkAlive();
        rt.onCall?.(name, options.provider ?? null, 'lookup-failed');
        // Past the window the lookup is the only safe way on. A lookup that failed for now is
        // asked again by the next attempt; on the last one (or refused for good) there is no
        // answer to be had, and the operation waits for a person, not in the dead letters,
        // which are purged in time with a charge that may exist.
        if (!insideWindow && (rt.lastAttempt || isPermanent(error)))
          throw unknown(name, row, retentionMs, error);
        throw error;
      }
      rt.checkAlive();
      rt.onCall?.(name, options.provider ?? null, `lookup-${found.status}`);
      if (found.status === 'committed') {
        const kept = options.record
          ? await recorded(rt, name, found.result, options)
          : (found.result as unknown as R);
        await commit(rt, name, kept, keptReference(rt, name, found.result, options, found.reference));
        return (kept ?? null) as R;
      }
      if (found.status === 'absent') {
        await rt.journal.mark({ lease: rt.lease, name, state: 'absent' });
        clean = true;
      } else if (!insideWindow) throw unknown(name, row, retentionMs);
    } else if (!insideWindow) {
      throw unknown(name, row, retentionMs);
    }
  }
  if (!begin.created) {
    row = (
      await fenced(
        rt,
        budgeted(
          rt.store.effectRecordSend({
            lease: rt.lease,
            name,
            spend: charges.spend,
            rates: charges.rates,
            maxCalls: rt.maxCalls,
          }),
        ),
      )
    ).row;
    rt.checkAlive();
  }

  await hit(rt, 'effect.before-call', info);
  rt.checkAlive();
  if (rt.stop.aborted) {
    // Stopped (timeout, cancel, shutdown) before the request left: nothing was sent this time,
    // so after nothing uncertain the effect is known absent, as after a definite refusal.
    if (clean) await markAnswer(rt, { lease: rt.lease, name, state: 'absent' });
    rt.stop.throwIfAborted();
  }
  let result: T;
  try {
    const stop = rt.stop;
    // The signal is made on first read (runtime/attempt-stop.ts AttemptStop): a call that never reads
    // it does not pay for an AbortController.
    result = await invoke(rt, name, () =>
      options.call({
        key: row.key,
        get signal() {
          return stop.signal;
        },
        send: row.sends,
      }),
    );
  } catch (thrown) {
    // Read once, here: what the journal, the classification and the handler get of it from now on.
    const error = readThrown(thrown, `effect ${name}'s call`);
    rt.checkAlive();
    rt.onCall?.(
      name,
      options.provider ?? null,
      isPermanent(error)
        ? 'permanent'
        : isEffectConflict(error)
          ? 'conflict'
          : isRetryable(error)
            ? 'retryable'
            : 'ambiguous',
    );
    // A permanent refusal is an answer: the effect did not and will not happen under this key.
    if (isPermanent(error)) {
      await markAnswer(rt, {
        lease: rt.lease,
        name,
        state: 'failed',
        error: toErrorRecord(error, 'permanent'),
      });
    } else if (isRetryable(error) && clean) {
      // A definite "not done" (a 503, nothing sent) after nothing uncertain: the effect is absent.
      await markAnswer(rt, { lease: rt.lease, name, state: 'absent' });
    }
    // Anything else leaves the row pending: the next attempt recovers under the same key.
    throw error;
  }
  rt.onCall?.(name, options.provider ?? null, 'committed');
  await hit(rt, 'effect.after-call', info);
  rt.checkAlive();
  // Without `record`, no turn of the event loop on the hot path.
  const kept = options.record ? await recorded(rt, name, result, options) : (result as unknown as R);
  await commit(rt, name, kept, keptReference(rt, name, result, options));
  // What a later attempt gets back: the journal keeps `undefined` as null.
  return (kept ?? null) as R;
}

/** Invokes one of the effect's callbacks, as the attempt tracks them (`EffectRuntime.inflight`). */
function invoke<T>(rt: EffectRuntime, name: string, callback: () => T): T {
  return rt.inflight ? rt.inflight.invoke(name, callback) : callback();
}

/**
 * What the journal keeps of an answer, for an effect with `record`: its projection. The provider has
 * acted, so a `record` that throws is the ending of an answer that is not JSON: the row stays
 * `pending` and the operation waits for a person, nothing sent again. Sluice's refusal of a wrong
 * call made inside it (the same effect asked for from inside its `record`) is the handler's bug,
 * ended as any wrong call is: `dead` at once, for a fix and a redrive.
 */
async function recorded<T, R>(
  rt: EffectRuntime,
  name: string,
  result: T,
  options: EffectOptions<T, R>,
): Promise<R> {
  try {
    return await invoke(rt, name, () => options.record!(result));
  } catch (thrown) {
    const error = readThrown(thrown, `effect ${name}'s record`);
    if (isEngineMade(error) && isInvalidArgument(error)) throw error;
    throw new Permanent(
      `the result of effect ${name} cannot be recorded: record() threw: ${messageOf(error).slice(0, 1000)}`,
      { code: 'effect-result-not-json' },
    );
  }
}

/** The provider's recorded refusal, thrown again to a later call of the same effect. */
function failedAnswer(name: string, error: ErrorRecord | null | undefined): Permanent {
  return new Permanent(error?.message ?? `effect ${name} failed`, { code: error?.code ?? 'effect-failed' });
}

/** The longest provider reference the journal keeps (as `reconcile` takes one over HTTP). */
export const MAX_REFERENCE_CHARS = 500;

/**
 * The provider's reference for a committed effect, as the journal can keep it: the lookup's, or
 * what `reference(result)` makes of the answer. The effect has happened by now, so a reference
 * the journal cannot keep (not a string, longer than 500 characters, a NUL or a lone surrogate,
 * or a `reference` that throws) is not allowed to fail its mark: written, it would fail every
 * other attempt's mark and end in the same batch, and the effect would stay `pending` and be sent
 * again. The effect is recorded committed without a reference, and the worker says why.
 */
function keptReference<T, R>(
  rt: EffectRuntime,
  name: string,
  result: T,
  options: EffectOptions<T, R>,
  given?: string | null,
): string | null {
  let value: unknown = given;
  if (value === undefined || value === null) {
    try {
      value = options.reference?.(result);
    } catch (thrown) {
      const error = readThrown(thrown, `effect ${name}'s reference`);
      rt.onUnkeptReference?.(name, `reference() threw: ${messageOf(error).slice(0, 1000)}`);
      return null;
    }
  }
  if (value === undefined || value === null) return null;
  const wrong =
    typeof value !== 'string'
      ? `it is a ${typeof value}, not a string`
      : value.length > MAX_REFERENCE_CHARS
        ? `it is ${value.length} characters long, over ${MAX_REFERENCE_CHARS}`
        : !isStoredText(value)
          ? 'it holds a NUL or a lone surrogate'
          : undefined;
  if (wrong === undefined) return value as string;
  rt.onUnkeptReference?.(name, wrong);
  return null;
}

/**
 * Writes the provider's answer that the effect did not happen (`failed`, `absent`). One whose
 * write fails rides with the attempt's end instead, as a `committed` mark does: the error the
 * handler then sees is the provider's, not the store's, so a permanent refusal still ends the
 * operation `failed` rather than being retried (and sent again) as a store outage would be.
 */
async function markAnswer(
  rt: EffectRuntime,
  mark: Exclude<EffectMarkParams, { state: 'committed' }>,
): Promise<void> {
  try {
    await rt.journal.mark(mark);
  } catch (error) {
    if (!rt.marks || !isStoreError(error)) throw error;
    rt.marks.add(mark);
  }
}

async function hit(rt: EffectRuntime, point: FailpointName, info: FailpointInfo): Promise<void> {
  try {
    await failpoint(point, info);
  } catch (error) {
    if (isSimulatedCrash(error)) rt.markCrashed();
    throw error;
  }
}

async function commit(
  rt: EffectRuntime,
  name: string,
  result: unknown,
  reference: string | null,
): Promise<void> {
  // Written out as JSON once, here, and that text is what the journal keeps: an answer read again
  // (a getter, a Proxy) might say something else, or throw, the second time.
  let text: string;
  try {
    assertPlainJson(result ?? null);
    text = JSON.stringify(result ?? null);
  } catch (thrown) {
    // The provider did it, but the journal cannot keep what it answered, so a later attempt
    // could not replay it. The row stays `pending` (its outcome unknown to the journal) and the
    // operation fails, which a pending effect turns into `needs_reconciliation`: nothing is
    // sent again.
    const error = readThrown(thrown, `reading effect ${name}'s answer`);
    throw new Permanent(
      `the result of effect ${name} is not plain JSON: ${isEngineMade(error) && isInputNotJson(error) ? error.reason : messageOf(error).slice(0, 1000)}; ` +
        'record: (answer) => ({ …the plain fields you need }) keeps what the journal can replay',
      {
        code: 'effect-result-not-json',
      },
    );
  }
  // The journal's row is read whole by every later attempt and every view of the effects, so an
  // answer is bounded as the handler's result is. The provider has done the effect all the same:
  // the same ending as an answer that is not JSON.
  const bytes = utf8BytesOver(text, rt.maxResultBytes);
  if (bytes !== null)
    throw new Permanent(
      `the result of effect ${name} is ${bytes} bytes as JSON, over the kind's maxResultBytes (${rt.maxResultBytes})`,
      { code: 'effect-result-too-large', details: { bytes, maxResultBytes: rt.maxResultBytes } },
    );
  const mark = {
    lease: rt.lease,
    name,
    state: 'committed' as const,
    result: new JsonText(text),
    reference,
  };
  // The handler goes on at once; the mark leaves with the journal's next batch, or with the
  // attempt's end if the handler ends first. Either way it is durable before the operation
  // completes, and a crash before it is crash point C2, which the next attempt recovers.
  if (rt.marks) {
    rt.marks.add(mark);
    return;
  }
  const ok = await rt.journal.mark(mark);
  rt.checkAlive();
  // The provider holds the effect but this worker no longer owns the operation: the owner will
  // find the row pending and recover it under the same key.
  if (!ok) throw engineMade(new LeaseLost(rt.lease.id));
}

function unknown(
  name: string,
  row: EffectRow,
  retentionMs: number,
  lookupError?: unknown,
): EffectOutcomeUnknown {
  const asked =
    lookupError === undefined
      ? ''
      : ` (the lookup failed: ${toErrorRecord(lookupError).message.slice(0, 500)})`;
  return engineMade(
    new EffectOutcomeUnknown(
      name,
      `effect ${name} (key ${row.key}) may have been sent at ${new Date(row.firstSentAt).toISOString()}, ` +
        `beyond the provider's ${retentionMs} ms retention${asked}: a blind retry could repeat it, so it needs reconciliation`,
    ),
  );
}

/**
 * A journal write the store refused because the lease is gone, or because a cancel came first,
 * stops the attempt at once, as the heartbeat would on its next beat: a handler that catches the
 * error must not go on as if it still owned the operation. What the store refused with is the
 * engine's own (a spent budget, the operation's cap on requests): the handler may rethrow it, and
 * it keeps its meaning (core/errors/engine-made.ts).
 */
function fenced<T>(rt: EffectRuntime, write: Promise<T>): Promise<T> {
  return write.catch((error: unknown) => {
    engineMade(error);
    if (isLeaseLost(error) || isCancelRequested(error)) rt.stop.abort(error);
    throw error;
  });
}

/**
 * A lookup's answer decides whether a charge exists: one of another shape (no `status`, or
 * `committed` without its `result`) is a bug in the lookup, not an answer, and is never read as
 * one. Refused for good, it leaves the effect `pending` for a person.
 */
function assertLookupAnswer(name: string, found: unknown): void {
  const answer = found as { status?: unknown; result?: unknown } | null | undefined;
  const status = typeof answer === 'object' && answer !== null ? answer.status : undefined;
  const valid =
    status === 'absent' || status === 'unknown' || (status === 'committed' && answer?.result !== undefined);
  if (!valid) {
    let shown: string;
    try {
      shown = JSON.stringify(found)?.slice(0, 200) ?? String(found);
    } catch {
      // A BigInt, a cycle, a getter that throws: said by what it is.
      shown = `a${typeof found === 'object' ? 'n' : ''} ${typeof found} that is not JSON`;
    }
    throw new Permanent(
      `the lookup of effect ${name} answered ${shown}: an answer is {status: 'committed', result}, {status: 'absent'} or {status: 'unknown'}`,
      { code: 'lookup-answer-invalid' },
    );
  }
}
