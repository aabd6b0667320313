/**
 * @module test/conformance/state-machine/commands
 * The commands of the state-machine property. Each calls the store the way an engine component
 * would (submitter, claimer, worker, heartbeat, rescuer, client, operator), asserts the answer
 * the model predicts, updates the model, and then has the invariants checked. The catalogue is
 * one file (past the usual ~400 lines) because the commands are read and weighed together.
 */
import fc from 'fast-check';
import { expect } from 'vitest';
import { afterLeaseExpiry } from '../../../src/core/decisions.js';
import { isAllowedMove } from '../../../src/core/states.js';
import type { CancelOutcome, FinishParams, OperationRow, SubmitOutcome } from '../../../src/store/types.js';
import { verify } from './invariants.js';
import {
  CLASSES,
  classOf,
  codeOf,
  DEADLINE_MS,
  EFFECTS,
  ERROR,
  effectKey,
  endAttempt,
  hasPending,
  IDS,
  keyOf,
  LEASE_MS,
  type LeasePick,
  live,
  MAX_ATTEMPTS,
  MAX_LEASE_EXPIRIES,
  MAX_RUNNING,
  MAX_WAITING,
  type Model,
  opAt,
  params,
  pastNoReturn,
  pickIn,
  pickLease,
  type Real,
  showPick,
  TENANTS,
} from './model.js';

export abstract class Step implements fc.AsyncCommand<Model, Real> {
  abstract check(m: Readonly<Model>): boolean;
  /** Performs the command, asserts its answer, updates the model; returns the ops it may move out of a terminal state. */
  protected abstract act(m: Model, r: Real): Promise<Set<string> | undefined>;
  abstract toString(): string;
  async run(m: Model, r: Real): Promise<void> {
    const exits = (await this.act(m, r)) ?? new Set<string>();
    await verify(m, r, exits);
    for (const op of m.ops.values()) r.coverage.add(`state:${op.state}`);
  }
}

export const fresh = (m: Readonly<Model>) =>
  TENANTS.flatMap((tenant) => IDS.map((id) => [tenant, id] as const)).filter(
    ([t, id]) => !m.ops.has(`${t}/${id}`),
  );

/** Submits the `index`-th (tenant, id) not accepted yet. */
export class SubmitNew extends Step {
  private chosen: { tenant: string; id: string } | undefined;
  constructor(readonly index: number) {
    super();
  }
  check = (m: Readonly<Model>) => fresh(m).length > 0;
  async act(m: Model, r: Real) {
    const pairs = fresh(m);
    const [tenant, id] = pairs[this.index % pairs.length]!;
    this.chosen = { tenant, id };
    const cls = classOf(id);
    const waiting = [...m.ops.values()].filter(
      (o) => o.tenant === tenant && o.cls === cls && o.state === 'queued',
    ).length;
    const full = waiting >= (MAX_WAITING[tenant] ?? Number.POSITIVE_INFINITY);
    const p = params(tenant, id, 0);
    const [out] = await r.store.operationSubmitMany([p]);
    if (full) {
      expect(out).toMatchObject({ status: 'rejected', reason: 'tenant-queue-full' });
      r.coverage.add('submit:rejected');
      return;
    }
    expect(out?.status).toBe('created');
    const now = r.clock.now();
    m.ops.set(keyOf({ tenant, id }), {
      tenant,
      id,
      cls,
      digest: p.digest,
      variant: 0,
      deadlineAt: p.deadlineMs === null ? null : now + p.deadlineMs,
      state: 'queued',
      epoch: 0,
      attempt: 0,
      leaseExpiries: 0,
      runAfter: now,
      leaseOwner: null,
      leaseExpiresAt: null,
      cancel: null,
      effects: new Map(),
    });
    return undefined;
  }
  toString = () => (this.chosen ? `submit(${keyOf(this.chosen)})` : `submit(#${this.index})`);
}

/** The same id again, with the same input (`existing`) or another one (`conflict`). */
export class SubmitAgain extends Step {
  constructor(
    readonly index: number,
    readonly conflicting: boolean,
  ) {
    super();
  }
  check = (m: Readonly<Model>) => m.ops.size > 0;
  async act(m: Model, r: Real) {
    const op = opAt(m, this.index);
    const [out] = await r.store.operationSubmitMany([
      params(op.tenant, op.id, this.conflicting ? op.variant + 1 : op.variant),
    ]);
    expect(out?.status).toBe(this.conflicting ? 'conflict' : 'existing');
    r.coverage.add(`submit:${out?.status}`);
    const row = (out as Extract<SubmitOutcome, { row: OperationRow }>).row;
    expect([row.tenant, row.id, row.digest, row.state]).toEqual([op.tenant, op.id, op.digest, op.state]);
    return undefined;
  }
  toString = () => `${this.conflicting ? 'conflict' : 'duplicate'}(#${this.index})`;
}

export class Claim extends Step {
  constructor(
    readonly cls: string,
    readonly limit: number,
    readonly owner: string,
  ) {
    super();
  }
  check = () => true;
  async act(m: Model, r: Real) {
    const now = r.clock.now();
    const room = new Map<string, number>();
    for (const tenant of TENANTS) {
      const mine = [...m.ops.values()].filter((o) => o.tenant === tenant && o.cls === this.cls);
      const ready = mine.filter((o) => o.state === 'queued' && o.runAfter <= now).length;
      const running = mine.filter((o) => o.state === 'running').length;
      room.set(
        tenant,
        Math.min(ready, Math.max(0, (MAX_RUNNING[tenant] ?? Number.POSITIVE_INFINITY) - running)),
      );
    }
    const eligible = [...room.values()].reduce((a, b) => a + b, 0);
    const result = await r.store.operationClaimMany({
      class: this.cls,
      owner: this.owner,
      limit: this.limit,
      leaseMs: LEASE_MS,
    });
    expect(result.now).toBe(now);
    // Work-conserving: as many as the limit allows of what is ready and under the caps.
    expect(result.rows.length).toBe(Math.min(this.limit, eligible));
    for (const tenant of TENANTS) {
      expect(result.rows.filter((row) => row.tenant === tenant).length).toBeLessThanOrEqual(
        room.get(tenant)!,
      );
    }
    for (const row of result.rows) {
      const op = m.ops.get(keyOf(row))!;
      expect(op, `claimed unknown ${keyOf(row)}`).toBeDefined();
      expect([op.state, op.cls, op.runAfter <= now]).toEqual(['queued', this.cls, true]);
      // A claim advances the epoch by 1 plus a random step below 2^31 (never reissued).
      expect(row.epoch - op.epoch, `${keyOf(row)}: epoch ${op.epoch} → ${row.epoch}`).toBeGreaterThanOrEqual(
        1,
      );
      expect(row.epoch - op.epoch).toBeLessThanOrEqual(2 ** 31);
      expect(row).toMatchObject({
        state: 'running',
        attempt: op.attempt + 1,
        leaseOwner: this.owner,
        leaseExpiresAt: now + LEASE_MS,
      });
      expect(m.leases.some((l) => keyOf(l.ref) === keyOf(row) && l.ref.epoch === row.epoch)).toBe(false);
      Object.assign(op, {
        state: 'running',
        epoch: row.epoch,
        attempt: row.attempt,
        leaseOwner: this.owner,
        leaseExpiresAt: now + LEASE_MS,
      });
      m.leases.push({ ref: { tenant: row.tenant, id: row.id, epoch: row.epoch }, crashed: false });
    }
    return undefined;
  }
  toString = () => `claim(${this.cls}, ${this.limit}, ${this.owner})`;
}

/** The claimer dies holding its lease: nothing is written; the lease runs out on its own. */
export class Crash extends Step {
  constructor(readonly index: number) {
    super();
  }
  private held = (m: Readonly<Model>) => m.leases.filter((l) => live(m, l) && !l.crashed);
  check = (m: Readonly<Model>) => this.held(m).length > 0;
  async act(m: Model) {
    const held = this.held(m);
    held[this.index % held.length]!.crashed = true;
    return undefined;
  }
  toString = () => `crash(live lease #${this.index})`;
}

export class Tick extends Step {
  constructor(readonly ms: number) {
    super();
  }
  check = () => true;
  async act(_m: Model, r: Real) {
    r.clock.advance(this.ms);
    return undefined;
  }
  toString = () => `tick(${this.ms})`;
}

/** Heartbeat of every claimer still alive, including those whose lease is already gone. */
export class Heartbeat extends Step {
  check = (m: Readonly<Model>) => m.leases.some((l) => !l.crashed);
  async act(m: Model, r: Real) {
    const leases = m.leases.filter((l) => !l.crashed);
    const statuses = await r.store.leaseExtendMany({ leases: leases.map((l) => l.ref), leaseMs: LEASE_MS });
    expect(statuses).toHaveLength(leases.length);
    leases.forEach((l, i) => {
      const op = m.ops.get(keyOf(l.ref))!;
      const ok = live(m, l);
      expect(statuses[i]!.ok, `heartbeat of ${keyOf(l.ref)}@${l.ref.epoch}`).toBe(ok);
      if (!ok) return;
      expect(statuses[i]!.cancelRequested).toBe(op.cancel === 'requested');
      op.leaseExpiresAt = r.clock.now() + LEASE_MS;
    });
    return undefined;
  }
  toString = () => 'heartbeat()';
}

/** The rescuer runs, after the clock passed every lease (`expire`) or not (`rescue`). */
export class Rescue extends Step {
  constructor(readonly expire: boolean) {
    super();
  }
  check = () => true;
  async act(m: Model, r: Real) {
    if (this.expire) r.clock.advance(LEASE_MS + 1);
    const now = r.clock.now();
    const expected = [...m.ops.values()]
      .filter((o) => o.state === 'running' && o.leaseExpiresAt! < now)
      .map((o) => {
        const cancelRequested = o.cancel === 'requested';
        const decision = afterLeaseExpiry(
          {
            attempt: o.attempt,
            maxAttempts: MAX_ATTEMPTS,
            leaseExpiries: o.leaseExpiries + 1,
            deadlineAt: o.deadlineAt,
            cancelRequested,
            pastNoReturn: pastNoReturn(o),
            hasPendingEffect: hasPending(o),
            now,
          },
          MAX_LEASE_EXPIRIES,
        );
        return { op: o, to: decision.to };
      });
    const rescued = await r.store.leaseRescue({ maxLeaseExpiries: MAX_LEASE_EXPIRIES, limit: 100 });
    const sort = (xs: Array<{ tenant: string; id: string; to: string }>) =>
      xs.map((x) => `${keyOf(x)}→${x.to}`).sort();
    expect(sort(rescued)).toEqual(sort(expected.map(({ op, to }) => ({ tenant: op.tenant, id: op.id, to }))));
    for (const { op, to } of expected) {
      expect(isAllowedMove('running', to)).toBe(true);
      op.leaseExpiries++;
      endAttempt(r, op, to);
      r.coverage.add(`rescue:${to}`);
    }
    return undefined;
  }
  toString = () => (this.expire ? 'expire-leases()' : 'rescue()');
}

export class Cancel extends Step {
  constructor(
    readonly index: number,
    readonly target: boolean,
  ) {
    super();
  }
  check = (m: Readonly<Model>) => m.ops.size > 0;
  async act(m: Model, r: Real) {
    const op = pickIn(m, this.index, ['queued', 'running'], this.target);
    const noReturn = pastNoReturn(op);
    let outcome: CancelOutcome;
    if (op.state === 'cancelled') outcome = 'cancelled';
    else if (op.state === 'queued' && !noReturn) outcome = 'cancelled';
    else if (op.state === 'running' && !noReturn) outcome = 'requested';
    else outcome = 'too_late';
    const out = await r.store.operationCancel({ tenant: op.tenant, id: op.id });
    expect(out?.outcome, `cancel of ${keyOf(op)} (${op.state})`).toBe(outcome);
    r.coverage.add(`cancel:${op.state}:${outcome}`);
    if (op.state === 'queued' && outcome === 'cancelled') op.state = 'cancelled';
    else if (outcome === 'requested') op.cancel = 'requested';
    else if (outcome === 'too_late' && (op.state === 'queued' || op.state === 'running'))
      op.cancel = 'too_late';
    expect(out?.row.state).toBe(op.state);
    return undefined;
  }
  toString = () => `cancel(#${this.index}${this.target ? ', a live one' : ''})`;
}

export type FinishKind = 'succeeded' | 'retry' | 'failed' | 'released' | 'dead' | 'needs_reconciliation';

export class Finish extends Step {
  constructor(
    readonly pick: LeasePick,
    readonly outcome: FinishKind,
    readonly delayMs: number,
  ) {
    super();
  }
  check = (m: Readonly<Model>) => pickLease(m, this.pick) !== undefined;
  async act(m: Model, r: Real) {
    const lease = pickLease(m, this.pick)!;
    const isLive = live(m, lease);
    const item: FinishParams =
      this.outcome === 'succeeded'
        ? { lease: lease.ref, outcome: 'succeeded', result: { ok: true } }
        : this.outcome === 'retry'
          ? { lease: lease.ref, outcome: 'retry', error: ERROR, delayMs: this.delayMs }
          : this.outcome === 'failed' || this.outcome === 'dead' || this.outcome === 'needs_reconciliation'
            ? { lease: lease.ref, outcome: this.outcome, error: ERROR }
            : { lease: lease.ref, outcome: 'released' };
    expect(await r.store.attemptFinishMany([item])).toEqual([isLive]);
    r.coverage.add(isLive ? `finish:${this.outcome}` : 'finish:stale-refused');
    if (!isLive) return undefined;
    const op = m.ops.get(keyOf(lease.ref))!;
    const cancelAsked = op.cancel === 'requested' && !pastNoReturn(op);
    switch (this.outcome) {
      case 'succeeded':
        endAttempt(r, op, 'succeeded');
        break;
      case 'failed':
        endAttempt(r, op, hasPending(op) ? 'needs_reconciliation' : 'failed');
        break;
      case 'dead':
      case 'needs_reconciliation':
        endAttempt(r, op, this.outcome);
        break;
      case 'retry':
        endAttempt(r, op, cancelAsked ? 'cancelled' : 'queued', r.clock.now() + this.delayMs);
        break;
      case 'released':
        op.attempt--;
        endAttempt(r, op, cancelAsked ? 'cancelled' : 'queued');
        break;
    }
    return undefined;
  }
  toString = () =>
    `finish(${showPick(this.pick)}, ${this.outcome}${this.outcome === 'retry' ? ` +${this.delayMs}` : ''})`;
}

export class EffectBegin extends Step {
  constructor(
    readonly pick: LeasePick,
    readonly name: string,
  ) {
    super();
  }
  check = (m: Readonly<Model>) => pickLease(m, this.pick) !== undefined;
  async act(m: Model, r: Real) {
    const lease = pickLease(m, this.pick)!;
    const op = m.ops.get(keyOf(lease.ref))!;
    const call = r.store.effectBegin({ lease: lease.ref, name: this.name, key: effectKey(op, this.name) });
    if (!live(m, lease)) {
      expect(await codeOf(call)).toBe('lease-lost');
      r.coverage.add('effect-begin:lease-lost');
    } else if (op.cancel === 'requested') {
      expect(await codeOf(call)).toBe('cancel-requested');
      r.coverage.add('effect-begin:cancel-requested');
    } else {
      const begun = await call;
      const created = !op.effects.has(this.name);
      expect(begun.created).toBe(created);
      r.coverage.add(`effect-begin:${created ? 'created' : 'existing'}`);
      if (created) op.effects.set(this.name, 'pending');
      expect([begun.row.state, begun.row.key]).toEqual([op.effects.get(this.name), effectKey(op, this.name)]);
    }
    return undefined;
  }
  toString = () => `effect-begin(${showPick(this.pick)}, ${this.name})`;
}

export class EffectCommit extends Step {
  constructor(
    readonly pick: LeasePick,
    readonly name: string,
  ) {
    super();
  }
  check = (m: Readonly<Model>) => pickLease(m, this.pick) !== undefined;
  async act(m: Model, r: Real) {
    const lease = pickLease(m, this.pick)!;
    const op = m.ops.get(keyOf(lease.ref))!;
    const state = op.effects.get(this.name);
    const ok = live(m, lease) && (state === 'pending' || state === 'absent');
    const done = await r.store.effectMarkCommitted({
      lease: lease.ref,
      name: this.name,
      result: 1,
      reference: 'ref',
    });
    expect(done).toBe(ok);
    r.coverage.add(`effect-commit:${ok}`);
    if (ok) op.effects.set(this.name, 'committed');
    return undefined;
  }
  toString = () => `effect-commit(${showPick(this.pick)}, ${this.name})`;
}

/** A definite refusal or a confirmed lookup: the pending effect certainly did not happen. */
export class EffectMarkAbsent extends Step {
  constructor(
    readonly pick: LeasePick,
    readonly name: string,
  ) {
    super();
  }
  check = (m: Readonly<Model>) => pickLease(m, this.pick) !== undefined;
  async act(m: Model, r: Real) {
    const lease = pickLease(m, this.pick)!;
    const op = m.ops.get(keyOf(lease.ref))!;
    const name = [...op.effects].find(([, s]) => s === 'pending')?.[0] ?? this.name;
    const ok = live(m, lease) && op.effects.get(name) === 'pending';
    expect(await r.store.effectMarkAbsent({ lease: lease.ref, name })).toBe(ok);
    r.coverage.add(`effect-absent:${ok}`);
    if (ok) op.effects.set(name, 'absent');
    return undefined;
  }
  toString = () => `effect-absent(${showPick(this.pick)}, ${this.name})`;
}

/** One more request under an existing key (a retry inside retention, or a send after `absent`). */
export class EffectRecordSend extends Step {
  constructor(
    readonly pick: LeasePick,
    readonly name: string,
  ) {
    super();
  }
  check = (m: Readonly<Model>) => pickLease(m, this.pick) !== undefined;
  async act(m: Model, r: Real) {
    const lease = pickLease(m, this.pick)!;
    const op = m.ops.get(keyOf(lease.ref))!;
    const name = [...op.effects].find(([, s]) => s === 'absent')?.[0] ?? this.name;
    const state = op.effects.get(name);
    const call = r.store.effectRecordSend({ lease: lease.ref, name });
    if (!live(m, lease)) {
      expect(await codeOf(call)).toBe('lease-lost');
    } else if (state === 'pending' || state === 'absent') {
      expect((await call).row.state).toBe('pending');
      op.effects.set(name, 'pending');
      r.coverage.add(`effect-send:${state}`);
    } else {
      // No row to send under, or the effect is settled: refused, whatever the code.
      expect(await codeOf(call)).toBeDefined();
    }
    return undefined;
  }
  toString = () => `effect-send(${showPick(this.pick)}, ${this.name})`;
}

/** A redrive or requeue gives the operation the time it had at acceptance again, from `now`. */
const freshDeadline = (op: { deadlineAt: number | null }, now: number) =>
  op.deadlineAt === null ? null : now + DEADLINE_MS;

export class Redrive extends Step {
  constructor(
    readonly index: number,
    readonly target: boolean,
  ) {
    super();
  }
  check = (m: Readonly<Model>) => m.ops.size > 0;
  async act(m: Model, r: Real) {
    const op = pickIn(m, this.index, ['dead'], this.target);
    const call = r.store.operationRedrive({ tenant: op.tenant, id: op.id, by: 'prop', reason: 'random' });
    if (op.state !== 'dead') {
      expect(await codeOf(call)).toBe('operation-state-invalid');
      r.coverage.add('redrive:refused');
      return undefined;
    }
    await call;
    r.coverage.add('redrive:done');
    Object.assign(op, {
      state: 'queued',
      attempt: 0,
      leaseExpiries: 0,
      runAfter: r.clock.now(),
      cancel: null,
      deadlineAt: freshDeadline(op, r.clock.now()),
    });
    return new Set([keyOf(op)]);
  }
  toString = () => `redrive(#${this.index}${this.target ? ', a dead one' : ''})`;
}

export class Reconcile extends Step {
  constructor(
    readonly index: number,
    readonly target: boolean,
    readonly resolution: 'requeue' | 'succeeded' | 'failed',
    readonly effects: 'committed' | 'absent',
  ) {
    super();
  }
  check = (m: Readonly<Model>) => m.ops.size > 0;
  async act(m: Model, r: Real) {
    const op = pickIn(m, this.index, ['needs_reconciliation'], this.target);
    const pending = [...op.effects].filter(([, s]) => s === 'pending').map(([name]) => name);
    const call = r.store.operationReconcile({
      tenant: op.tenant,
      id: op.id,
      by: 'prop',
      reason: 'random',
      effects: pending.map((name) => ({ name, outcome: this.effects })),
      resolution: this.resolution,
      result: { reconciled: true },
      error: ERROR,
    });
    if (op.state !== 'needs_reconciliation') {
      expect(await codeOf(call)).toBe('operation-state-invalid');
      r.coverage.add('reconcile:refused');
      return undefined;
    }
    await call;
    r.coverage.add(`reconcile:${this.resolution}`);
    for (const name of pending) op.effects.set(name, this.effects);
    if (this.resolution === 'requeue') {
      Object.assign(op, {
        state: 'queued',
        attempt: 0,
        leaseExpiries: 0,
        runAfter: r.clock.now(),
        deadlineAt: freshDeadline(op, r.clock.now()),
      });
    } else op.state = this.resolution;
    return new Set([keyOf(op)]);
  }
  toString = () =>
    `reconcile(#${this.index}${this.target ? ' needing it' : ''}, ${this.resolution}, effects ${this.effects})`;
}

/** Every claimer whose lease is stale wakes up at once and tries each kind of write. */
export class StaleWrites extends Step {
  check = (m: Readonly<Model>) => m.leases.some((l) => !live(m, l));
  async act(m: Model, r: Real) {
    r.coverage.add('stale-writes');
    for (const l of m.leases.filter((x) => !live(m, x))) {
      const ref = l.ref;
      expect(
        await r.store.attemptFinishMany([{ lease: ref, outcome: 'succeeded', result: 'zombie' }]),
      ).toEqual([false]);
      expect(await codeOf(r.store.effectBegin({ lease: ref, name: 'zombie', key: 'zombie' }))).toBe(
        'lease-lost',
      );
      expect(
        await r.store.effectMarkCommitted({ lease: ref, name: 'charge', result: 0, reference: null }),
      ).toBe(false);
      expect((await r.store.leaseExtendMany({ leases: [ref], leaseMs: LEASE_MS }))[0]?.ok).toBe(false);
    }
    return undefined;
  }
  toString = () => 'stale-writes()';
}

export const index = fc.nat({ max: 15 });
/** Mostly a live lease; one time in four a stale one. */
export const leasePick: fc.Arbitrary<LeasePick> = fc.record({
  index: fc.nat({ max: 7 }),
  stale: fc.constantFrom(false, false, false, true),
});
export const finishKind = fc.constantFrom<FinishKind>(
  'succeeded',
  'retry',
  'failed',
  'released',
  'dead',
  'needs_reconciliation',
);
/** Mostly aim operator actions at an operation they apply to; sometimes at any, to check the refusal. */
export const target = fc.constantFrom(true, true, true, false);
export const resolution = fc.constantFrom<'requeue' | 'succeeded' | 'failed'>(
  'requeue',
  'succeeded',
  'failed',
);
/** Each command with its weight: progress-making commands (submit, claim, finish, effects) come more often. */
export const WEIGHTED: Array<[fc.Arbitrary<Step>, number]> = [
  [index.map((i) => new SubmitNew(i)), 3],
  [fc.tuple(index, fc.boolean()).map(([i, conflicting]) => new SubmitAgain(i, conflicting)), 1],
  [
    fc
      .tuple(fc.constantFrom(...CLASSES), fc.integer({ min: 1, max: 3 }), fc.constantFrom('w1', 'w2'))
      .map(([cls, limit, owner]) => new Claim(cls, limit, owner)),
    3,
  ],
  [index.map((i) => new Crash(i)), 1],
  [fc.constantFrom(1_000, 5_000, LEASE_MS / 2).map((ms) => new Tick(ms)), 1],
  [fc.constant(null).map(() => new Heartbeat()), 1],
  [fc.boolean().map((expire) => new Rescue(expire)), 2],
  [fc.tuple(index, target).map(([i, t]) => new Cancel(i, t)), 1],
  [
    fc
      .tuple(leasePick, finishKind, fc.constantFrom(0, 2_000, 10_000))
      .map(([i, outcome, delay]) => new Finish(i, outcome, delay)),
    3,
  ],
  [fc.tuple(leasePick, fc.constantFrom(...EFFECTS)).map(([p, name]) => new EffectBegin(p, name)), 2],
  [fc.tuple(leasePick, fc.constantFrom(...EFFECTS)).map(([p, name]) => new EffectCommit(p, name)), 2],
  [fc.tuple(leasePick, fc.constantFrom(...EFFECTS)).map(([p, name]) => new EffectMarkAbsent(p, name)), 2],
  [fc.tuple(leasePick, fc.constantFrom(...EFFECTS)).map(([p, name]) => new EffectRecordSend(p, name)), 2],
  [fc.tuple(index, target).map(([i, t]) => new Redrive(i, t)), 1],
  [
    fc
      .tuple(index, target, resolution, fc.constantFrom<'committed' | 'absent'>('committed', 'absent'))
      .map(([i, target, res, effects]) => new Reconcile(i, target, res, effects)),
    2,
  ],
  [fc.constant(null).map(() => new StaleWrites()), 1],
];
export const COMMANDS: fc.Arbitrary<fc.AsyncCommand<Model, Real>>[] = WEIGHTED.flatMap(([arb, weight]) =>
  Array.from({ length: weight }, () => arb),
);
