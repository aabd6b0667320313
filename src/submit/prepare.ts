/**
 * @module submit/prepare
 * A submit from the caller's request to the store's item and back: every check that needs no
 * store, cheapest first (identity, kind, JSON form, size, schema, times), so that a request
 * refused here has cost nothing and holds nothing; and a refusal for capacity, with the wait a
 * client should take before it sends the request again.
 */
import type { Admission } from '../admission/limits.js';
import type { RetryAfterEstimator } from '../admission/retry-after.js';
import { bounded, MAX_REQUEST_MS } from '../core/bounds.js';
import { assertPlainJson, canonicalJson, digestOfCanonical } from '../core/digest.js';
import { CapacityExceeded, InputTooLarge, InvalidArgument, UnknownKind } from '../core/errors/index.js';
import { assertOperationId, assertTenant } from '../core/identity.js';
import { type Kind, validateInput } from '../runtime/kinds.js';
import type { SubmitOutcome, SubmitParams } from '../store/types.js';
import { type AnySubmitRequest, kindNameOf } from './requests.js';

/** A request checked and ready for the store. */
export interface Prepared {
  params: SubmitParams;
  /** The tenant's waiting cap it was sent with, to estimate a retry after a refusal. */
  tenantMaxWaiting: number | null;
}

/** Everything a submit checks before the store, cheapest first: the store's item, or a throw. */
export async function prepareSubmit(
  request: AnySubmitRequest,
  kinds: ReadonlyMap<string, Kind>,
  admission: Admission,
): Promise<Prepared> {
  if (typeof request !== 'object' || request === null) {
    throw new InvalidArgument('a submit request must be an object: { tenant, id, kind, input }');
  }
  const { tenant, id } = request;
  assertTenant(tenant);
  assertOperationId(id);
  const name = kindNameOf(request.kind);
  const kind = name === undefined ? undefined : kinds.get(name);
  if (!kind) throw new UnknownKind(name ?? String(request.kind));
  assertPlainJson(request.input);
  const inputJson = canonicalJson(request.input);
  const bytes = Buffer.byteLength(inputJson);
  if (bytes > kind.limits.maxInputBytes) throw new InputTooLarge(kind.limits.maxInputBytes, bytes);
  await validateInput(kind, request.input);
  let deadlineMs = kind.limits.deadlineMs;
  if (request.deadlineMs !== undefined) {
    // As the HTTP API bounds them (1 ms to 365 days): a time the stores can keep.
    const asked = bounded('deadlineMs', request.deadlineMs, 0, {
      min: 1,
      max: MAX_REQUEST_MS,
      integer: true,
    });
    deadlineMs = deadlineMs === null ? asked : Math.min(deadlineMs, asked);
  }
  bounded('delayMs', request.delayMs, 0, { min: 0, max: MAX_REQUEST_MS, integer: true });
  // Accepted, it would hold a waiting place until it failed `deadline-exceeded` unstarted.
  if (request.delayMs !== undefined && deadlineMs !== null && request.delayMs >= deadlineMs) {
    throw new InvalidArgument(
      `delayMs ${request.delayMs} starts the operation at or after its deadline, ${deadlineMs} ms after acceptance`,
    );
  }
  const tenantLimits = admission.tenantLimits(kind.class, tenant);
  const params: SubmitParams = {
    tenant,
    id,
    kind: kind.name,
    class: kind.class,
    digest: digestOfCanonical(kind.name, inputJson),
    inputJson,
    maxAttempts: kind.limits.maxAttempts,
    deadlineMs,
    delayMs: request.delayMs,
    limits: { ...tenantLimits, maxQueued: admission.maxQueued(kind.class) },
  };
  return { params, tenantMaxWaiting: tenantLimits.maxWaiting };
}

/** The store's refusal of a full queue, as the error thrown, with the wait it estimates. */
export function capacityRefusal(
  outcome: Extract<SubmitOutcome, { status: 'rejected' }>,
  { params, tenantMaxWaiting }: Prepared,
  admission: Admission,
  retryAfter: RetryAfterEstimator,
): CapacityExceeded {
  const byTenant = outcome.reason === 'tenant-queue-full';
  const cap = byTenant ? tenantMaxWaiting : admission.maxQueued(params.class);
  const retryAfterMs = retryAfter.estimate(
    params.class,
    outcome.waiting - (cap ?? 0) + 1,
    outcome.running,
    outcome.dueInMs,
  );
  return new CapacityExceeded(
    outcome.reason,
    retryAfterMs,
    `${byTenant ? `tenant ${params.tenant}` : `class ${params.class}`} has ${outcome.waiting} ` +
      `operations waiting, the most it may; retry after ${retryAfterMs / 1000} s`,
  );
}
