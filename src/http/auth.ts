/**
 * @module http/auth
 * Bearer API keys. Each key belongs to one tenant or is an admin key; the tenant of a request
 * always comes from its key, never from its body.
 *
 * Keys are configured either as `sha256:<64 hex>` or in plaintext, which is hashed here at start
 * and never kept or logged. A presented key is hashed and compared against every configured
 * digest with `timingSafeEqual` (fixed 32-byte digests, no early exit), so the time taken says
 * nothing about how close a guess was, nor which key matched.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { InvalidArgument } from '../core/errors/index.js';
import { assertTenant } from '../core/identity.js';
import { ApiError } from './problem.js';

export interface AuthConfig {
  /** Keys per tenant: `'sha256:<hex>'` or plaintext. */
  tenants: Record<string, string[]>;
  /** Admin keys: operator routes, any tenant. */
  admin: string[];
}

export type Principal =
  | { kind: 'tenant'; tenant: string /** Recorded as `by` (e.g. on cancel). */; id: string }
  | { kind: 'admin' /** `admin#<n>`: the key's position in the configuration, never the key. */; id: string };

const HASHED = /^sha256:([0-9a-fA-F]{64})$/;
const VISIBLE = /^[\x21-\x7e]+$/;
/** Longest token we hash; the header limit bounds it anyway. */
const MAX_TOKEN = 4096;

const sha256 = (text: string): Buffer => createHash('sha256').update(text, 'utf8').digest();

function digestOf(configured: string, where: string): Buffer {
  if (typeof configured !== 'string' || configured.length === 0) {
    throw new InvalidArgument(`${where}: a key must be a non-empty string`);
  }
  const hashed = HASHED.exec(configured);
  if (hashed) return Buffer.from(hashed[1]!.toLowerCase(), 'hex');
  if (configured.startsWith('sha256:')) {
    throw new InvalidArgument(`${where}: a hashed key is 'sha256:' and 64 hex digits`);
  }
  if (!VISIBLE.test(configured) || configured.length > MAX_TOKEN) {
    throw new InvalidArgument(`${where}: a key is 1–${MAX_TOKEN} visible ASCII characters`);
  }
  return sha256(configured);
}

/**
 * A new API key: 32 random bytes (256 bits) in base64url behind a `sluice_` prefix, which lets a
 * secret scanner recognise one in a repository or a log. Its digest is kept unsalted and fast
 * (`hashApiKey`): a salt and a slow hash make guessable secrets costly to find from their
 * digests, and nothing guesses 256 random bits.
 */
export function newApiKey(): string {
  return `sluice_${randomBytes(32).toString('base64url')}`;
}

/** SHA-256 of a key, in the form the configuration accepts: for `sluice` users hashing their keys. */
export function hashApiKey(key: string): string {
  return `sha256:${sha256(key).toString('hex')}`;
}

export class KeyRing {
  private readonly entries: Array<{ digest: Buffer; principal: Principal }> = [];

  constructor(config: AuthConfig) {
    const seen = new Set<string>();
    const add = (key: string, principal: Principal, where: string) => {
      const digest = digestOf(key, where);
      const hex = digest.toString('hex');
      if (seen.has(hex)) throw new InvalidArgument(`${where}: the same key is configured twice`);
      seen.add(hex);
      this.entries.push({ digest, principal });
    };
    for (const [tenant, keys] of Object.entries(config.tenants ?? {})) {
      assertTenant(tenant);
      if (!Array.isArray(keys)) throw new InvalidArgument(`auth.tenants.${tenant} must be a list of keys`);
      keys.forEach((k, i) => {
        add(k, { kind: 'tenant', tenant, id: `tenant:${tenant}` }, `auth.tenants.${tenant}[${i}]`);
      });
    }
    (config.admin ?? []).forEach((k, i) => {
      add(k, { kind: 'admin', id: `admin#${i + 1}` }, `auth.admin[${i}]`);
    });
  }

  get size(): number {
    return this.entries.length;
  }

  /** The principal of an `Authorization: Bearer <key>` header, or a 401 `ApiError`. */
  authenticate(header: string | undefined): Principal {
    const challenge = { 'www-authenticate': 'Bearer realm="sluice"' };
    if (header === undefined || header === '') {
      throw new ApiError('unauthorized', 'send the API key as Authorization: Bearer <key>', {
        headers: challenge,
      });
    }
    const match = /^Bearer +(\S+) *$/i.exec(header);
    const token = match?.[1];
    if (!token || token.length > MAX_TOKEN) {
      throw new ApiError('unauthorized', 'the Authorization header must be Bearer <key>', {
        headers: { 'www-authenticate': 'Bearer realm="sluice", error="invalid_request"' },
      });
    }
    const digest = sha256(token);
    let found: Principal | undefined;
    for (const entry of this.entries) {
      // No early exit: every configured digest is compared.
      if (timingSafeEqual(digest, entry.digest) && found === undefined) found = entry.principal;
    }
    if (!found) {
      throw new ApiError('unauthorized', 'the API key is not known', {
        headers: { 'www-authenticate': 'Bearer realm="sluice", error="invalid_token"' },
      });
    }
    return found;
  }
}
