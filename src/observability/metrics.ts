/**
 * @module observability/metrics
 * Prometheus metrics (prom-client), one registry per `createMetrics()`, every name prefixed
 * `sluice_`. Two sources:
 *
 * - **Events** (`sluice.events`): counters and histograms updated as things happen in this
 *   process — submits, admission refusals, attempts and their durations, retries, retry-budget
 *   denials, effect requests, lease rescues, end-to-end latency, and the age of each operation
 *   at its first attempt (AgeOfFirstAttempt: the backlog signal retries cannot mask).
 * - **Collect on scrape**: gauges read when `/metrics` is scraped — the store's queue counters
 *   (shared by every process, so any process reports the whole service), spend in the current
 *   budget windows, the retry budget's window, and this process's workers (running attempts,
 *   temp bytes) and database connections. One scrape reads the store once: the gauges share one
 *   snapshot.
 *
 * Label cardinality is bounded on purpose. `tenant` appears only on the queue gauges and the
 * spend gauge, where per-tenant numbers are the point, and those, like `class_waiting`, have a
 * series only while there is something to report: a (class, tenant) while it holds work, a
 * (provider, tenant) with spend in the current window, a class while work waits in it or a kind
 * of this engine is in it. The store keeps a row for every class and pair it ever saw; keys that
 * come and go leave no series behind. Counters and histograms carry kind, class, outcome, reason
 * or provider — sets fixed by code — never a tenant or an operation id. A kind
 * name that is not defined (a client's typo) is reported as `unknown`.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, type LabelValues, Registry } from 'prom-client';
import { spendKeyParts } from '../admission/budgets.js';
import { InvalidArgument } from '../core/errors/index.js';
import type { OperationState } from '../core/states.js';
import type { Worker } from '../runtime/worker.js';
import type { Sluice } from '../sluice.js';
import type { PostgresStore } from '../store/postgres/index.js';
import type { Store } from '../store/store.js';
import {
  AWAITING_OPERATOR_CAP,
  type AwaitingOperatorStats,
  type BudgetUsage,
  type QueueStat,
  type RetryBudgetStats,
} from '../store/types.js';
import type { SluiceEventMap } from './events.js';

export interface MetricsOptions {
  /** Also collect prom-client's process metrics (CPU, memory, event-loop lag). Default false. */
  defaultMetrics?: boolean;
  /** The window the retry-budget gauges report over. Default 60 s (the engine's default). */
  retryBudgetWindowMs?: number;
}

export interface MetricsSource {
  sluice: Sluice;
  /** This process's workers: running attempts per class, temp bytes. */
  workers?: () => Worker[];
}

export interface HttpObservation {
  method: string;
  /** The route template (`/v1/operations/:id`), never the raw URL. */
  route: string;
  status: number;
  seconds: number;
  /** The problem code of an error response. */
  problem?: string;
}

export interface Metrics {
  readonly registry: Registry;
  /** The `Content-Type` of `scrape()`. */
  readonly contentType: string;
  /**
   * Subscribes to the engine's events and reads its store and workers on scrape. Returns the
   * function that unsubscribes. One source per `Metrics`.
   */
  bind(source: MetricsSource): () => void;
  /** The Prometheus text exposition. */
  scrape(): Promise<string>;
  /** Counts one HTTP request (the server calls it). */
  observeHttp(observation: HttpObservation): void;
}

const PREFIX = 'sluice_';
/** How long a scrape waits for the store's answer before it reports the store down. */
const SNAPSHOT_TIMEOUT_MS = 2000;
/**
 * A store read still out this long is given up, and the next scrape reads afresh: a connection
 * the network dropped answers only when TCP gives up, a quarter of an hour or more, and the
 * store may be back long before.
 */
const STALE_READ_MS = 30_000;

const SECONDS_SHORT = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];
const SECONDS_ATTEMPT = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const SECONDS_LONG = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 1800, 3600, 7200];

interface Snapshot {
  queues: QueueStat[];
  classes: Array<{ class: string; waiting: number }>;
  spend: BudgetUsage[];
  rates: BudgetUsage[];
  retryBudget: RetryBudgetStats;
  awaiting: AwaitingOperatorStats;
}

/** Connections checked out of the PostgreSQL pool; SQLite holds one connection. */
function dbConnectionsInUse(store: Store): number {
  if (store.dialect === 'postgres') {
    const pool = (store as PostgresStore).context?.pool;
    return pool ? pool.totalCount - pool.idleCount : 0;
  }
  return 1;
}

class PromMetrics implements Metrics {
  readonly registry = new Registry();
  private source: MetricsSource | undefined;
  private pending: Promise<Snapshot | null> | undefined;
  private pendingSince = 0;
  /** A read given up while still out: until it settles no other is given up (module header). */
  private abandoned: Promise<unknown> | undefined;
  private readonly retryWindowMs: number;

  // Events.
  private readonly submits: Counter<'kind' | 'outcome'>;
  private readonly rejections: Counter<'reason' | 'class'>;
  private readonly attempts: Counter<'kind' | 'outcome'>;
  private readonly retries: Counter<'kind'>;
  private readonly retryDenials: Counter<'kind'>;
  private readonly effects: Counter<'provider' | 'outcome'>;
  private readonly rescues: Counter<'to'>;
  private readonly finished: Counter<'kind' | 'state'>;
  private readonly attemptSeconds: Histogram<'kind'>;
  private readonly endToEndSeconds: Histogram<'kind' | 'state'>;
  private readonly firstAttemptAge: Histogram<'class'>;
  // HTTP.
  private readonly httpRequests: Counter<'method' | 'route' | 'status'>;
  private readonly httpSeconds: Histogram<'method' | 'route'>;
  private readonly httpProblems: Counter<'code'>;

  constructor(options: MetricsOptions) {
    this.retryWindowMs = options.retryBudgetWindowMs ?? 60_000;
    const registers = [this.registry];
    const counter = <L extends string>(name: string, help: string, labelNames: L[]) =>
      new Counter<L>({ name: PREFIX + name, help, labelNames, registers });
    const histogram = <L extends string>(name: string, help: string, labelNames: L[], buckets: number[]) =>
      new Histogram<L>({ name: PREFIX + name, help, labelNames, buckets, registers });

    this.submits = counter(
      'submits_total',
      'Submissions by outcome: created, duplicate (answered from the record), rejected.',
      ['kind', 'outcome'],
    );
    this.rejections = counter(
      'admission_rejections_total',
      'Submissions refused before anything was stored, by reason (error code).',
      ['reason', 'class'],
    );
    this.attempts = counter('attempts_total', 'Attempts ended, by kind and outcome.', ['kind', 'outcome']);
    this.retries = counter('retries_total', 'Retries scheduled after a retryable failure.', ['kind']);
    this.retryDenials = counter(
      'retry_budget_denials_total',
      'Retries the service-wide retry budget deferred.',
      ['kind'],
    );
    this.effects = counter(
      'effect_calls_total',
      'Requests to providers (and lookups), by provider and outcome.',
      ['provider', 'outcome'],
    );
    this.rescues = counter(
      'lease_rescues_total',
      'Expired leases rescued, by the state the operation went to.',
      ['to'],
    );
    this.finished = counter(
      'operations_finished_total',
      'Operations that reached a terminal state (through an attempt, a rescue of its expired lease or a cancel while queued), by kind and state.',
      ['kind', 'state'],
    );
    this.attemptSeconds = histogram(
      'attempt_duration_seconds',
      'Duration of one attempt.',
      ['kind'],
      SECONDS_ATTEMPT,
    );
    this.endToEndSeconds = histogram(
      'operation_end_to_end_seconds',
      'Acceptance to terminal state.',
      ['kind', 'state'],
      SECONDS_LONG,
    );
    this.firstAttemptAge = histogram(
      'age_of_first_attempt_seconds',
      'How long an operation waited for its first attempt from when it was due: its acceptance, or the end of its delayMs (AgeOfFirstAttempt).',
      ['class'],
      SECONDS_LONG,
    );
    this.httpRequests = counter('http_requests_total', 'HTTP requests by route template and status.', [
      'method',
      'route',
      'status',
    ]);
    this.httpSeconds = histogram(
      'http_request_duration_seconds',
      'HTTP request duration.',
      ['method', 'route'],
      SECONDS_SHORT,
    );
    this.httpProblems = counter('http_problems_total', 'Problem responses by problem type code.', ['code']);

    this.collectedGauges(registers);
    if (options.defaultMetrics) collectDefaultMetrics({ register: this.registry, prefix: PREFIX });
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** An operation reached a terminal state: counted once, however it got there. */
  private ended(kind: string, state: OperationState, endToEndMs: number): void {
    this.endToEndSeconds.observe({ kind, state }, endToEndMs / 1000);
    this.finished.inc({ kind, state });
  }

  bind(source: MetricsSource): () => void {
    if (this.source) {
      if (this.source.sluice === source.sluice) return () => {};
      throw new InvalidArgument(
        'these metrics already observe another engine; call createMetrics() per engine',
      );
    }
    this.source = source;
    const { sluice } = source;
    const kindLabel = (kind: string) => (sluice.kind(kind) ? kind : 'unknown');
    type Listener<K extends keyof SluiceEventMap> = (...args: SluiceEventMap[K]) => void;
    const on: { [K in keyof SluiceEventMap]?: Listener<K> } = {
      submitted: (e) => this.submits.inc({ kind: e.kind, outcome: e.created ? 'created' : 'duplicate' }),
      rejected: (e) => {
        this.submits.inc({ kind: kindLabel(e.kind), outcome: 'rejected' });
        this.rejections.inc({ reason: e.reason, class: e.class ?? '' });
      },
      'attempt-started': (e) => {
        if (e.firstAttemptAgeMs !== null)
          this.firstAttemptAge.observe({ class: e.class }, e.firstAttemptAgeMs / 1000);
      },
      'attempt-ended': (e) => {
        this.attempts.inc({ kind: e.kind, outcome: e.outcome });
        this.attemptSeconds.observe({ kind: e.kind }, e.durationMs / 1000);
        if (e.outcome === 'retry') this.retries.inc({ kind: e.kind });
        if (e.state !== null && e.endToEndMs !== null) this.ended(e.kind, e.state, e.endToEndMs);
      },
      effect: (e) => this.effects.inc({ provider: e.provider ?? 'none', outcome: e.outcome }),
      rescued: (e) => {
        this.rescues.inc({ to: e.to });
        if (e.endToEndMs !== null) this.ended(kindLabel(e.kind), e.to, e.endToEndMs);
      },
      cancelled: (e) => this.ended(kindLabel(e.kind), 'cancelled', e.endToEndMs),
      'retry-denied': (e) => this.retryDenials.inc({ kind: e.kind }),
    };
    const entries = Object.entries(on) as Array<[keyof SluiceEventMap, (...args: unknown[]) => void]>;
    for (const [name, listener] of entries) sluice.events.on(name, listener as never);
    return () => {
      for (const [name, listener] of entries) sluice.events.off(name, listener as never);
      if (this.source === source) this.source = undefined;
    };
  }

  scrape(): Promise<string> {
    return this.registry.metrics();
  }

  observeHttp(o: HttpObservation): void {
    this.httpRequests.inc({ method: o.method, route: o.route, status: String(o.status) });
    this.httpSeconds.observe({ method: o.method, route: o.route }, o.seconds);
    if (o.problem) this.httpProblems.inc({ code: o.problem });
  }

  /**
   * One store read per scrape, shared by every gauge collected in it, and by the scrapes that
   * come while it runs. A read that has not answered within SNAPSHOT_TIMEOUT_MS of its start
   * counts as the store being down (`store_up 0`, no store gauges): one that hangs (a connection
   * the network dropped hangs for minutes) must not hang every scrape, and with it every series
   * of the process. No second read starts while it hangs, each would hold a pool connection,
   * until it has hung STALE_READ_MS: then it is given up and the next read starts, so a store
   * that came back is seen again; at most one read is given up at a time, so the reads of the
   * metrics hold two connections at most.
   */
  private snapshot(): Promise<Snapshot | null> {
    const source = this.source;
    if (!source) return Promise.resolve(null);
    if (this.pending && !this.abandoned && performance.now() - this.pendingSince >= STALE_READ_MS) {
      const stale = this.pending;
      this.abandoned = stale;
      this.pending = undefined;
      void stale.finally(() => {
        if (this.abandoned === stale) this.abandoned = undefined;
      });
    }
    if (!this.pending) {
      this.pendingSince = performance.now();
      this.pending = this.read(source);
    }
    const read = this.pending;
    const left = SNAPSHOT_TIMEOUT_MS - (performance.now() - this.pendingSince);
    if (left <= 0) return Promise.resolve(null);
    let timer: NodeJS.Timeout | undefined;
    return Promise.race([
      read,
      new Promise<null>((resolve) => {
        timer = setTimeout(() => resolve(null), left);
      }),
    ]).finally(() => clearTimeout(timer));
  }

  /** The store's figures, or null when it does not answer; it clears `pending` when it settles. */
  private read(source: MetricsSource): Promise<Snapshot | null> {
    const read: Promise<Snapshot | null> = (async () => {
      const store = source.sluice.store;
      try {
        const now = await store.now();
        const [queues, classes, spend, rates, retryBudget, awaiting] = await Promise.all([
          store.queueStats({ holdingWork: true }),
          store.classStats(),
          store.budgetUsage({ prefix: 'spend:', since: now }),
          store.budgetUsage({ prefix: 'rate:', since: now }),
          store.retryBudgetStats({ windowMs: this.retryWindowMs }),
          store.awaitingOperatorStats({ cap: AWAITING_OPERATOR_CAP }),
        ]);
        return { queues, classes, spend, rates, retryBudget, awaiting };
      } catch {
        return null;
      }
    })().finally(() => {
      // A read given up and settling late leaves the read that replaced it in place.
      if (this.pending === read) this.pending = undefined;
    });
    return read;
  }

  private collectedGauges(registers: Registry[]): void {
    const gauge = <L extends string>(
      name: string,
      help: string,
      labelNames: L[],
      collect: (g: Gauge<L>) => Promise<void> | void,
    ) => {
      const g: Gauge<L> = new Gauge<L>({
        name: PREFIX + name,
        help,
        labelNames,
        registers,
        collect: () => collect(g),
      });
      return g;
    };
    const fromSnapshot = <L extends string>(
      name: string,
      help: string,
      labelNames: L[],
      fill: (g: Gauge<L>, s: Snapshot) => void,
    ) =>
      gauge(name, help, labelNames, async (g) => {
        const s = await this.snapshot();
        g.reset();
        if (s) fill(g, s);
      });

    gauge('store_up', '1 when the store answered the last scrape.', [], async (g) => {
      g.set(this.source ? ((await this.snapshot()) ? 1 : 0) : 0);
    });
    // A (class, tenant) pair has series only while it holds work (the snapshot reads no other):
    // tenants that come and go must not grow the series, nor each scrape, for ever.
    fromSnapshot(
      'queue_waiting',
      'Operations waiting, per class and tenant holding work (all processes).',
      ['class', 'tenant'],
      (g, s) => {
        for (const q of s.queues) g.set({ class: q.class, tenant: q.tenant }, q.waiting);
      },
    );
    fromSnapshot(
      'queue_running',
      'Operations running, per class and tenant holding work (all processes).',
      ['class', 'tenant'],
      (g, s) => {
        for (const q of s.queues) g.set({ class: q.class, tenant: q.tenant }, q.running);
      },
    );
    // Likewise a class: the store keeps a row for every class it ever saw, and classes that a
    // deploy retired, or that only other processes define, must not keep a series each for ever.
    // A class of this engine's kinds keeps one at 0, so its total reads 0 rather than absent.
    fromSnapshot(
      'class_waiting',
      'Operations waiting per class, all tenants (the class queue bound).',
      ['class'],
      (g, s) => {
        const own = new Set(this.source?.sluice.definedKinds().map((k) => k.class));
        for (const c of s.classes)
          if (c.waiting > 0 || own.has(c.class)) g.set({ class: c.class }, c.waiting);
      },
    );
    fromSnapshot(
      'operations_awaiting_operator',
      `Operations waiting for an operator, all tenants (all processes): dead, to redrive, and needs_reconciliation, to reconcile; counted up to ${AWAITING_OPERATOR_CAP.toLocaleString('en')} per state.`,
      ['state'],
      (g, s) => {
        g.set({ state: 'dead' }, s.awaiting.dead);
        g.set({ state: 'needs_reconciliation' }, s.awaiting.needsReconciliation);
      },
    );
    fromSnapshot(
      'budget_spend',
      'Spend in the current window per provider and tenant (`*`: all tenants), reserved or committed.',
      ['provider', 'tenant', 'state'],
      (g, s) => {
        for (const u of s.spend) {
          const labels = spendKeyParts(u.key);
          if (!labels) continue;
          g.inc({ ...labels, state: 'reserved' }, u.reserved);
          g.inc({ ...labels, state: 'committed' }, u.committed);
        }
      },
    );
    fromSnapshot('budget_calls', 'Provider requests in the current rate window.', ['provider'], (g, s) => {
      // The provider's own window; a tenant's share (`rate:<provider>:tenant:<t>`) is inside it.
      for (const u of s.rates)
        if (!u.key.includes(':tenant:'))
          g.inc({ provider: u.key.slice('rate:'.length) }, u.committed + u.reserved);
    });
    fromSnapshot(
      'retry_budget_first_attempts',
      'First attempts in the retry budget window (all processes).',
      [],
      (g, s) => {
        g.set(s.retryBudget.firstAttempts);
      },
    );
    fromSnapshot(
      'retry_budget_retries',
      'Retries allowed in the retry budget window (all processes).',
      [],
      (g, s) => {
        g.set(s.retryBudget.retries);
      },
    );
    fromSnapshot(
      'retry_budget_denied',
      'Retries denied in the retry budget window (all processes).',
      [],
      (g, s) => {
        g.set(s.retryBudget.denials);
      },
    );
    gauge(
      'worker_running_attempts',
      "Attempts running in this process's workers, per class.",
      ['class'],
      (g) => {
        g.reset();
        const totals = new Map<string, number>();
        for (const w of this.source?.workers?.() ?? []) {
          for (const [cls, n] of Object.entries(w.runningByClass()))
            totals.set(cls, (totals.get(cls) ?? 0) + n);
        }
        for (const [cls, n] of totals) g.set({ class: cls } as LabelValues<'class'>, n);
      },
    );
    gauge('temp_bytes', "Bytes in running attempts' temporary directories in this process.", [], (g) => {
      let total = 0;
      for (const w of this.source?.workers?.() ?? []) total += w.tempBytes();
      g.set(total);
    });
    gauge(
      'db_connections_in_use',
      'Database connections in use by this process (PostgreSQL pool; 1 for SQLite).',
      [],
      (g) => {
        if (this.source) g.set(dbConnectionsInUse(this.source.sluice.store));
      },
    );
  }
}

/**
 * A metrics registry for one engine. `buildServer` binds it and serves it at `/metrics`; a
 * worker-only process can bind it itself and serve `scrape()`.
 *
 * @example
 * ```ts
 * const metrics = createMetrics();
 * const app = await buildServer({ sluice, auth, metrics, workers: () => [worker] });
 * // or, without a server:
 * metrics.bind({ sluice, workers: () => [worker] });
 * const text = await metrics.scrape();
 * ```
 */
export function createMetrics(options: MetricsOptions = {}): Metrics {
  return new PromMetrics(options);
}
