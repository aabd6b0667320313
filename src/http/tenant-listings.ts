/**
 * @module http/tenant-listings
 * How many listings (`GET /v1/operations`) one tenant, or one admin key across every tenant it
 * names, may have in progress at once on this server. A listing whose filters match few of a
 * tenant's rows (`?kind=` a kind it never used, `?state=queued` among 300,000 finished
 * operations) reads all of them: tens of milliseconds each on SQLite, whose driver is
 * synchronous, so the whole process waits — every other tenant's requests and, in a process with
 * both roles, the worker. Under the per-tenant request cap alone (tenant-requests.ts, 64), one
 * tenant's listings took another tenant's reads from milliseconds to seconds; with two in
 * progress, that tenant adds at most two such reads to anyone's wait.
 *
 * Over the cap a listing is refused at once, before the store is read, with `429
 * too-many-listings` and `Retry-After: 1`; a listing counts from when its handler starts until the
 * store has answered and the page is built. Admin keys are counted each by itself: an operator's script is not to stall the
 * tenants either, and one key naming many tenants is still one caller. Per server process, like
 * the request cap. This bounds one caller's share; making a sparse listing cheap is the store's
 * (an index for each filter, a bound on the rows one page may read).
 */
import type { Principal } from './auth.js';
import { ApiError } from './problem.js';

/** Listings one tenant (or one admin key) may have in progress on one server, by default. */
export const DEFAULT_MAX_LISTINGS_PER_TENANT = 2;

export class TenantListings {
  /** By principal id: `tenant:<tenant>` for every key of a tenant, `admin#<n>` per admin key. */
  private readonly inProgress = new Map<string, number>();

  constructor(private readonly max: number) {}

  /** Runs `list` counted against `caller`'s listings; over the cap, refuses without running it. */
  async run<T>(caller: Principal, list: () => Promise<T>): Promise<T> {
    const holder = caller.id;
    const now = this.inProgress.get(holder) ?? 0;
    if (now >= this.max) {
      const who = caller.kind === 'tenant' ? `tenant ${caller.tenant}` : 'this admin key';
      throw new ApiError(
        'too-many-listings',
        `${who} has ${now} listings in progress on this server, its limit: let one finish`,
        { retryAfterMs: 1000 },
      );
    }
    this.inProgress.set(holder, now + 1);
    try {
      // On SQLite the read is synchronous: run in the turn that admitted it, each listing would
      // end before the next request was even read, none would ever be counted in progress, and a
      // tenant's listings queued on its connections would still run back to back ahead of
      // everyone. Started a turn later (after the I/O phase), the requests already received are
      // counted, or refused, first; then at most `max` of a caller's listings run before the
      // others' requests are read again.
      await new Promise<void>((resolve) => setImmediate(resolve));
      return await list();
    } finally {
      const left = (this.inProgress.get(holder) ?? 1) - 1;
      if (left > 0) this.inProgress.set(holder, left);
      else this.inProgress.delete(holder);
    }
  }
}
