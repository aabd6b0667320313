/**
 * @module http/json-body
 * The only body parser: `application/json` in UTF-8, read up to the server's body limit (fastify
 * refuses more with 413 before reading it: by `Content-Length` at once, by counting otherwise).
 * Every other content type is refused with 415, so a body never reaches a route unparsed; so is
 * a body under any `Content-Encoding` but `identity` (RFC 9110 §8.4.1): nothing here decodes one,
 * and gzip bytes read as JSON text would be refused as malformed or, worse, accepted.
 *
 * Before `JSON.parse`, one linear scan of the text enforces what parsing cannot undo:
 * - nesting depth (default 64): a 10,000-level array is tiny but would overflow the stack of
 *   every recursive walk after it (validation, canonical JSON, the digest);
 * - numbers within ±(2^53−1) (I-JSON, RFC 7493): a bigger one would be silently rounded, and a
 *   rounded amount is a different charge. Out of range also covers `1e400` (Infinity).
 * - keys unique within an object (I-JSON): a key named twice is read differently by different
 *   parsers, so the body would not mean one thing.
 * `JSON.parse` itself is iterative in V8, so the scan, not the parser, is the guard. Keys named
 * `__proto__` are refused (prototype poisoning), as fastify's own parser does.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from './problem.js';

export const DEFAULT_MAX_JSON_DEPTH = 64;

const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const MINUS = 0x2d;
const COMMA = 0x2c;

const isNumberChar = (c: number) =>
  (c >= 0x30 && c <= 0x39) || c === MINUS || c === 0x2b || c === 0x2e || c === 0x45 || c === 0x65;

/**
 * Throws `body-too-deep`, `number-out-of-range`, or `body-malformed` for a key named twice in
 * one object; leaves syntax errors to `JSON.parse`.
 */
export function scanJson(text: string, maxDepth: number): void {
  let depth = 0;
  let inString = false;
  // Per open object, the keys seen (null for an array); whether the next string is a key.
  const keys: Array<Set<string> | null> = [];
  let keyNext = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === BACKSLASH) i++;
      else if (c === QUOTE) inString = false;
      continue;
    }
    if (c === QUOTE) {
      if (keyNext) {
        i = checkKey(text, i, keys[keys.length - 1]!);
        keyNext = false;
      } else inString = true;
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > maxDepth) {
        throw new ApiError(
          'body-too-deep',
          `the body nests arrays and objects more than ${maxDepth} levels deep`,
        );
      }
      keys.push(c === OPEN_BRACE ? new Set() : null);
      keyNext = c === OPEN_BRACE;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
      depth--;
      keys.pop();
      keyNext = false;
    } else if (c === COMMA) {
      keyNext = keys[keys.length - 1] != null;
    } else if ((c >= 0x30 && c <= 0x39) || c === MINUS) {
      let j = i + 1;
      while (j < text.length && isNumberChar(text.charCodeAt(j))) j++;
      const token = text.slice(i, j);
      const value = Number(token);
      if (!Number.isNaN(value) && !(Math.abs(value) <= Number.MAX_SAFE_INTEGER)) {
        throw new ApiError(
          'number-out-of-range',
          `the number ${token.length > 40 ? `${token.slice(0, 40)}…` : token} is outside ±(2^53−1) and cannot be kept exactly; send it as a string`,
        );
      }
      i = j - 1;
    }
  }
}

/**
 * Reads the key whose opening quote is at `start` into `seen`, and returns the index of its
 * closing quote. A key named twice is refused: `JSON.parse` keeps the last, other parsers the
 * first, so `{"kind":"charge","kind":"export"}` could be read two ways (RFC 8259 §4, I-JSON).
 */
function checkKey(text: string, start: number, seen: Set<string>): number {
  let end = start + 1;
  let escaped = false;
  while (end < text.length && text.charCodeAt(end) !== QUOTE) {
    if (text.charCodeAt(end) === BACKSLASH) {
      escaped = true;
      end++;
    }
    end++;
  }
  let key = text.slice(start + 1, end);
  if (escaped) {
    try {
      key = JSON.parse(text.slice(start, end + 1)) as string;
    } catch {
      return end; // a bad escape: JSON.parse reports it
    }
  }
  if (seen.has(key)) {
    const shown = key.length > 40 ? `${key.slice(0, 40)}…` : key;
    throw new ApiError('body-malformed', `the key ${JSON.stringify(shown)} appears twice in one object`);
  }
  seen.add(key);
  return end;
}

function refuseProto(key: string, value: unknown): unknown {
  if (key === '__proto__') throw new ApiError('body-malformed', 'keys named __proto__ are not accepted');
  return value;
}

export function parseJsonBody(text: string, maxDepth: number): unknown {
  scanJson(text, maxDepth);
  try {
    return text.includes('proto') || text.includes('\\u') ? JSON.parse(text, refuseProto) : JSON.parse(text);
  } catch (error) {
    if (error instanceof ApiError) throw error;
    throw new ApiError('body-malformed', `the body is not valid JSON: ${(error as Error).message}`);
  }
}

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The body's text. JSON is UTF-8 (RFC 8259 §8.1): bytes that are not are refused, not replaced
 * by U+FFFD, which would make two different inputs one digest; a `charset` other than UTF-8 is
 * refused before the body is read as text.
 */
function utf8Text(request: FastifyRequest, body: Buffer): string {
  const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(request.headers['content-type'] ?? '')?.[1];
  if (charset !== undefined && !/^utf-?8$/i.test(charset)) {
    throw new ApiError('unsupported-media-type', `the body must be UTF-8 JSON, not charset ${charset}`);
  }
  try {
    return UTF8.decode(body);
  } catch {
    throw new ApiError('body-malformed', 'the body is not valid UTF-8');
  }
}

/** Whether a request declares a body: a `Content-Length` above 0, or a `Transfer-Encoding`. */
function declaresBody(request: FastifyRequest): boolean {
  const length = request.headers['content-length'];
  return request.headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

/**
 * Refuses a body under a content coding the server does not decode, before a byte of it is read
 * (RFC 9110 §15.5.16: 415, with `Accept-Encoding` naming what would be accepted). `identity`,
 * listed any number of times, is no coding at all.
 */
export function checkContentEncoding(request: FastifyRequest): void {
  const header = request.headers['content-encoding'];
  if (header === undefined || !declaresBody(request)) return;
  const codings = header
    .split(',')
    .map((c) => c.trim().toLowerCase())
    .filter((c) => c !== '');
  const other = codings.find((c) => c !== 'identity');
  if (other === undefined) return;
  const shown = other.length > 40 ? `${other.slice(0, 40)}…` : other;
  throw new ApiError(
    'unsupported-media-type',
    `the body must be sent without a content coding, not ${JSON.stringify(shown)}`,
    { headers: { 'accept-encoding': 'identity' } },
  );
}

/** Replaces fastify's parsers with this one. */
export function registerJsonParser(app: FastifyInstance, options: { maxDepth: number }): void {
  app.removeAllContentTypeParsers();
  // Before the parser, so before the body is read. GET and HEAD bodies are never read (fastify
  // parses none), and a path with no route is answered 404 whatever its body.
  app.addHook('preParsing', async (request) => {
    if (request.method === 'GET' || request.method === 'HEAD' || request.is404) return;
    checkContentEncoding(request);
  });
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    let text: string;
    try {
      text = utf8Text(request, body as Buffer);
    } catch (error) {
      done(error as Error, undefined);
      return;
    }
    if (text.trim() === '') {
      // An empty body is fine where none is expected (POST …/cancel), refused where one is.
      if (request.routeOptions.schema?.body) {
        done(
          new ApiError('body-malformed', 'the body is empty; this route expects a JSON object'),
          undefined,
        );
      } else {
        done(null, undefined);
      }
      return;
    }
    try {
      done(null, parseJsonBody(text, options.maxDepth));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
}
