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

/** In Unicode mode a surrogate pair is one code point: only a lone surrogate is of category Cs. */
const LONE_SURROGATE = /\p{Cs}/u;

/** Throws `InputNotJson` unless `value` is plain JSON (no undefined, functions, BigInt, cycles, NaN, lone surrogates). */
export function assertPlainJson(value: unknown): void {
  const seen = new Set<object>();
  const walk = (v: unknown, path: string): void => {
    if (v === null || typeof v === 'boolean') return;
    if (typeof v === 'string') {
      if (LONE_SURROGATE.test(v))
        throw new InputNotJson(`${path || '(root)'} holds a lone surrogate, which is not Unicode text`);
      return;
    }
    if (typeof v === 'number') {
      if (!Number.isFinite(v)) throw new InputNotJson(`${path || '(root)'} is not a finite number`);
      return;
    }
    if (typeof v !== 'object') throw new InputNotJson(`${path || '(root)'} is a ${typeof v}`);
    if (seen.has(v)) throw new InputNotJson(`${path || '(root)'} is a cycle`);
    seen.add(v);
    if (Array.isArray(v)) {
      for (const [i, item] of v.entries()) walk(item, `${path}[${i}]`);
    } else {
      const proto = Object.getPrototypeOf(v);
      if (proto !== Object.prototype && proto !== null)
        throw new InputNotJson(`${path || '(root)'} is not a plain object`);
      for (const [k, item] of Object.entries(v)) {
        if (LONE_SURROGATE.test(k))
          throw new InputNotJson(
            `${path || '(root)'} has a key holding a lone surrogate, which is not Unicode text`,
          );
        if (item === undefined) throw new InputNotJson(`${path ? `${path}.` : ''}${k} is undefined`);
        walk(item, path ? `${path}.${k}` : k);
      }
    }
    seen.delete(v);
  };
  walk(value, '');
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
