/**
 * @module runtime/class-channel
 * A worker's line to the store for one workload class, carrying the two calls of its hot loop:
 * ending attempts and claiming the next. Ends made while ends are being written wait and go
 * together in the next call (group commit, as in runtime/batcher.ts); when their slots are worth
 * filling again, that call also claims for them, in the same transaction
 * (`Store.attemptFinishAndClaim`): one round trip and one commit instead of two.
 *
 * At most one call carrying ends and one carrying a claim are in flight: two claims of one worker
 * would count the same free slots. A claim asked for while ends without a claim are being written
 * leaves at once on its own rather than waiting for them: at a low rate that wait was most of a
 * new operation's time to start. Otherwise it rides with the next ends. After a call that carried
 * both failed, ends go alone until a claim succeeds: a claim that keeps failing must not keep the
 * ends from being written.
 *
 * A claim takes every free slot. Claiming half of them, so that one half runs here while the
 * other half's ends and claim are in the store, was measured and dropped: with PostgreSQL the
 * store call is then always the one in the way, and it costs nearly as much for 16 operations as
 * for 32, while the replies wait for this process's CPU. With one effect per operation, whose
 * journal calls could overlap another half's, it measured slower too (docs/benchmarks.md).
 *
 * A call refused outright (an error that is not retryable: nothing of it committed) has its ends
 * written again one by one, so that one end the store will not take, or the claim beside them,
 * fails no other (runtime/batcher.ts does the same for the journal's and the submits' batches).
 *
 * A call carrying a claim that failed may have committed all the same, its answer lost with the
 * connection: the operations it took are leased to this worker, which does not know of them, and
 * would wait out their lease (30 s by default) and lose an attempt to its expiry. So the next claim
 * first reads the leases this worker holds in the class and releases those no attempt of it ran
 * (`released`: back to the queue, the attempt given back), then claims; until that succeeds, ends
 * go alone.
 */

import type { Store } from '../store/store.js';
import type { ClaimParams, ClaimResult, FinishParams, LeaseRef } from '../store/types.js';
import { failsTheWholeBatch, nextTurn } from './batcher.js';

/** What a claim made through the channel asked for and got. */
export interface ClaimedBatch {
  limit: number;
  claimed: number;
  contended: boolean;
}

/** How an end was written: accepted (the fenced write took effect), refilled (a claim rode along). */
export interface EndWritten {
  accepted: boolean;
  refilled: boolean;
}

export interface ChannelHooks {
  /** Slots free once `ending` running attempts have ended; 0 when the worker no longer claims. */
  room(ending: number): number;
  /** Whether these ends' slots are worth a claim in the same call. */
  refill(ends: ReadonlyArray<{ capped: boolean }>): boolean;
  claimParams(limit: number): ClaimParams;
  /**
   * Starts what was claimed: called before the ended attempts' callers hear of their ends.
   * `asked`: a `claim()` caller was in the call, and hears what it got.
   */
  /** `sentAt`: performance.now() when the call that claimed was sent, where its leases start. */
  launch(result: ClaimResult, limit: number, asked: boolean, sentAt: number): void;
  /**
   * Whether an attempt of this worker runs, or ran, under `lease`: one whose end the store would
   * not take is left to its lease's expiry, which counts the attempt (its handler ran).
   */
  running(lease: LeaseRef): boolean;
  /** Leases a claim took without its answer, released by the next claim before it claimed. */
  recovered(released: LeaseRef[]): void;
}

interface End {
  item: FinishParams;
  capped: boolean;
  resolve(out: EndWritten): void;
  reject(error: unknown): void;
}

interface Asker {
  resolve(out: ClaimedBatch): void;
  reject(error: unknown): void;
}

export class ClassChannel {
  private ends: End[] = [];
  private askers: Asker[] = [];
  /** A call carrying ends is in flight. */
  private ending = false;
  /** A call carrying a claim is in flight. */
  private claiming = false;
  /**
   * A call that carried ends and a claim failed: ends go alone until a claim succeeds, so that
   * whatever made the claim fail cannot keep the ends from being written.
   */
  private claimSuspect = false;
  /** A call carrying a claim failed: it may have taken operations whose answer never came. */
  private unanswered = false;
  private readonly kick = nextTurn(() => this.pump(0));
  private idleWaiters: Array<() => void> = [];

  constructor(
    private readonly store: Store,
    private readonly hooks: ChannelHooks,
    private readonly maxEnds = 500,
  ) {}

  /** Writes an attempt's end; `capped`: its tenant has a running cap, so its next may now start. */
  finish(item: FinishParams, capped: boolean): Promise<EndWritten> {
    return new Promise((resolve, reject) => {
      this.ends.push({ item, capped, resolve, reject });
      // Every end made in this turn of the event loop joins the call.
      if (!this.ending) this.kick();
    });
  }

  /** Claims for the free slots: at once, or with the call in flight's successor. */
  claim(): Promise<ClaimedBatch> {
    return new Promise((resolve, reject) => {
      this.askers.push({ resolve, reject });
      this.pump(0);
    });
  }

  /** Resolves when nothing is queued or in flight. */
  idle(): Promise<void> {
    if (this.quiet()) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  private quiet(): boolean {
    return !this.ending && !this.claiming && this.ends.length === 0 && this.askers.length === 0;
  }

  /**
   * Starts the calls that may start now. `written`: ends of a call that just returned, whose
   * attempts still hold their slots (their callers have not heard yet); they count as free.
   */
  private pump(written: number): void {
    if (!this.ending && this.ends.length > 0) {
      const ends = this.ends.splice(0, this.maxEnds);
      const wanted =
        !this.claiming &&
        !this.claimSuspect &&
        !this.unanswered &&
        (this.askers.length > 0 || this.hooks.refill(ends));
      const limit = wanted ? Math.max(0, this.hooks.room(ends.length + written)) : 0;
      void this.call(ends, limit > 0 ? this.askers.splice(0) : [], limit);
    }
    if (!this.claiming && this.askers.length > 0) {
      const askers = this.askers.splice(0);
      const limit = this.hooks.room(written);
      if (limit > 0) void this.call([], askers, limit);
      else for (const a of askers) a.resolve({ limit: 0, claimed: 0, contended: false });
    }
    if (this.quiet()) for (const w of this.idleWaiters.splice(0)) w();
  }

  private async call(ends: End[], askers: Asker[], limit: number): Promise<void> {
    const items = ends.map((e) => e.item);
    if (ends.length > 0) this.ending = true;
    if (limit > 0) this.claiming = true;
    let finished: boolean[] = [];
    let claim: ClaimResult | undefined;
    let sentAt = performance.now();
    try {
      if (limit <= 0) finished = await this.store.attemptFinishMany(items);
      else if (ends.length === 0) {
        if (this.unanswered) await this.releaseUnanswered();
        sentAt = performance.now();
        claim = await this.store.operationClaimMany(this.hooks.claimParams(limit));
      } else
        ({ finished, claim } = await this.store.attemptFinishAndClaim(items, this.hooks.claimParams(limit)));
    } catch (error) {
      if (ends.length > 0 && limit > 0) this.claimSuspect = true;
      if (limit > 0) this.unanswered = true;
      for (const a of askers) a.reject(error);
      // Refused outright (not retryable: nothing committed), the call's ends are written again one
      // by one, so that one the store will not take, or the claim beside them, fails no other.
      if (ends.length > 0 && (ends.length > 1 || limit > 0) && !failsTheWholeBatch(error)) {
        for (const e of ends) {
          try {
            const [accepted] = await this.store.attemptFinishMany([e.item]);
            e.resolve({ accepted: accepted === true, refilled: false });
          } catch (alone) {
            e.reject(alone);
          }
        }
        this.settle(ends, limit);
        this.pump(0);
        return;
      }
      this.settle(ends, limit);
      this.pump(0);
      for (const e of ends) e.reject(error);
      return;
    }
    if (claim) {
      this.claimSuspect = false;
      this.hooks.launch(claim, limit, askers.length > 0, sentAt);
    }
    this.settle(ends, limit);
    // What queued meanwhile leaves now, before this call's callers and the attempts just started
    // take the event loop: it is in the store while they run.
    this.pump(ends.length);
    const refilled = limit > 0;
    for (const [i, e] of ends.entries()) e.resolve({ accepted: finished[i] === true, refilled });
    const batch = { limit, claimed: claim?.rows.length ?? 0, contended: claim?.contended === true };
    for (const a of askers) a.resolve(batch);
  }

  /**
   * At the worker's stop, which makes no next claim: releases what a claim whose answer was lost
   * may have taken, as that claim would have.
   */
  async releaseLost(): Promise<void> {
    if (this.unanswered) await this.releaseUnanswered();
  }

  /** Releases the leases a failed claim may have taken unknown to this worker (module header). */
  private async releaseUnanswered(): Promise<void> {
    const { owner, class: cls } = this.hooks.claimParams(0);
    const unknown = (await this.store.leasesHeld({ owner, class: cls })).filter(
      (l) => !this.hooks.running(l),
    );
    if (unknown.length > 0) {
      const accepted = await this.store.attemptFinishMany(
        unknown.map((lease) => ({ lease, outcome: 'released' as const })),
      );
      this.hooks.recovered(unknown.filter((_, i) => accepted[i] === true));
    }
    this.unanswered = false;
  }

  private settle(ends: End[], limit: number): void {
    if (ends.length > 0) this.ending = false;
    if (limit > 0) this.claiming = false;
  }
}
