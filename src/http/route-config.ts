/**
 * @module http/route-config
 * What each route declares besides its schema — who may call it and which problems it may
 * answer with — and the helpers that read the caller's identity. The server's hooks enforce
 * `auth`; the OpenAPI generator documents both.
 */
import type { FastifyRequest } from 'fastify';
import { AWAITING_OPERATOR_STATES } from '../core/states.js';
import type { Principal } from './auth.js';
import { ApiError } from './problem.js';

/**
 * `none`: public. `tenant`: a tenant key. `admin`: an admin key. `any`: either; an admin key
 * names the tenant it acts for with `?tenant=`. `key`: either, acting as itself (`GET /v1/me`).
 */
export type AuthMode = 'none' | 'tenant' | 'admin' | 'any' | 'key';

declare module 'fastify' {
  interface FastifyContextConfig {
    auth?: AuthMode;
    /** Problem codes this route may answer with (documented in OpenAPI), beyond the common ones. */
    problems?: string[];
    /** The body's `input` is refined per kind in the OpenAPI document. */
    inputByKind?: boolean;
  }
  interface FastifyRequest {
    principal: Principal | null;
    /** The problem code this request was answered with, for the log line and metrics. */
    problemCode: string | null;
  }
}

export function principalOf(request: FastifyRequest): Principal {
  // Unreachable while the auth hook guards every route that calls this; if one ever did not,
  // its 401 still carries the challenge every 401 does (and the OpenAPI document promises).
  if (!request.principal)
    throw new ApiError('unauthorized', 'this route needs an API key', {
      headers: { 'www-authenticate': 'Bearer realm="sluice"' },
    });
  return request.principal;
}

/**
 * The tenant a request acts for: a tenant key's own, always; an admin key's from `?tenant=`.
 * A tenant key that names a tenant is refused, even its own: the tenant comes from the key.
 */
export function tenantFor(request: FastifyRequest): string {
  const principal = principalOf(request);
  const named = (request.query as { tenant?: string } | undefined)?.tenant;
  if (principal.kind === 'tenant') {
    if (named !== undefined) {
      throw new ApiError(
        'forbidden',
        'a tenant key always acts for its own tenant; `tenant` is for admin keys',
      );
    }
    return principal.tenant;
  }
  if (named === undefined) {
    throw new ApiError('invalid-argument', 'an admin key must name the tenant: ?tenant=<tenant>', {
      errors: [{ parameter: 'tenant', detail: 'required with an admin key' }],
    });
  }
  return named;
}

/**
 * The tenant a listing reads: as `tenantFor`, except that an admin key that names none lists
 * every tenant's operations of a state an operator acts on (`dead`, `needs_reconciliation`), the
 * states both stores index across tenants. Another state across tenants would read through the
 * whole history to fill a page: refused, with the states that may be listed so.
 */
export function listedTenantFor(request: FastifyRequest, state: string | undefined): string | undefined {
  const principal = principalOf(request);
  if (principal.kind === 'tenant' || (request.query as { tenant?: string } | undefined)?.tenant !== undefined)
    return tenantFor(request);
  if (state === undefined || !(AWAITING_OPERATOR_STATES as readonly string[]).includes(state))
    throw new ApiError(
      'invalid-argument',
      `an admin key lists across tenants only the operations waiting for an operator: ` +
        `?state=${AWAITING_OPERATOR_STATES.join(' or ?state=')}; name the tenant for any other listing: ?tenant=<tenant>`,
      {
        errors: [
          {
            parameter: 'tenant',
            detail: 'required with an admin key, unless state is dead or needs_reconciliation',
          },
        ],
      },
    );
  return undefined;
}
