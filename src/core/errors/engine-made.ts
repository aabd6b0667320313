/**
 * @module core/errors/engine-made
 * The errors the engine made itself, and may therefore take at their word.
 *
 * An error's `code` says what it is to a reader, not who made it: a handler's
 * `new Permanent('…', { code: 'cancel-requested' })` carries the code of a cancel, and so does
 * an object given the global mark of a Sluice error, or a `CancelRequested` a handler made to
 * "cancel itself" after a charge. Read by its code, each ended its operation as the engine's own
 * outcome would (cancelled, given back without using an attempt, abandoned without a write);
 * some of those, after an effect, ran the operation again and again for ever. So the outcomes
 * only the engine decides (a lost lease, a cancel, the worker's stop, the deadline, an attempt's
 * timeout, a per-operation limit, an effect's unknown outcome, a spent budget, a refused result)
 * are recognised from `signal.reason` or from an error registered here where the engine made it.
 *
 * A WeakSet, not a mark on the error: a mark can be copied onto any object (and a Proxy answers
 * for its own), while membership is by identity, holds a frozen error, never runs a Proxy's
 * traps, and keeps nothing alive. A handler that rethrows an error it was given (`ctx.effect`'s,
 * `ctx.signal.reason`) throws the same object, which keeps its meaning. This module is not part
 * of the public API (core/errors/index.ts does not export it), so a handler cannot register one.
 *
 * Sluice's refusals of a call (`InvalidArgument`, `OperationConflict`, `OperationExpired`,
 * `InputInvalid`, `InputNotJson`) register themselves when constructed: the public API throws
 * them from many places outside an attempt (a child operation's submit), and one a handler makes
 * by hand can only end its operation `dead` or `failed` at once, which is what it then asked for.
 */

const made = new WeakSet<object>();

/** Registers `error` as the engine's own; returns it. */
export function engineMade<T>(error: T): T {
  if ((typeof error === 'object' || typeof error === 'function') && error !== null) made.add(error);
  return error;
}

/** Whether the engine made `value` (never reads it: safe on anything thrown). */
export function isEngineMade(value: unknown): boolean {
  return (typeof value === 'object' || typeof value === 'function') && value !== null && made.has(value);
}
