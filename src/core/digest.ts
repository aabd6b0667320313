/**
 * @module core/digest
 * The digest that binds an operation id to its material inputs: SHA-256 over the RFC 8785
 * (JSON Canonicalization Scheme) form of `{kind, input}`. Canonical form makes the digest
 * independent of key order and number spelling, so a client that rebuilds the same request
 * gets the same digest, and any change to a material field gets another one.
 */
import { createHash } from 'node:crypto';
import canonicalize from 'canonicalize';
import { InputNotJson } from './errors/index.js';
import { LONE_SURROGATE } from './stored-text.js';

/** The longest JSON text of a number: `-0.0000012345678901234567` (fixed notation down to 1e-6). */
const MAX_NUMBER_TEXT = 25;

/**
 * The deepest nesting of arrays and objects a value may have. Deeper, the walks of it (this one,
 * canonical JSON, the drivers') would overflow the stack, and SQLite's JSON functions refuse
 * 1,000 levels; the HTTP API stops at 64 before it parses (`maxJsonDepth`).
 */
export const MAX_JSON_DEPTH = 512;

/**
 * Throws `InputNotJson` unless `value` is plain JSON (no undefined, functions, BigInt, cycles,
 * NaN, lone surrogates, nesting deeper than `MAX_JSON_DEPTH`). Returns a bound on the bytes of its JSON text, found on the same walk (a
 * string counts six bytes a UTF-16 unit, as `\u0000`; a number its longest text), so a caller
 * that limits the size serialises the value only when the bound is over its limit.
 */
export function assertPlainJson(value: unknown): number {
  const seen = new Set<object>();
  let depth = 0;
  const walk = (v: unknown, path: string): number => {
    if (v === null || typeof v === 'boolean') return 5;
    if (typeof v === 'string') {
      if (LONE_SURROGATE.test(v))
        throw new InputNotJson(`${path || '(root)'} holds a lone surrogate, which is not Unicode text`);
      return v.length * 6 + 2;
    }
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) throw new InputNotJson(`${path || '(root)'} is not a finite number`);
      return MAX_NUMBER_TEXT;
    }
    if (typeof v !== 'object') throw new InputNotJson(`${path || '(root)'} is a ${typeof v}`);
    if (seen.has(v)) throw new InputNotJson(`${path || '(root)'} is a cycle`);
    if (++depth > MAX_JSON_DEPTH)
      throw new InputNotJson(`the value nests arrays and objects more than ${MAX_JSON_DEPTH} levels deep`);
    seen.add(v);
    // Brackets, and a comma after each member.
    let bound = 2;
    if (Array.isArray(v)) {
      for (const [i, item] of v.entries()) bound += walk(item, `${path}[${i}]`) + 1;
    } else {
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null) {
        // Which class says what to do about it: a Date wants its ISO text, a Map its entries.
        const made = (proto as { constructor?: { name?: unknown } }).constructor?.name;
        const named = typeof made === 'string' && made !== '' && made !== 'Object' ? `a ${made}, ` : '';
        throw new InputNotJson(`${path || '(root)'} is ${named}not a plain object`);
      }
      for (const [k, item] of Object.entries(v)) {
        if (LONE_SURROGATE.test(k))
          throw new InputNotJson(
            `${path || '(root)'} has a key holding a lone surrogate, which is not Unicode text`,
          );
        if (item === undefined) throw new InputNotJson(`${path ? `${path}.` : ''}${k} is undefined`);
        // The key's text and its colon.
        bound += k.length * 6 + 3 + walk(item, path ? `${path}.${k}` : k) + 1;
      }
    }
    seen.delete(v);
    depth--;
    return bound;
  };
  return walk(value, '');
}

/** RFC 8785 canonical JSON. The input must be plain JSON. */
export function canonicalJson(value: unknown): string {
  let text: string | undefined;
  try {
    text = canonicalize(value);
  } catch (error) {
    throw new InputNotJson((error as Error).message);
  }
  if (text === undefined) throw new InputNotJson('value has no JSON form');
  return text;
}

/** SHA-256 (hex) of the canonical JSON of `{kind, input}`. */
export function operationDigest(kind: string, input: unknown): string {
  return createHash('sha256').update(canonicalJson({ kind, input })).digest('hex');
}

/**
 * The same digest from an input already in canonical form: `{"input":…,"kind":…}` is the
 * canonical form of `{kind, input}` because RFC 8785 sorts keys and "input" < "kind". Saves
 * canonicalizing the input twice on the submit path.
 */
export function digestOfCanonical(kind: string, canonicalInput: string): string {
  return createHash('sha256')
    .update(`{"input":${canonicalInput},"kind":${JSON.stringify(kind)}}`)
    .digest('hex');
}
