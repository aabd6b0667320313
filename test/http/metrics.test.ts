/**
 * /metrics after real traffic: the families named in DESIGN.md's Observability section, from
 * engine events (counters, histograms) and collected on scrape (queue depth per class and
 * tenant, running attempts, temp bytes, DB connections, spend, the retry budget), and the
 * cardinality rule: a tenant label only on the queue gauges and spend.
 */
import { afterEach, describe, expect, it, onTestFinished, vi } from 'vitest';
import { z } from 'zod';
import { buildServer } from '../../src/http/server.js';
import type { Sluice, Store, Worker } from '../../src/index.js';
import { createEvents } from '../../src/observability/events.js';
import { createMetrics } from '../../src/observability/metrics.js';
import { FakeClock } from '../../src/testing/fake-clock.js';
import { O7 } from '../helpers/charge-kind.js';
import { harness } from '../helpers/engine.js';
import { Gate } from '../helpers/gate.js';
import { KEYS, type Rig, rig } from './rig.js';

/** `name{labels} value` lines, as a map from the series to its value. */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

/** An engine as the metrics see it, over a store answering every gauge's read empty but `over`. */
function engineOver(over: Record<string, unknown>): Sluice {
  const store = {
    now: async () => Date.now(),
    queueStats: async () => [],
    classStats: async () => [],
    budgetUsage: async () => [],
    retryBudgetStats: async () => ({ firstAttempts: 0, retries: 0, denials: 0 }),
    awaitingOperatorStats: async () => ({ dead: 0, needsReconciliation: 0 }),
    ...over,
  } as unknown as Store;
  return {
    store,
    events: createEvents(),
    kind: () => undefined,
    definedKinds: () => [],
  } as unknown as Sluice;
}

const FAMILIES = [
  'sluice_submits_total',
  'sluice_admission_rejections_total',
  'sluice_attempts_total',
  'sluice_retries_total',
  'sluice_retry_budget_denials_total',
  'sluice_effect_calls_total',
  'sluice_lease_rescues_total',
  'sluice_operations_finished_total',
  'sluice_attempt_duration_seconds',
  'sluice_operation_end_to_end_seconds',
  'sluice_age_of_first_attempt_seconds',
  'sluice_queue_waiting',
  'sluice_queue_running',
  'sluice_class_waiting',
  'sluice_operations_awaiting_operator',
  'sluice_worker_running_attempts',
  'sluice_temp_bytes',
  'sluice_db_connections_in_use',
  'sluice_budget_spend',
  'sluice_budget_calls',
  'sluice_retry_budget_first_attempts',
  'sluice_retry_budget_retries',
  'sluice_retry_budget_denied',
  'sluice_store_up',
  'sluice_http_requests_total',
  'sluice_http_request_duration_seconds',
  'sluice_http_problems_total',
];

describe('GET /metrics', () => {
  let r: Rig;
  afterEach(async () => r?.close());

  it('exposes every family after some traffic, with the numbers the traffic made', async () => {
    const gate = new Gate();
    const workers: Worker[] = [];
    const metrics = createMetrics();
    r = await rig({
      sluice: {
        tenants: { south: { default: { maxWaiting: 0 } } },
        providers: {
          payments: {
            perTenant: { limit: 100_000, windowMs: 3_600_000 },
            global: { limit: 1_000_000, windowMs: 3_600_000 },
            rate: { limit: 100, windowMs: 60_000 },
          },
        },
      },
      server: { metrics, workers: () => workers },
      define(sluice) {
        sluice.define('paid', {
          input: z.object({ cents: z.number().int() }),
          class: 'slow',
          run: async (input, ctx) => {
            await ctx.effect('charge', { provider: 'payments', cost: input.cents, call: async () => 'ok' });
            await gate.wait();
            return 'done';
          },
        });
      },
    });
    r.provider.failNext(1, 'unavailable');
    const post = (id: string, body: unknown, key: string = KEYS.north) =>
      r.call('POST', '/v1/operations', { key, headers: { 'idempotency-key': id }, body });
    expect((await post('O7', { kind: 'charge', input: O7 })).status).toBe(202);
    expect((await post('O7', { kind: 'charge', input: O7 })).status).toBe(200);
    expect((await post('bad', { kind: 'charge', input: { invoice: 'x' } })).status).toBe(422);
    expect((await post('typo', { kind: 'chrage', input: {} })).status).toBe(422);
    expect((await post('full', { kind: 'charge', input: O7 }, KEYS.south)).status).toBe(429);
    expect((await post('note', { kind: 'note', input: { text: 'waits' } })).status).toBe(202);

    const worker = r.h.worker({ slots: { default: 1, slow: 1, bulk: 0 } });
    workers.push(worker);
    worker.start();
    expect((await r.h.sluice.wait({ tenant: 'north', id: 'O7' })).state).toBe('succeeded');
    expect((await post('paid', { kind: 'paid', input: { cents: 1234 } })).status).toBe(202);
    await gate.arrived;
    // The effect's mark is written with the journal's next batch, not before the handler goes on
    // (ADR 6): the spend is committed once the journal says so.
    await vi.waitFor(async () => {
      const [effect] = await r.h.store.effectList({ tenant: 'north', id: 'paid' });
      expect(effect?.state).toBe('committed');
    });

    const res = await r.call('GET', '/metrics', { key: null });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    for (const family of FAMILIES) expect(res.text, family).toContain(`# TYPE ${family} `);
    const s = samples(res.text);
    const expected: Record<string, number | undefined> = {
      'sluice_submits_total{kind="charge",outcome="created"}': 1,
      'sluice_submits_total{kind="charge",outcome="duplicate"}': 1,
      'sluice_submits_total{kind="charge",outcome="rejected"}': 2,
      'sluice_submits_total{kind="unknown",outcome="rejected"}': 1,
      'sluice_admission_rejections_total{reason="input-invalid",class="default"}': 1,
      'sluice_admission_rejections_total{reason="kind-unknown",class=""}': 1,
      'sluice_admission_rejections_total{reason="tenant-queue-full",class="default"}': 1,
      'sluice_attempts_total{kind="charge",outcome="retry"}': 1,
      'sluice_attempts_total{kind="charge",outcome="succeeded"}': 1,
      'sluice_retries_total{kind="charge"}': 1,
      'sluice_effect_calls_total{provider="none",outcome="retryable"}': 1,
      'sluice_effect_calls_total{provider="none",outcome="committed"}': 1,
      'sluice_effect_calls_total{provider="payments",outcome="committed"}': 1,
      'sluice_operations_finished_total{kind="charge",state="succeeded"}': 1,
      'sluice_attempt_duration_seconds_count{kind="charge"}': 2,
      'sluice_operation_end_to_end_seconds_count{kind="charge",state="succeeded"}': 1,
      'sluice_age_of_first_attempt_seconds_count{class="default"}': 1,
      'sluice_age_of_first_attempt_seconds_count{class="slow"}': 1,
      'sluice_queue_waiting{class="bulk",tenant="north"}': 1,
      'sluice_queue_running{class="slow",tenant="north"}': 1,
      // Running 0 and waiting 0 in that class: a tenant without work there has no series.
      'sluice_queue_running{class="default",tenant="north"}': undefined,
      'sluice_queue_waiting{class="default",tenant="north"}': undefined,
      'sluice_queue_running{class="bulk",tenant="north"}': 0,
      'sluice_class_waiting{class="bulk"}': 1,
      'sluice_operations_awaiting_operator{state="dead"}': 0,
      'sluice_operations_awaiting_operator{state="needs_reconciliation"}': 0,
      'sluice_worker_running_attempts{class="slow"}': 1,
      sluice_temp_bytes: 0,
      sluice_db_connections_in_use: 1,
      'sluice_budget_spend{provider="payments",tenant="north",state="committed"}': 1234,
      'sluice_budget_spend{provider="payments",tenant="north",state="reserved"}': 0,
      'sluice_budget_spend{provider="payments",tenant="*",state="committed"}': 1234,
      'sluice_budget_calls{provider="payments"}': 1,
      sluice_retry_budget_first_attempts: 2,
      sluice_retry_budget_retries: 1,
      sluice_retry_budget_denied: 0,
      sluice_store_up: 1,
      'sluice_http_requests_total{method="POST",route="/v1/operations",status="202"}': 3,
      'sluice_http_requests_total{method="POST",route="/v1/operations",status="422"}': 2,
      'sluice_http_problems_total{code="tenant-queue-full"}': 1,
    };
    for (const [series, value] of Object.entries(expected))
      expect([series, s.get(series)]).toEqual([series, value]);

    // Cardinality: tenants only on the queue gauges and spend.
    const withTenant = new Set(
      [...s.keys()].filter((k) => k.includes('tenant=')).map((k) => k.split('{')[0]),
    );
    expect([...withTenant].sort()).toEqual([
      'sluice_budget_spend',
      'sluice_queue_running',
      'sluice_queue_waiting',
    ]);
    expect(res.text).not.toMatch(/id="|operation="/);

    // The same registry, scraped directly.
    expect(await metrics.scrape()).toContain('sluice_store_up 1');
    gate.open();
    await r.h.sluice.wait({ tenant: 'north', id: 'paid' });
  });

  it('counts every end: a cancel while queued (once), a rescue that dead-letters, and what waits for an operator', async () => {
    const clock = new FakeClock();
    const h = await harness({ clock });
    try {
      h.sluice.define('note', { input: z.object({}), limits: { maxAttempts: 1 }, run: async () => 'ok' });
      const metrics = createMetrics();
      const unbind = metrics.bind({ sluice: h.sluice });
      await h.sluice.submit({ tenant: 'North', id: 'gone', kind: 'note', input: {} });
      clock.advance(1_500);
      expect((await h.sluice.cancel({ tenant: 'North', id: 'gone' })).cancel).toBe('cancelled');
      expect((await h.sluice.cancel({ tenant: 'North', id: 'gone' })).cancel).toBe('cancelled');
      // A worker took this one and vanished: its lease expires on its only attempt.
      await h.sluice.submit({ tenant: 'North', id: 'lost', kind: 'note', input: {} });
      const claimed = await h.store.operationClaimMany({
        class: 'default',
        owner: 'vanished',
        limit: 1,
        leaseMs: 1_000,
      });
      expect(claimed.rows.map((row) => row.id)).toEqual(['lost']);
      clock.advance(2_000);
      expect(await h.sluice.rescueExpiredLeases()).toBe(1);

      const s = samples(await metrics.scrape());
      expect({
        cancelled: s.get('sluice_operations_finished_total{kind="note",state="cancelled"}'),
        dead: s.get('sluice_operations_finished_total{kind="note",state="dead"}'),
        rescues: s.get('sluice_lease_rescues_total{to="dead"}'),
        cancelledSeconds: s.get('sluice_operation_end_to_end_seconds_sum{kind="note",state="cancelled"}'),
        deadSeconds: s.get('sluice_operation_end_to_end_seconds_sum{kind="note",state="dead"}'),
        awaiting: s.get('sluice_operations_awaiting_operator{state="dead"}'),
      }).toEqual({ cancelled: 1, dead: 1, rescues: 1, cancelledSeconds: 1.5, deadSeconds: 2, awaiting: 1 });
      // Redriven, it no longer waits for an operator: the gauge says what is left, the counter
      // what happened.
      await h.sluice.redrive({ tenant: 'North', id: 'lost' }, { by: 'ops', reason: 'back' });
      const after = samples(await metrics.scrape());
      expect([
        after.get('sluice_operations_awaiting_operator{state="dead"}'),
        after.get('sluice_operations_finished_total{kind="note",state="dead"}'),
      ]).toEqual([0, 1]);
      unbind();
    } finally {
      await h.close();
    }
  });

  it("drops a class's series once nothing waits in it, unless a kind of this engine is in it", async () => {
    const h = await harness();
    try {
      h.sluice.define('note', { input: z.object({}), run: async () => 'ok' });
      const metrics = createMetrics();
      const unbind = metrics.bind({ sluice: h.sluice });
      // Another process's kinds, in classes this engine has none of: work put in, then cancelled,
      // as a deploy that retired them leaves them. The store keeps a row for each.
      const retired = Array.from({ length: 50 }, (_, i) => ({
        tenant: 'elsewhere',
        id: `r${i}`,
        kind: `old.kind${i}`,
        class: `retired${i}`,
        digest: `d${i}`,
        inputJson: '{}',
        maxAttempts: 1,
        deadlineMs: null,
      }));
      await h.store.operationSubmitMany(retired);
      const waiting = samples(await metrics.scrape());
      expect(waiting.get('sluice_class_waiting{class="retired0"}')).toBe(1);
      for (const r of retired) await h.store.operationCancel({ tenant: r.tenant, id: r.id });
      // And this engine's own class, empty again.
      await h.sluice.submit({ tenant: 'north', id: 'n1', kind: 'note', input: {} });
      await h.sluice.cancel({ tenant: 'north', id: 'n1' });

      const s = samples(await metrics.scrape());
      const classes = [...s.keys()].filter((k) => k.startsWith('sluice_class_waiting{'));
      expect(classes).toEqual(['sluice_class_waiting{class="default"}']);
      expect(s.get('sluice_class_waiting{class="default"}')).toBe(0);
      unbind();
    } finally {
      await h.close();
    }
  });

  it('reports the store down rather than failing the scrape; unsubscribes on close', async () => {
    r = await rig();
    const before = r.h.sluice.events.listenerCount('submitted');
    expect(before).toBe(1);
    await r.h.store.close(); // the database is gone
    const res = await r.call('GET', '/metrics', { key: null });
    expect(res.status).toBe(200);
    expect(samples(res.text).get('sluice_store_up')).toBe(0);
    await r.app.close();
    expect(r.h.sluice.events.listenerCount('submitted')).toBe(0);
  });

  it('can be limited to admin keys', async () => {
    r = await rig({ server: { metricsAuth: 'admin' } });
    expect((await r.call('GET', '/metrics', { key: null })).status).toBe(401);
    expect((await r.call('GET', '/metrics')).status).toBe(403);
    expect((await r.call('GET', '/metrics', { key: KEYS.admin })).status).toBe(200);
  });

  it('refuses a metricsAuth it does not know, rather than let any key read the gauges', async () => {
    const h = await harness();
    onTestFinished(() => h.close());
    await expect(
      buildServer({ sluice: h.sluice, auth: { tenants: {}, admin: [] }, metricsAuth: 'Admin' as 'admin' }),
    ).rejects.toMatchObject({
      code: 'invalid-argument',
      message: `metricsAuth must be 'none' or 'admin', not "Admin"`,
    });
  });

  it("PostgreSQL: connections in use are the pool's checked-out clients; one source per registry", async () => {
    const pool = { totalCount: 7, idleCount: 3 };
    const engine = engineOver({ dialect: 'postgres', context: { pool } });
    const metrics = createMetrics();
    const unbind = metrics.bind({ sluice: engine });
    expect(samples(await metrics.scrape()).get('sluice_db_connections_in_use')).toBe(4);
    pool.idleCount = 7;
    expect(samples(await metrics.scrape()).get('sluice_db_connections_in_use')).toBe(0);
    const other = { ...engine, events: createEvents() } as unknown as Sluice;
    expect(() => metrics.bind({ sluice: other })).toThrow(/another engine/);
    unbind();
    expect(engine.events.listenerCount('attempt-ended')).toBe(0);
  });

  it('a store read that never answers reports the store down, and starts no second read', async () => {
    let reads = 0;
    let answer: ((rows: []) => void) | undefined;
    const hanging = () => {
      reads++;
      return new Promise<[]>((resolve) => {
        answer = resolve;
      });
    };
    const engine = engineOver({ dialect: 'sqlite', queueStats: hanging });
    const store = engine.store as unknown as { queueStats: () => Promise<[]> };
    const metrics = createMetrics();
    const unbind = metrics.bind({ sluice: engine });
    // Each scrape answers (the test's timeout is the guard), the store down, the read still out.
    for (let i = 0; i < 3; i++) expect(samples(await metrics.scrape()).get('sluice_store_up')).toBe(0);
    expect(reads).toBe(1);
    // Once it answers, the next scrape reads afresh.
    answer!([]);
    // Its settling clears the read: microtasks, all run before the next turn of the event loop.
    await new Promise((resolve) => setImmediate(resolve));
    store.queueStats = async () => [];
    expect(samples(await metrics.scrape()).get('sluice_store_up')).toBe(1);
    unbind();
  });

  it('gives up a read that hung 30 s, and sees the store again when it is back', async () => {
    vi.useFakeTimers({ toFake: ['performance', 'setTimeout', 'clearTimeout', 'setImmediate'] });
    onTestFinished(() => {
      vi.useRealTimers();
    });
    let reads = 0;
    let back = false;
    // A read on a connection the network dropped: it never answers. Once the store is back, reads
    // on new connections answer.
    const queueStats = () => {
      reads++;
      return back ? Promise.resolve([]) : new Promise<[]>(() => {});
    };
    const engine = engineOver({ dialect: 'sqlite', queueStats });
    const metrics = createMetrics();
    const unbind = metrics.bind({ sluice: engine });
    const scrape = async () => {
      const text = metrics.scrape();
      await vi.advanceTimersByTimeAsync(2000);
      return samples(await text).get('sluice_store_up');
    };
    expect(await scrape()).toBe(0);
    back = true;
    // Within 30 s of its start the hung read is waited for: no second read.
    await vi.advanceTimersByTimeAsync(25_000);
    expect(await scrape()).toBe(0);
    expect(reads).toBe(1);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(await scrape()).toBe(1);
    expect(reads).toBe(2);
    unbind();
  });

  it('counts and logs a request refused before routing, as any other', async () => {
    r = await rig();
    const bad = await r.call('GET', '/v1/operations/%E0%A4%A');
    const long = await r.call('GET', `/v1/operations/${'x'.repeat(1100)}`);
    expect([bad.status, long.status]).toEqual([400, 414]);
    const scraped = samples((await r.call('GET', '/metrics', { key: null })).text);
    expect(scraped.get('sluice_http_problems_total{code="url-invalid"}')).toBe(1);
    expect(scraped.get('sluice_http_problems_total{code="uri-too-long"}')).toBe(1);
    expect(scraped.get('sluice_http_requests_total{method="GET",route="unmatched",status="400"}')).toBe(1);
    const lines = r.logs
      .map((l) => JSON.parse(l))
      .filter((l) => l.msg === 'request' && l.route === 'unmatched');
    expect(lines.map((l) => [l.status, l.problem])).toEqual([
      [400, 'url-invalid'],
      [414, 'uri-too-long'],
    ]);
  });

  it('a submit the store failed is not counted as refused by admission', async () => {
    r = await rig();
    await r.h.store.close(); // the database is gone
    const res = await r.call('POST', '/v1/operations', {
      headers: { 'idempotency-key': 'gone' },
      body: { kind: 'charge', input: { invoice: 1, amount_cents: 5 } },
    });
    expect(res.status).toBe(503);
    const scraped = samples((await r.call('GET', '/metrics', { key: null })).text);
    expect([...scraped.keys()].filter((k) => k.startsWith('sluice_admission_rejections_total'))).toEqual([]);
  });
});
