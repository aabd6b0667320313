/**
 * @module bench/cases/engine-cases
 * Sluice itself, with default settings, on SQLite (a file in a temp folder, WAL, FULL) or on
 * PostgreSQL (a schema of its own in the bench database, the default pool of 10).
 *
 * - submit-one: `sluice.submit` awaited one at a time by one client (no worker running).
 * - process-effect / process-plain: issue 3's figure. Submit N operations with `submitters`
 *   concurrent clients (each awaits its own submit, as request handlers of an API server would;
 *   the engine's batcher groups what arrives together), then start one worker with the default
 *   settings (`sluice.worker()`: 32 slots, 500 ms poll) and time until every operation is
 *   terminal. Each `bench.effect` operation runs one `ctx.effect` at the in-process
 *   `ProviderStub`; `bench.plain` returns at once.
 *
 * The provider is spread over several stubs (see `ProviderShards`): a single stub's linear
 * ledger scan would otherwise cost more per operation than some of the engine's own steps.
 *
 * Every phase opens its own engine (its own pool or connection) and closes it, as separate API
 * and worker processes would, so the server's counters of each phase are exact. Before the timed
 * phases a warm-up round (tenant `warm`) runs the same code paths end to end.
 */
import type { Sluice, Worker } from 'sluice';
import {
  type CallCounts,
  EFFECT_KIND,
  openSluice,
  PLAIN_KIND,
  ProviderShards,
  type StoreName,
  type StoreTarget,
  WRITE_METHODS,
} from '../lib/engine.js';
import { PhaseMeter } from '../lib/meter.js';
import { databaseOf, PgObserver } from '../lib/pg-admin.js';
import type { CaseResult, CaseSpec } from './types.js';

const TERMINAL = new Set(['succeeded', 'failed', 'dead', 'needs_reconciliation', 'cancelled']);

function targetOf(spec: CaseSpec): StoreTarget {
  const store = spec.variant as StoreName;
  if (store !== 'sqlite' && store !== 'pg')
    throw new Error(`store must be sqlite or pg, not ${spec.variant}`);
  return { store, databaseUrl: spec.databaseUrl, schema: spec.tag, dir: spec.dir, poolSize: spec.poolSize };
}

async function observerFor(spec: CaseSpec, target: StoreTarget): Promise<PgObserver | undefined> {
  return target.store === 'pg' ? PgObserver.open(spec.serverUrl, databaseOf(spec.databaseUrl)) : undefined;
}

/**
 * Store calls per operation, by method, and their mean latency (`<phase>.ms.<method>`), plus
 * commits counted at the store (writes).
 */
function callsPerOp(counts: CallCounts, n: number, prefix: string): Record<string, number> {
  const out: Record<string, number> = {};
  let writes = 0;
  let all = 0;
  for (const [m, c] of counts.byMethod) {
    out[`${prefix}.calls.${m}`] = c / n;
    const ms = counts.msByMethod.get(m);
    if (ms !== undefined && c > 0) out[`${prefix}.ms.${m}`] = ms / c;
    all += c;
    if (WRITE_METHODS.includes(m)) writes += c;
  }
  out[`${prefix}.storeCalls`] = all / n;
  out[`${prefix}.storeWrites`] = writes / n;
  return out;
}

const inputOf = (i: number) => ({ invoice: i, amount_cents: 100 + (i % 900) });

async function submitConcurrently(
  sluice: Sluice,
  kind: string,
  ids: Array<{ tenant: string; id: string; i: number }>,
  submitters: number,
): Promise<void> {
  let next = 0;
  const client = async () => {
    for (;;) {
      const item = ids[next++];
      if (!item) return;
      const r = await sluice.submit({ tenant: item.tenant, id: item.id, kind, input: inputOf(item.i) });
      if (!r.created) throw new Error(`operation ${item.id} already existed`);
    }
  };
  await Promise.all(Array.from({ length: submitters }, client));
}

/** Resolves when `n` operations of `tenants` reached a terminal state in `worker`. */
function untilTerminal(
  worker: Worker,
  n: number,
  tenantFilter: (tenant: string) => boolean,
  timeoutMs: number,
): { done: Promise<void>; tally: Record<string, number> } {
  const tally: Record<string, number> = { attempts: 0 };
  let terminal = 0;
  const done = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () =>
        reject(new Error(`timed out: ${terminal} of ${n} operations terminal (${JSON.stringify(tally)})`)),
      timeoutMs,
    );
    worker.on('attempt', (e) => {
      if (!tenantFilter(e.tenant)) return;
      tally.attempts = (tally.attempts ?? 0) + 1;
      const end = e.report.outcome === 'written' ? e.report.end : e.report.outcome;
      tally[end] = (tally[end] ?? 0) + 1;
      if (e.report.outcome === 'written' && TERMINAL.has(e.report.end) && ++terminal === n) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return { done, tally };
}

export async function submitOne(spec: CaseSpec): Promise<CaseResult> {
  const target = targetOf(spec);
  const n = spec.ops ?? (target.store === 'pg' ? (spec.quick ? 300 : 2000) : spec.quick ? 500 : 5000);
  // On the engine that is then timed: a new engine's first few thousand submits run at about half
  // the rate of the rest, even in a warm process (peer-shapes.ts, ENQUEUE_WARM).
  const warm = spec.quick ? 50 : 5000;
  const observer = await observerFor(spec, target);
  try {
    {
      const { sluice } = openSluice(target);
      await sluice.migrate();
      await sluice.close();
    }
    const meter = new PhaseMeter(observer);
    await meter.open();
    const { sluice, counts } = openSluice(target);
    for (let i = 0; i < warm; i++)
      await sluice.submit({ tenant: 'warm', id: `w${i}`, kind: PLAIN_KIND, input: inputOf(i) });
    const callsBefore = counts.snapshot();
    await meter.startAfter(warm);
    for (let i = 0; i < n; i++) {
      const r = await sluice.submit({
        tenant: `t${i % spec.tenants}`,
        id: `op${i}`,
        kind: PLAIN_KIND,
        input: inputOf(i),
      });
      if (!r.created) throw new Error(`operation op${i} already existed`);
    }
    meter.stop();
    await meter.sampleServerCpu();
    const calls = counts.since(callsBefore);
    await sluice.close();
    await meter.close();
    return {
      figures: { submit: meter.rate(n) },
      perOp: { ...meter.perOp(n, 'submit'), ...callsPerOp(calls, n, 'submit') },
      info: { n, warm, seconds: meter.seconds },
      window: { startUs: meter.startUs, endUs: meter.endUs },
    };
  } finally {
    await observer?.close();
  }
}

export async function processOps(spec: CaseSpec): Promise<CaseResult> {
  const target = targetOf(spec);
  const kind = spec.scenario === 'process-effect' ? EFFECT_KIND : PLAIN_KIND;
  const n = spec.ops ?? (spec.quick ? 1000 : 10_000);
  const warm = spec.quick ? 100 : 500;
  const timeoutMs = Math.max(120_000, n * 20);
  const ids = Array.from({ length: n }, (_, i) => ({ tenant: `t${i % spec.tenants}`, id: `op${i}`, i }));
  const observer = await observerFor(spec, target);
  const result: CaseResult = { figures: {}, perOp: {}, info: { n, submitters: spec.submitters } };
  try {
    if (spec.phase !== 'process') {
      // Warm-up: the same code paths, end to end, on tenant `warm`; none is left queued.
      const provider = new ProviderShards(warm);
      const { sluice } = openSluice(target, provider);
      await sluice.migrate();
      const worker = sluice.worker();
      const w = untilTerminal(worker, warm, (t) => t === 'warm', timeoutMs);
      worker.start();
      const warmIds = Array.from({ length: warm }, (_, i) => ({ tenant: 'warm', id: `w${i}`, i }));
      await submitConcurrently(sluice, kind, warmIds, spec.submitters);
      await w.done;
      await sluice.close();

      const meter = new PhaseMeter(observer);
      await meter.open();
      const a = openSluice(target);
      meter.start();
      await submitConcurrently(a.sluice, kind, ids, spec.submitters);
      meter.stop();
      await meter.sampleServerCpu();
      await a.sluice.close();
      await meter.close();
      result.figures.submit = meter.rate(n);
      result.info.submitSeconds = meter.seconds;
      Object.assign(result.perOp, meter.perOp(n, 'submit'), callsPerOp(a.counts, n, 'submit'));
    }
    if (spec.phase !== 'submit') {
      const provider = new ProviderShards(n);
      const meter = new PhaseMeter(observer, undefined, spec.sampleWaits === true);
      await meter.open();
      const b = openSluice(target, provider);
      const worker = b.sluice.worker(spec.slots === undefined ? {} : { defaultSlots: spec.slots });
      const w = untilTerminal(worker, n, (t) => t !== 'warm', timeoutMs);
      meter.start();
      worker.start();
      await w.done;
      meter.stop();
      await meter.sampleServerCpu();
      await b.sluice.close();
      await meter.close();
      result.figures.process = meter.rate(n);
      result.info.processSeconds = meter.seconds;
      result.window = { startUs: meter.startUs, endUs: meter.endUs };
      for (const [w, mean] of Object.entries(meter.waits ?? {})) result.info[`waits.${w}`] = mean;
      Object.assign(result.perOp, meter.perOp(n, 'process'), callsPerOp(b.counts, n, 'process'));
      for (const [k, v] of Object.entries(w.tally)) result.info[`attempts.${k}`] = v;
      if (kind === EFFECT_KIND) {
        // The bench is only worth its figures if the work was really done, once.
        result.info.providerCalls = provider.calls;
        result.perOp['process.providerUs'] = (provider.ms * 1000) / n;
        if (provider.doubleCharges > 0 || provider.charges !== n)
          throw new Error(`provider ledger: ${provider.charges} charges, ${provider.doubleCharges} doubled`);
      }
    }
    if (result.figures.submit && result.figures.process) {
      const seconds = Number(result.info.submitSeconds) + Number(result.info.processSeconds);
      result.figures.e2e = n / seconds;
    }
    return result;
  } finally {
    await observer?.close();
  }
}
