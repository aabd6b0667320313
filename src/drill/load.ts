/**
 * @module drill/load
 * The drill's clients, as load generators over HTTP, and what they saw. Each generator is a
 * `Ticker` firing at a rate the current phase sets (timers pace the load: that is a load
 * generator's job); each firing is one client's whole story, tracked until it ends:
 *
 * - **North** submits an interactive `charge` and polls it until it is terminal, recording
 *   submit → succeeded latency (the whole run);
 * - **flood**: Bulk submits `export`s, ignoring its 429s, so its queue stays full (one in
 *   `oversizedEvery` is larger than the kind's temp-storage limit);
 * - **duplicates**: an accepted operation is delivered again (same id, same body): it must be
 *   answered from its record (200, `Idempotent-Replayed`), never run again, never refused;
 * - **bursts**: several identical submissions of a new id at once: at most one creates it;
 * - **spend**: Bulk's large charges, which run into its provider spend budget;
 * - **walk-aways**: a client sends a submit, disconnects before the answer, then cancels;
 * - **running cancels**: a client cancels an export that is running (its subprocess must stop).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { DrillClient, SubmitBody } from './client.js';
import { LOAD } from './config.js';
import { DRILL_TENANTS } from './serve-config.js';
import type { PhaseName } from './types.js';

export type Purpose = 'north' | 'flood' | 'burst' | 'spend' | 'walkaway';

/** An operation the API acknowledged (or that a walk-away client found accepted). */
export interface Submitted {
  tenant: string;
  id: string;
  body: SubmitBody;
  purpose: Purpose;
  phase: PhaseName;
  /** Ms since the drill started. */
  at: number;
}

export interface NorthRecord {
  id: string;
  phase: PhaseName;
  /** Ms since the drill started. */
  submittedAt: number;
  /** The refusal's code, when the submit was refused. */
  rejected?: string;
  /** The state it was last seen in. */
  state?: string;
  /** Submit → succeeded, as the polling client saw it. */
  latencyMs?: number;
}

export interface WalkawayRecord {
  id: string;
  phase: PhaseName;
  /** What the cancel answered: `cancelled`, `requested`, `too_late`, or `http-404` (never accepted). */
  cancel: string;
}

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'dead', 'needs_reconciliation']);
const between = (lo: number, hi: number) => lo + Math.floor(Math.random() * (hi - lo + 1));
const key = (tenant: string, id: string) => `${tenant}/${id}`;

/** Fires `fire` at `perSec` (±30% per interval) until the rate is 0. */
class Ticker {
  private timer: NodeJS.Timeout | undefined;
  private perSec = 0;

  constructor(private readonly fire: () => void) {}

  setRate(perSec: number): void {
    this.perSec = perSec;
    if (perSec <= 0 && this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    } else if (perSec > 0 && !this.timer) this.schedule(true);
  }

  private schedule(first = false): void {
    const mean = 1000 / this.perSec;
    const delay = first ? Math.random() * mean : mean * (0.7 + Math.random() * 0.6);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (this.perSec <= 0) return;
      this.fire();
      this.schedule();
    }, delay);
  }
}

export class Workload {
  /** Acknowledged operations by `tenant/id`. */
  readonly accepted = new Map<string, Submitted>();
  readonly north: NorthRecord[] = [];
  readonly walkaways: WalkawayRecord[] = [];
  /** Cancels of running exports: id → the cancel's answer. */
  readonly runningCancels = new Map<string, string>();
  readonly duplicates = { sent: 0, answered: 0, problems: [] as string[] };
  readonly bursts = { sent: 0, created: 0, problems: [] as string[] };
  private readonly acceptedKeys: string[] = [];
  private readonly latencies: number[] = [];
  private readonly inflight = new Set<Promise<void>>();
  private readonly tickers: Record<string, Ticker>;
  private seq = 0;
  private invoice = 0;
  private polling = true;
  private phase: PhaseName = 'baseline';

  constructor(
    private readonly client: DrillClient,
    /** Ms since the drill started. */
    private readonly now: () => number,
  ) {
    const track = (work: () => Promise<void>) => () => {
      const p = work().catch(() => {});
      this.inflight.add(p);
      void p.finally(() => this.inflight.delete(p));
    };
    this.tickers = {
      north: new Ticker(track(() => this.northOne())),
      flood: new Ticker(track(() => this.floodOne())),
      duplicates: new Ticker(track(() => this.duplicateOne())),
      bursts: new Ticker(track(() => this.burstOne())),
      spend: new Ticker(track(() => this.spendOne())),
      walkaways: new Ticker(track(() => this.walkawayOne())),
      runningCancels: new Ticker(track(() => this.cancelRunningOne())),
    };
  }

  /** Sets every generator's rate for `phase`. */
  setPhase(phase: PhaseName): void {
    this.phase = phase;
    const pressure = phase === 'pressure';
    const t = this.tickers;
    t.north!.setRate(LOAD.northPerSec);
    t.flood!.setRate(LOAD.floodPerSec[phase] ?? 0);
    t.duplicates!.setRate(pressure ? LOAD.duplicatesPerSec : 0);
    t.bursts!.setRate(pressure ? LOAD.burstsPerSec : 0);
    t.spend!.setRate(LOAD.spendPerSec[phase] ?? 0);
    t.walkaways!.setRate(pressure ? LOAD.walkawaysPerSec : 0);
    t.runningCancels!.setRate(pressure ? LOAD.runningCancelsPerSec : 0);
  }

  /** Stops every generator; clients already started finish their story. */
  stop(): void {
    for (const t of Object.values(this.tickers)) t.setRate(0);
  }

  /**
   * Waits for every client story to end, up to `guardMs`; then North's pollers give up (an
   * operation still not terminal is reported by the invariants, not waited for forever).
   */
  async finish(guardMs: number): Promise<void> {
    this.stop();
    const guard = sleep(guardMs).then(() => 'guard' as const);
    while (this.inflight.size > 0) {
      if ((await Promise.race([Promise.all([...this.inflight]), guard])) === 'guard') break;
    }
    this.polling = false;
    await Promise.all([...this.inflight]);
  }

  /** North's latencies finished since the last call. */
  drainLatencies(): number[] {
    return this.latencies.splice(0);
  }

  /** Submissions acknowledged so far. */
  get acceptedCount(): number {
    return this.accepted.size;
  }

  private record(tenant: string, id: string, body: SubmitBody, purpose: Purpose, phase: PhaseName): void {
    const k = key(tenant, id);
    if (this.accepted.has(k)) return;
    this.accepted.set(k, { tenant, id, body, purpose, phase, at: this.now() });
    this.acceptedKeys.push(k);
  }

  private charge(amount: number): SubmitBody {
    return { kind: 'charge', input: { invoice: ++this.invoice, amount_cents: amount } };
  }

  private async northOne(): Promise<void> {
    const id = `n${++this.seq}`;
    const phase = this.phase;
    const body = this.charge(between(LOAD.northAmountCents.min, LOAD.northAmountCents.max));
    const rec: NorthRecord = { id, phase, submittedAt: this.now() };
    this.north.push(rec);
    const start = performance.now();
    const answer = await this.client.submit(DRILL_TENANTS.north, id, body);
    if (!answer.operation) {
      rec.rejected = answer.code;
      return;
    }
    this.record(DRILL_TENANTS.north, id, body, 'north', phase);
    rec.state = answer.operation.state;
    while (this.polling) {
      const op = await this.client.get(DRILL_TENANTS.north, id);
      if (op) rec.state = op.state;
      if (op && TERMINAL.has(op.state)) {
        if (op.state === 'succeeded') {
          rec.latencyMs = performance.now() - start;
          this.latencies.push(rec.latencyMs);
        }
        return;
      }
      await sleep(LOAD.northPollMs);
    }
  }

  private exportBody(): SubmitBody {
    const oversized = this.seq % LOAD.oversizedEvery === 0;
    return {
      kind: 'export',
      input: {
        bytes: oversized ? LOAD.oversizedBytes : between(LOAD.exportBytes.min, LOAD.exportBytes.max),
        holdMs: between(LOAD.exportHoldMs.min, LOAD.exportHoldMs.max),
      },
    };
  }

  private async floodOne(): Promise<void> {
    const id = `x${++this.seq}`;
    const phase = this.phase;
    const body = this.exportBody();
    const answer = await this.client.submit(DRILL_TENANTS.bulk, id, body);
    if (answer.operation) this.record(DRILL_TENANTS.bulk, id, body, 'flood', phase);
  }

  private async duplicateOne(): Promise<void> {
    if (this.acceptedKeys.length === 0) return;
    const k = this.acceptedKeys[Math.floor(Math.random() * this.acceptedKeys.length)]!;
    const original = this.accepted.get(k)!;
    this.duplicates.sent++;
    const answer = await this.client.submit(original.tenant, original.id, original.body);
    if (answer.status === 200 && answer.replayed && answer.operation?.id === original.id)
      this.duplicates.answered++;
    else
      this.duplicates.problems.push(
        `${k}: answered ${answer.status}${answer.code ? ` ${answer.code}` : ''}${answer.status === 202 ? ' (created again)' : ''}`,
      );
  }

  private async burstOne(): Promise<void> {
    const id = `b${++this.seq}`;
    const phase = this.phase;
    const body = this.exportBody();
    this.bursts.sent++;
    const answers = await Promise.all(
      Array.from({ length: LOAD.burstSize }, () => this.client.submit(DRILL_TENANTS.bulk, id, body)),
    );
    const created = answers.filter((a) => a.status === 202).length;
    // The same body gives the same digest whatever was stored: one operation is one acceptance.
    const records = new Set(answers.flatMap((a) => (a.operation ? [a.operation.createdAt] : [])));
    if (created > 1 || records.size > 1)
      this.bursts.problems.push(`bulk/${id}: ${created} created, ${records.size} distinct operations`);
    if (created > 0) this.bursts.created++;
    if (answers.some((a) => a.operation)) this.record(DRILL_TENANTS.bulk, id, body, 'burst', phase);
  }

  private async spendOne(): Promise<void> {
    const id = `s${++this.seq}`;
    const phase = this.phase;
    const body = this.charge(LOAD.spendAmountCents);
    const answer = await this.client.submit(DRILL_TENANTS.bulk, id, body);
    if (answer.operation) this.record(DRILL_TENANTS.bulk, id, body, 'spend', phase);
  }

  private async walkawayOne(): Promise<void> {
    const id = `w${++this.seq}`;
    const phase = this.phase;
    const body = { ...this.charge(between(100, 999)), delayMs: between(0, 400) };
    await this.client.submitAndDisconnect(DRILL_TENANTS.bulk, id, body, between(0, 8));
    // The server may still be accepting the request the client walked away from: a 404 is
    // asked once more, later. An operation accepted after both is found by the final checks.
    let answer = await this.client.cancel(DRILL_TENANTS.bulk, id);
    if (answer.status === 404 || answer.status === 0) {
      await sleep(250);
      answer = await this.client.cancel(DRILL_TENANTS.bulk, id);
    }
    this.walkaways.push({ id, phase, cancel: answer.cancel ?? `http-${answer.status}` });
    if (answer.operation) this.record(DRILL_TENANTS.bulk, id, body, 'walkaway', phase);
  }

  private async cancelRunningOne(): Promise<void> {
    const recent = this.acceptedKeys
      .slice(-20)
      .map((k) => this.accepted.get(k)!)
      .filter((s) => s.body.kind === 'export' && !this.runningCancels.has(s.id));
    for (const s of recent.reverse()) {
      const op = await this.client.get(s.tenant, s.id);
      if (op?.state !== 'running') continue;
      const answer = await this.client.cancel(s.tenant, s.id);
      this.runningCancels.set(s.id, answer.cancel ?? `http-${answer.status}`);
      return;
    }
  }
}
