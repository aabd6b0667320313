/**
 * @module bench/cases/backlog
 * What a deep backlog costs the claim: the same worker, processing the same shape of work, with
 * and without a million operations waiting behind it. Run once per bench run (it builds the
 * backlog through the engine: minutes on PostgreSQL), not once per round.
 *
 * - Backlog: `backlog` `bench.plain` operations (default 1,000,000) over 10,000 tenants (100
 *   each; operation i goes to tenant i mod 10,000), submitted through `sluice.submit` by
 *   BUILD_CALLERS concurrent callers (timed: the build rate is a figure too). The class's
 *   `maxQueued` and the tenants' `maxWaiting` are set to no cap: the defaults (100,000 and 10,000)
 *   would refuse such a backlog, as they should.
 * - Empty: `n` operations (10,000) over the same tenants the same way, on a store of their own —
 *   the queue holds only what the worker is timed on.
 *
 * In both, a worker process of its own (backlog-worker.ts: default engine, `sluice.worker()`)
 * is timed until `n` operations are terminal. The fair claim serves tenants in virtual-time
 * order, so the first `n` claims of the backlog take one operation from each of the first `n`
 * tenants, as in the empty store: the work is the same, only the rows waiting behind it differ.
 * Timed in the order empty, backlog, backlog, empty (the empty store refilled with `n` fresh
 * operations before its second run), against the shared machine's drift.
 *
 * Claim cost: the mean latency of the store calls that claim, as the worker waits for them (one
 * statement and one commit per call on PostgreSQL, one transaction on SQLite), from the counting
 * store wrapper, over both runs: `operationClaimMany`, and `attemptFinishAndClaim`, which claims
 * for the slots of the attempts whose ends it writes first (most claims of a drain); and the
 * processing rate. On PostgreSQL also the entries of the
 * queue and operation tables each claim read (the server's per-table counters, read between
 * worker processes). Memory: the worker process's resident set size, sampled every 50 ms while it
 * processes, and the kernel's high-water mark (VmHWM).
 *
 * What-if, PostgreSQL: one more run of each after `ANALYZE`, as autovacuum would run it after the
 * bulk load; a server with autovacuum off never gathers statistics on these tables otherwise.
 */
import { statSync } from 'node:fs';
import { join } from 'node:path';
import type { BacklogWorkerSpec } from '../backlog-worker.js';
import { runChild } from '../lib/child.js';
import { CostWindow } from '../lib/cost-window.js';
import { type PgClient, pg } from '../lib/drivers.js';
import { openSluice, type StoreTarget } from '../lib/engine.js';
import { databaseOf, PgObserver } from '../lib/pg-admin.js';
import { submitRange } from '../lib/submitters.js';
import { storeOf, targetFor } from '../lib/targets.js';
import type { CaseResult, CaseSpec } from './types.js';

const BACKLOG_TENANTS = 10_000;
/** Concurrent submitters building the backlog: enough to fill the engine's batches of up to 500. */
const BUILD_CALLERS = 500;

const NO_CAPS = { classes: { default: { maxQueued: null, tenant: { maxWaiting: null } } } };

const backlogSize = (spec: Pick<CaseSpec, 'backlog' | 'quick'>) =>
  spec.backlog ?? (spec.quick ? 20_000 : 1_000_000);

/** Submits `count` operations from `from` on, timed, with their costs (the server's CPU with an observer). */
async function fill(
  target: StoreTarget,
  from: number,
  count: number,
  tenants: number,
  observer?: PgObserver,
) {
  const e = openSluice(target, undefined, NO_CAPS);
  const window = new CostWindow({ observer, counts: () => e.counts });
  try {
    await e.sluice.migrate();
    await window.start();
    await submitRange(e.sluice, { prefix: 'b', from, count, tenants, callers: BUILD_CALLERS });
    await window.stop();
    return { seconds: window.seconds, perOp: window.perOp(count, 'build') };
  } finally {
    await e.sluice.close();
  }
}

/** The operations table with its indexes (PostgreSQL), or the database file with its WAL (SQLite), in MB. */
async function storeMb(target: StoreTarget): Promise<number> {
  if (target.store === 'sqlite') {
    const file = join(target.dir!, 'sluice.db');
    let bytes = 0;
    for (const f of [file, `${file}-wal`]) {
      try {
        bytes += statSync(f).size;
      } catch {}
    }
    return bytes / 1024 / 1024;
  }
  return withClient(target, async (c) => {
    const r = await c.query(`SELECT pg_total_relation_size($1::regclass)::float8 AS b`, [
      `"${target.schema}".operations`,
    ]);
    return Number(r.rows[0].b) / 1024 / 1024;
  });
}

/**
 * PostgreSQL: entries read so far on the queue and operation tables of the target's schema (index
 * entries, and rows of sequential scans) — how much of the queue a claim looks at. Backends
 * publish these counters when they exit, so they are read between worker processes.
 */
async function pgReads(target: StoreTarget): Promise<{ queues: number; operations: number }> {
  return withClient(target, async (c) => {
    const r = await c.query(
      `SELECT t.relname AS rel,
              (coalesce(t.seq_tup_read, 0) + coalesce(sum(i.idx_tup_read), 0))::float8 AS n
         FROM pg_stat_user_tables t LEFT JOIN pg_stat_user_indexes i ON i.relid = t.relid
        WHERE t.schemaname = $1 AND t.relname IN ('queues', 'operations')
        GROUP BY t.relname, t.seq_tup_read`,
      [target.schema],
    );
    const of = (rel: string) => Number(r.rows.find((x) => x.rel === rel)?.n ?? 0);
    return { queues: of('queues'), operations: of('operations') };
  });
}

async function withClient<T>(target: StoreTarget, fn: (c: PgClient) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: target.databaseUrl, application_name: 'bench-backlog' });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/** Adds up the runs of one store: rates over the total time, claim latency over all calls. */
function combine(runs: CaseResult[], prefix: string) {
  const n = runs.reduce((s, r) => s + Number(r.info.n), 0);
  const seconds = runs.reduce((s, r) => s + Number(r.info.seconds), 0);
  const claimCalls = runs.reduce((s, r) => s + Number(r.info.claimCalls), 0);
  const claimMs = runs.reduce((s, r) => s + Number(r.info.claimMsTotal), 0);
  const reads = (k: string) => runs.reduce((s, r) => s + Number(r.info[k] ?? Number.NaN), 0) / claimCalls;
  const perOp: Record<string, number> = {};
  for (const k of new Set(runs.flatMap((r) => Object.keys(r.perOp)))) {
    const xs = runs.map((r) => r.perOp[k]).filter((x): x is number => x !== undefined);
    perOp[`${prefix}.${k.slice(k.indexOf('.') + 1)}`] = xs.reduce((a, b) => a + b, 0) / xs.length;
  }
  return {
    rate: n / seconds,
    claimMs: claimMs / claimCalls,
    claimsPerOp: claimCalls / n,
    queueReadsPerClaim: reads('queueReads'),
    opReadsPerClaim: reads('opReads'),
    rssPeakMb: Math.max(...runs.map((r) => Number(r.info.rssPeakMb))),
    vmHwmMb: Math.max(...runs.map((r) => Number(r.info.vmHwmMb))),
    heapPeakMb: Math.max(...runs.map((r) => Number(r.info.heapPeakMb))),
    perOp,
  };
}

export async function backlog(spec: CaseSpec): Promise<CaseResult> {
  const store = storeOf(spec);
  const size = backlogSize(spec);
  const tenants = Math.min(BACKLOG_TENANTS, size);
  const n = Math.min(size, spec.ops ?? (spec.quick ? 2000 : 10_000));
  const emptyTarget = targetFor(spec, 'empty');
  const backlogTarget = targetFor(spec, 'backlog');
  const worker = async (target: StoreTarget, label: string) => {
    const before = store === 'pg' ? await pgReads(target) : undefined;
    const r = await runChild<CaseResult>(
      'backlog-worker.js',
      { target, n, serverUrl: spec.serverUrl } satisfies BacklogWorkerSpec,
      label,
    );
    if (before) {
      const after = await pgReads(target);
      r.info.queueReads = after.queues - before.queues;
      r.info.opReads = after.operations - before.operations;
    }
    return r;
  };

  await fill(emptyTarget, 0, n, tenants);
  console.log(`building a backlog of ${size.toLocaleString('en-US')} operations over ${tenants} tenants`);
  const observer =
    store === 'pg' ? await PgObserver.open(spec.serverUrl, databaseOf(spec.databaseUrl)) : undefined;
  const build = await fill(backlogTarget, 0, size, tenants, observer).finally(() => observer?.close());
  const backlogMb = await storeMb(backlogTarget);
  console.log(
    `built in ${build.seconds.toFixed(1)} s (${Math.round(size / build.seconds)}/s), ${backlogMb.toFixed(0)} MB`,
  );

  const empty1 = await worker(emptyTarget, 'empty');
  const full1 = await worker(backlogTarget, 'backlog');
  const full2 = await worker(backlogTarget, 'backlog');
  await fill(emptyTarget, n, n, tenants);
  const empty2 = await worker(emptyTarget, 'empty');

  const e = combine([empty1, empty2], 'empty');
  const b = combine([full1, full2], 'backlog');

  // What-if, PostgreSQL: the same after ANALYZE, as autovacuum would run it after a bulk load.
  // On a server with autovacuum off nothing else ever does, and the planner keeps estimating
  // the queue tables as nearly empty.
  let analyzed:
    | { e: ReturnType<typeof combine>; b: ReturnType<typeof combine>; autovacuum: string }
    | undefined;
  if (store === 'pg') {
    const autovacuum = await withClient(backlogTarget, async (c) => {
      for (const t of [emptyTarget, backlogTarget])
        await c.query(`ANALYZE "${t.schema}".queues, "${t.schema}".operations`);
      return String((await c.query('SHOW autovacuum')).rows[0].autovacuum);
    });
    await fill(emptyTarget, 2 * n, n, tenants);
    const fullA = await worker(backlogTarget, 'backlog, analyzed');
    const emptyA = await worker(emptyTarget, 'empty, analyzed');
    analyzed = { e: combine([emptyA], 'emptyAnalyzed'), b: combine([fullA], 'backlogAnalyzed'), autovacuum };
  }
  return {
    figures: {
      build: size / build.seconds,
      empty: e.rate,
      backlog: b.rate,
      ...(analyzed ? { emptyAnalyzed: analyzed.e.rate, backlogAnalyzed: analyzed.b.rate } : {}),
    },
    perOp: { ...build.perOp, ...e.perOp, ...b.perOp, ...analyzed?.e.perOp, ...analyzed?.b.perOp },
    info: {
      backlog: size,
      tenants,
      n,
      buildSeconds: build.seconds,
      buildCallers: BUILD_CALLERS,
      backlogMb,
      claimMsEmpty: e.claimMs,
      claimMsBacklog: b.claimMs,
      claimsPerOpEmpty: e.claimsPerOp,
      claimsPerOpBacklog: b.claimsPerOp,
      rssPeakMbEmpty: e.rssPeakMb,
      rssPeakMbBacklog: b.rssPeakMb,
      vmHwmMbEmpty: e.vmHwmMb,
      vmHwmMbBacklog: b.vmHwmMb,
      heapPeakMbBacklog: b.heapPeakMb,
      queueReadsPerClaimEmpty: e.queueReadsPerClaim,
      queueReadsPerClaimBacklog: b.queueReadsPerClaim,
      opReadsPerClaimEmpty: e.opReadsPerClaim,
      opReadsPerClaimBacklog: b.opReadsPerClaim,
      ...(analyzed
        ? {
            autovacuum: analyzed.autovacuum,
            claimMsEmptyAnalyzed: analyzed.e.claimMs,
            claimMsBacklogAnalyzed: analyzed.b.claimMs,
            queueReadsPerClaimBacklogAnalyzed: analyzed.b.queueReadsPerClaim,
            opReadsPerClaimBacklogAnalyzed: analyzed.b.opReadsPerClaim,
          }
        : {}),
    },
  };
}
