/**
 * @module core/identity
 * The identity scope of an operation: `(tenant, id)`. An id is the client's idempotency key:
 * 1–255 visible ASCII characters (the IETF Idempotency-Key draft's rule, without spaces, so ids
 * are safe in URLs, logs and headers). A tenant is 1–128 of the same characters.
 */
import { InvalidArgument } from './errors/index.js';

const VISIBLE = /^[\x21-\x7e]+$/;

export function assertTenant(tenant: unknown): asserts tenant is string {
  if (typeof tenant !== 'string' || tenant.length < 1 || tenant.length > 128 || !VISIBLE.test(tenant)) {
    throw new InvalidArgument('tenant must be 1–128 visible ASCII characters');
  }
}

export function assertOperationId(id: unknown): asserts id is string {
  if (typeof id !== 'string' || id.length < 1 || id.length > 255 || !VISIBLE.test(id)) {
    throw new InvalidArgument('operation id must be 1–255 visible ASCII characters');
  }
}
