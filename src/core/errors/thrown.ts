/**
 * @module core/errors/thrown
 * What a handler, or an effect's `call`, `lookup`, `record` or `reference`, threw, read once where
 * its failure is caught.
 *
 * Any value may be thrown, and the engine's failure path reads it: its marks and code to classify
 * it, its message to store it, its name to log it. A revoked Proxy (an Immer draft once its
 * producer has returned) throws on every read; a Proxy's traps, or an object's getters
 * (`Symbol.toStringTag` included), may throw, and what they throw may be another such value. One
 * read that threw on that path left the attempt without an end, its lease left to expire until
 * the operation was `dead` for a crash loop; thrown out of the worker's own `.catch`, it took the
 * process down. So the value is read here first, each read guarded, and one that cannot be read
 * is replaced by an `Error` that says so, with what could be learnt of it: from then on the
 * engine reads only values that answer. (The functions that read errors further on are total as
 * well: a getter may answer once and throw the next time.)
 *
 * Not part of the public API (core/errors/index.ts does not export it).
 */
import { types } from 'node:util';

/** What the failure path reads of a thrown object, besides its prototype and string form. */
const READ: ReadonlyArray<string | symbol> = [
  Symbol.for('sluice.error'),
  Symbol.for('sluice.outcome'),
  Symbol.for('sluice.simulated-crash'),
  'code',
  'message',
  'name',
];

/**
 * `value` itself when the engine can read what it needs of it; otherwise a new `Error` saying that
 * `who` ("the handler", "effect charge's call") threw a value that cannot be read, and why.
 */
export function readThrown(value: unknown, who: string): unknown {
  if ((typeof value !== 'object' && typeof value !== 'function') || value === null) return value;
  let reading = 'its prototype';
  try {
    const isError = value instanceof Error;
    for (const key of READ) {
      reading = typeof key === 'symbol' ? `its ${key.description} mark` : `its ${key}`;
      void (value as Record<string | symbol, unknown>)[key];
    }
    if (!isError) {
      // What a message or a log line makes of a thrown value that is not an Error.
      reading = 'its string form';
      try {
        String(value);
      } catch {
        Object.prototype.toString.call(value);
      }
    }
    return value;
  } catch (error) {
    const what = types.isProxy(value) ? 'a Proxy' : typeof value === 'function' ? 'a function' : 'an object';
    return new Error(
      `${who} threw a value that cannot be read (${what}: reading ${reading} threw ${quietly(error)})`,
    );
  }
}

/** A few words about a value thrown while reading another one; never reads a Proxy, never throws. */
function quietly(error: unknown): string {
  try {
    if (typeof error === 'string') return JSON.stringify(error.slice(0, 200));
    if ((typeof error !== 'object' && typeof error !== 'function') || error === null) return String(error);
    if (types.isProxy(error)) return 'a Proxy';
    if (error instanceof Error) {
      const message: unknown = error.message;
      if (typeof message === 'string') return `${error.constructor.name}: ${message.slice(0, 200)}`;
    }
  } catch {
    // Said below.
  }
  return 'a value that cannot be read either';
}
