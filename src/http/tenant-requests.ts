/**
 * @module http/tenant-requests
 * How many requests one tenant may have in progress at once on this server. A tenant that opens
 * hundreds of requests at once (a runaway loop, a batch job polling every operation, a listing of
 * 1 MiB pages) would otherwise fill the store's connection pool and the event loop, and every
 * other tenant's submit would wait behind it: the noisy neighbour this service exists to contain,
 * one tier up from the workers. Over the cap a request is refused at once, before its body is
 * read, with `429 tenant-too-many-requests` and `Retry-After: 1`; it stored nothing, so the client
 * sends it again. A request counts from its headers until its answer is sent or its connection
 * closes, whichever comes first. Admin keys are not capped. Per server process: N API processes
 * let a tenant have N times the cap, as they have N pools.
 */
import type { FastifyReply } from 'fastify';
import { ApiError } from './problem.js';

/** In-progress requests a tenant may have on one server, by default. */
export const DEFAULT_MAX_REQUESTS_PER_TENANT = 64;

export class TenantRequests {
  private readonly inProgress = new Map<string, number>();

  constructor(private readonly max: number) {}

  /** Counts a tenant's request in, until `reply`'s connection is done with it; over the cap, refuses. */
  enter(tenant: string, reply: FastifyReply): void {
    const now = this.inProgress.get(tenant) ?? 0;
    if (now >= this.max) {
      throw new ApiError(
        'tenant-too-many-requests',
        `tenant ${tenant} has ${now} requests in progress on this server, its limit: let one finish`,
        { retryAfterMs: 1000 },
      );
    }
    this.inProgress.set(tenant, now + 1);
    // 'close' comes once, when the answer has been sent or the connection went first.
    reply.raw.once('close', () => {
      const left = (this.inProgress.get(tenant) ?? 1) - 1;
      if (left > 0) this.inProgress.set(tenant, left);
      else this.inProgress.delete(tenant);
    });
  }
}
