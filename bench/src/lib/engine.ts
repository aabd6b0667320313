/**
 * @module bench/lib/engine
 * Sluice as a user runs it: a store, a `Sluice`, the two kinds the scenarios submit, all with
 * default settings. The only addition is a counter on every store call, by method: for
 * PostgreSQL each hot-path call is one statement (one round trip, one commit); for SQLite each
 * write call is one `BEGIN IMMEDIATE … COMMIT` (one WAL fsync under `synchronous=FULL`). The
 * counter is an increment per call and does not change what it measures.
 */
import { join } from 'node:path';
import { postgresStore, Sluice, type SluiceOptions, type Store, sqliteStore } from 'sluice';
import { type Charge, ProviderStub } from 'sluice/testing';
import { z } from 'zod';

export type StoreName = 'sqlite' | 'pg';

export interface StoreTarget {
  store: StoreName;
  /** PostgreSQL: the bench database and the schema of this case run. */
  databaseUrl?: string;
  schema?: string;
  /** SQLite: the folder of this case run's database file. */
  dir?: string;
  /** What-if only: the PostgreSQL pool size (default: the store's). */
  poolSize?: number;
}

export class CallCounts {
  readonly byMethod = new Map<string, number>();
  /** Milliseconds from call to settlement, summed by method (the latency the caller waits). */
  readonly msByMethod = new Map<string, number>();

  add(method: string): void {
    this.byMethod.set(method, (this.byMethod.get(method) ?? 0) + 1);
  }

  addTime(method: string, ms: number): void {
    this.msByMethod.set(method, (this.msByMethod.get(method) ?? 0) + ms);
  }

  total(methods?: string[]): number {
    let n = 0;
    for (const [m, c] of this.byMethod) if (!methods || methods.includes(m)) n += c;
    return n;
  }

  /** A copy of the counts so far, for `since`. */
  snapshot(): CallCounts {
    const copy = new CallCounts();
    for (const [m, c] of this.byMethod) copy.byMethod.set(m, c);
    for (const [m, ms] of this.msByMethod) copy.msByMethod.set(m, ms);
    return copy;
  }

  /** The calls made since `before` (a snapshot of these counts). */
  since(before: CallCounts): CallCounts {
    const out = new CallCounts();
    for (const [m, c] of this.byMethod) {
      const d = c - (before.byMethod.get(m) ?? 0);
      if (d > 0) out.byMethod.set(m, d);
    }
    for (const [m, ms] of this.msByMethod) {
      if (out.byMethod.has(m)) out.msByMethod.set(m, ms - (before.msByMethod.get(m) ?? 0));
    }
    return out;
  }

  toObject(): Record<string, number> {
    return Object.fromEntries([...this.byMethod].sort(([a], [b]) => a.localeCompare(b)));
  }
}

/** The store methods that write (each one transaction). The rest only read. */
export const WRITE_METHODS = [
  'operationSubmitMany',
  'operationClaimMany',
  'leaseExtendMany',
  'attemptFinishMany',
  'attemptFinishAndClaim',
  'effectBegin',
  'effectBeginMany',
  'effectRecordSend',
  'effectMarkCommitted',
  'effectMarkAbsent',
  'effectMarkFailed',
  'effectMarkMany',
  'retryBudgetTake',
  'operationCancel',
  'operationRedrive',
  'operationReconcile',
  'leaseRescue',
  'retentionPurge',
  'migrate',
];

/** The store calls that claim: alone, or after the ends of the attempts whose slots they fill. */
export const CLAIMING_METHODS = ['operationClaimMany', 'attemptFinishAndClaim'];

export function counted<S extends Store>(store: S, counts: CallCounts): S {
  const wrapped = new Map<PropertyKey, unknown>();
  return new Proxy(store, {
    get(target, prop, receiver) {
      const value = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function' || typeof prop !== 'string') return value;
      let w = wrapped.get(prop);
      if (!w) {
        const fn = value as (...args: unknown[]) => unknown;
        w = (...args: unknown[]) => {
          counts.add(prop);
          const t0 = performance.now();
          const out = fn.apply(target, args);
          if (out instanceof Promise) {
            void out.then(
              () => counts.addTime(prop, performance.now() - t0),
              () => counts.addTime(prop, performance.now() - t0),
            );
          }
          return out;
        };
        wrapped.set(prop, w);
      }
      return w;
    },
  });
}

/**
 * Whether a PostgreSQL store the bench opens raises a database's `synchronous_commit = off` to
 * `local` (the store's default): `SLUICE_DURABLE_COMMITS=false` keeps `off`, for the runs without
 * the commit's flush (docs/benchmarks.md). Builds before that option ignore it.
 */
export const durableCommits = (): boolean => process.env.SLUICE_DURABLE_COMMITS !== 'false';

export function openStore(target: StoreTarget): { store: Store; counts: CallCounts } {
  const counts = new CallCounts();
  let store: Store;
  if (target.store === 'pg') {
    if (!target.databaseUrl || !target.schema) throw new Error('pg target needs databaseUrl and schema');
    store = postgresStore({
      connectionString: target.databaseUrl,
      schema: target.schema,
      durableCommits: durableCommits(),
      ...(target.poolSize === undefined ? {} : { poolSize: target.poolSize }),
    });
  } else {
    if (!target.dir) throw new Error('sqlite target needs dir');
    store = sqliteStore({ path: join(target.dir, 'sluice.db') });
  }
  return { store: counted(store, counts), counts };
}

export const chargeInput = z.object({
  invoice: z.number().int().nonnegative(),
  amount_cents: z.number().int().positive(),
});

/** `bench.effect`: one journaled effect at the in-process provider stub (issue 3's operation). */
export const EFFECT_KIND = 'bench.effect';
/** `bench.plain`: no effect; returns at once. */
export const PLAIN_KIND = 'bench.plain';

/**
 * The in-process provider of the effect scenario: `ProviderStub`s from `sluice/testing`, one per
 * 100 operations. A stub finds each charge it returns by a linear scan of its ledger, so a single
 * stub serving 10,000 charges would cost the bench O(n²) — measured at ≈ 1 s of CPU per 10,000,
 * ≈ 100 µs per operation, charged to Sluice in the profile. Operations are routed by invoice
 * number, so a retry reaches the stub that holds its key. The time spent awaiting them is kept.
 */
export class ProviderShards {
  readonly stubs: ProviderStub[];
  /** Milliseconds from calling a stub's `charge` to its answer (wall time, event-loop waits included). */
  ms = 0;

  constructor(expected: number) {
    const count = Math.max(1, Math.ceil(expected / 100));
    this.stubs = Array.from(
      { length: count },
      (_, s) => new ProviderStub({ chargeId: (n) => `ch_${s}_${n}` }),
    );
  }

  async charge(invoice: number, args: Parameters<ProviderStub['charge']>[0]): Promise<Charge> {
    const t0 = performance.now();
    try {
      return await this.stubs[invoice % this.stubs.length]!.charge(args);
    } finally {
      this.ms += performance.now() - t0;
    }
  }

  get calls(): number {
    return this.stubs.reduce((n, s) => n + s.calls, 0);
  }

  get charges(): number {
    return this.stubs.reduce((n, s) => n + s.ledger().length, 0);
  }

  get doubleCharges(): number {
    return this.stubs.reduce((n, s) => n + s.doubleCharges().length, 0);
  }
}

export function openSluice(
  target: StoreTarget,
  provider?: ProviderShards,
  options: Omit<SluiceOptions, 'store'> = {},
): { sluice: Sluice; counts: CallCounts } {
  const { store, counts } = openStore(target);
  const sluice = new Sluice({ ...options, store });
  sluice.define(EFFECT_KIND, {
    input: chargeInput,
    async run(input, ctx) {
      if (!provider) throw new Error('no provider stub in this engine');
      const charge = await ctx.effect<Charge>('charge', {
        call: ({ key, signal }) =>
          provider.charge(input.invoice, { key, params: { tenant: ctx.tenant, ...input }, signal }),
        reference: (c) => c.id,
      });
      return { charge: charge.id };
    },
  });
  sluice.define(PLAIN_KIND, {
    input: chargeInput,
    run: () => undefined,
  });
  return { sluice, counts };
}
