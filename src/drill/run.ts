/**
 * @module drill/run
 * One drill, start to end: open the store, start the deployment, drive the phases while the
 * sampler records (drill/phases.ts), drain, gather the evidence, check the invariants, write
 * `result.json`, the processes' logs and the report, and leave nothing running behind — also
 * when interrupted (Ctrl-C stops the deployment gracefully; a second one kills it).
 *
 * Phases (drill/config.ts gives their lengths): **baseline** (North alone); **pressure** (Bulk's
 * flood, duplicate deliveries, bursts, spend, walk-aways, running cancels); **stall** (the stub
 * holds every request; a lighter flood); **crash** (random SIGKILLs and failpoint kills; a lighter
 * flood); **recovery** (North alone again, until the deployment is back at its baseline or the
 * bound runs out). North's steady charges run throughout.
 */
import { randomBytes } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidArgument } from '../core/errors/index.js';
import { TempDirs } from '../runtime/temp-dirs.js';
import type { AttemptRow, EffectRow } from '../store/types.js';
import { DrillClient } from './client.js';
import { type DrillOptions, maskDb, planPhases } from './config.js';
import { Crashes } from './crashes.js';
import { Deployment } from './deployment.js';
import { checkInvariants, type Evidence, northMeasurement } from './invariants/index.js';
import { Workload } from './load.js';
import { type Observer, openObserver, withApplicationName } from './observer.js';
import { drivePhases } from './phases.js';
import { Progress } from './progress.js';
import { writeReport } from './report/index.js';
import { Sampler } from './sampler.js';
import {
  DRILL_KEYS,
  DRILL_MAX_RUNNING,
  DRILL_PG_POOL_SIZE,
  DRILL_RETRY_BUDGET,
  DRILL_SLOTS,
  DRILL_SPEND,
} from './serve-config.js';
import type { DrillResult, DrillSettings, InvariantResult, PhaseName } from './types.js';

/** A failure guard (not a synchroniser): how long the final drain may take. */
const DRAIN_GUARD_MS = 60_000;
/** The file that marks a report's `logs` folder as a drill's, which the next run may replace. */
const LOGS_MARK = '.sluice-drill-logs';
const STUB_LATENCY_MS = 10;

export interface DrillOutcome {
  result: DrillResult;
  reportDir: string;
  json: string;
  markdown: string;
  html: string;
}

const isPostgres = (db: string) => /^postgres(ql)?:\/\//.test(db);
const stamp = () => new Date().toISOString().replace(/[-:T]/g, '').slice(0, 14);

/**
 * Runs one drill and writes its report into `options.reportDir`.
 *
 * @example
 * ```ts
 * const { result, html } = await runDrill({ ...DEFAULTS, durationMs: 40_000, scenario: 'all' });
 * process.exitCode = result.passed ? 0 : 1;
 * ```
 */
export async function runDrill(options: DrillOptions): Promise<DrillOutcome> {
  const progress = new Progress(options.progress ?? process.stderr);
  const runId = `${stamp()}_${randomBytes(3).toString('hex')}`;
  const postgres = options.db !== undefined && isPostgres(options.db);
  if (!postgres && options.db !== undefined && existsSync(options.db))
    throw new InvalidArgument(
      `${options.db} exists: the drill needs a fresh SQLite file (or a postgres:// URL: it uses a schema of its own)`,
    );
  const reportDir = resolve(options.reportDir);
  // The report takes `logs` in its folder, replacing a drill's logs there, and no other folder.
  const logsOut = join(reportDir, 'logs');
  if (existsSync(logsOut) && !existsSync(join(logsOut, LOGS_MARK)))
    throw new InvalidArgument(
      `${logsOut} exists and is not a drill's logs: the report would replace it; give --report another folder`,
    );
  mkdirSync(reportDir, { recursive: true });
  const workDir = mkdtempSync(join(tmpdir(), 'sluice-drill-'));
  const db = options.db ?? join(workDir, 'drill.db');
  const schema = postgres ? `drill_${runId}` : undefined;
  const appName = `sluice-drill-${runId}`;
  const tempRoot = join(workDir, 'tmp');
  const logDir = join(workDir, 'logs');

  if (options.break)
    progress.note(`drill: DELIBERATELY BROKEN configuration (${options.break}): it must fail`);
  progress.note(
    `drill: ${postgres ? 'postgres' : 'sqlite'} ${maskDb(db)}${schema ? ` schema ${schema}` : ''}, ` +
      `${options.workers} workers, ${options.durationMs / 1000}s, scenario ${options.scenario}`,
  );
  const observer = await openObserver({ db, schema, appName, poolSize: DRILL_PG_POOL_SIZE }).catch(
    (error) => {
      rmSync(workDir, { recursive: true, force: true });
      throw error;
    },
  );
  const deployment = new Deployment({
    db: postgres ? withApplicationName(db, appName) : db,
    pgSchema: schema,
    workers: options.workers,
    tempRoot,
    logDir,
    break: options.break,
    stubLatencyMs: STUB_LATENCY_MS,
  });
  const cleanUp = async () => {
    // Workers killed without a grace leave their subprocess groups (`ctx.exec`) running: the sweep
    // a new worker makes at its start kills the groups of the dead ones.
    try {
      new TempDirs(tempRoot).sweepOrphans();
    } catch {
      // nothing swept: the folder is removed below all the same
    }
    await observer.close({ dropSchema: !options.keep }).catch(() => {});
    if (!options.keep) rmSync(workDir, { recursive: true, force: true });
    else progress.note(`drill: kept ${workDir}${schema ? ` and schema ${schema}` : ''}`);
  };
  let interrupted = false;
  const interrupt = () => {
    if (interrupted) {
      // Again: no grace for the processes, but the same cleaning up after them.
      deployment.killAll();
      void deployment
        .stop(0)
        .catch(() => {})
        .then(cleanUp)
        .finally(() => process.exit(130));
      return;
    }
    interrupted = true;
    progress.note('drill: interrupted: stopping the deployment (again to kill it)');
    void deployment
      .stop(3000)
      .catch(() => deployment.killAll())
      .then(cleanUp)
      .finally(() => process.exit(130));
  };
  // Every signal, not the first only: a second must reach the handler, not Node's default exit.
  process.on('SIGINT', interrupt);
  process.on('SIGTERM', interrupt);
  // However the drill's process ends (an uncaught error, a closed pipe, process.exit), its
  // deployment does not outlive it.
  const killOnExit = () => deployment.killAll();
  process.on('exit', killOnExit);

  let stopped = false;
  try {
    const deployedAt = Date.now();
    await deployment.start();
    const client = new DrillClient(deployment.apiUrl, { north: DRILL_KEYS.north, bulk: DRILL_KEYS.bulk });
    const startedAt = new Date();
    const perf0 = performance.now();
    const now = () => performance.now() - perf0;
    const workload = new Workload(client, now);
    let current: PhaseName = 'baseline';
    const plan = planPhases(options.scenario, options.durationMs);
    const sampler = new Sampler({
      observer,
      deployment,
      client,
      workload,
      tempRoot,
      retryWindowMs: DRILL_RETRY_BUDGET.windowMs,
      startedAtEpoch: deployedAt,
      now,
      phase: () => current,
    });
    const kills = () => deployment.kills.byDrill + deployment.kills.byFailpoint + deployment.kills.other;
    let succeeded = 0;
    const show = (phase: string, sample = sampler.latest?.sample) =>
      progress.update({
        phase,
        elapsedMs: now(),
        totalMs: plan.reduce((s, p) => s + p.ms, 0),
        accepted: workload.acceptedCount,
        succeeded,
        kills: kills(),
        sample,
      });
    sampler.onSample((o) => {
      succeeded += o.sample.northLatencyMs.length;
      show(o.phase, o.sample);
    });

    const phases = await drivePhases(plan, {
      deployment,
      workload,
      sampler,
      crashes: new Crashes(deployment),
      workers: options.workers,
      recoveryBoundMs: options.recoveryBoundMs,
      now,
      onPhase: (name) => {
        current = name;
        show(name);
      },
    });
    await sampler.stop();
    progress.end();

    progress.note('drill: draining');
    const drain = await drainAll(workload, observer, now);
    // Stopped before the evidence is read: after a drain that hit its guard, work still running
    // would otherwise charge after the ledger was read.
    await deployment.stop();
    stopped = true;
    const evidence: Evidence = {
      ...(await readEvidence(observer)),
      phases,
      observations: sampler.observations,
      ledger: deployment.stub.stub.ledger(),
      accepted: workload.accepted,
      north: workload.north,
      walkaways: workload.walkaways,
      duplicates: workload.duplicates,
      bursts: workload.bursts,
      t0: startedAt.getTime(),
      drain,
      workers: options.workers,
      latencyMultiple: options.latencyMultiple,
      latencyFloorMs: options.latencyFloorMs,
      recoveryBoundMs: options.recoveryBoundMs,
      connectionsMethod: observer.connectionsMethod,
      deployment: { incarnations: deployment.incarnations.length, kills: { ...deployment.kills } },
      runErrors: [...deployment.errors, ...sampler.errors],
    };
    const invariants = checkInvariants(evidence);

    const result = toResult(evidence, invariants, {
      store: postgres ? 'postgres' : 'sqlite',
      db: maskDb(db) + (schema ? ` (schema ${schema})` : ''),
      workers: options.workers,
      durationMs: options.durationMs,
      scenario: options.scenario,
      startedAt: startedAt.toISOString(),
      ...(options.break ? { break: options.break } : {}),
      limits: limitsOf(options),
    });
    const json = join(reportDir, 'result.json');
    writeFileSync(json, `${JSON.stringify(result, null, 2)}\n`);
    rmSync(logsOut, { recursive: true, force: true });
    cpSync(logDir, logsOut, { recursive: true });
    writeFileSync(join(logsOut, LOGS_MARK), 'the logs of a sluice drill, replaced by the next one\n');
    const paths = await writeReport(result, reportDir);
    return { result, reportDir, json, ...paths };
  } finally {
    process.off('SIGINT', interrupt);
    process.off('SIGTERM', interrupt);
    process.off('exit', killOnExit);
    if (!stopped) await deployment.stop(2000).catch(() => {});
    await cleanUp();
  }
}

/**
 * The drain: no new load; every client story ends; then nothing waiting or running in the
 * store — a condition on the queue counters, within a guard.
 */
async function drainAll(workload: Workload, observer: Observer, now: () => number) {
  const start = now();
  await workload.finish(DRAIN_GUARD_MS);
  while (now() - start < DRAIN_GUARD_MS) {
    const stats = await observer.queueStats();
    if (stats.every((q) => q.waiting === 0 && q.running === 0)) return { ms: now() - start, guardHit: false };
    await sleep(200);
  }
  return { ms: now() - start, guardHit: true };
}

/** Every operation, and the journal row and attempt history of every charge operation. */
async function readEvidence(observer: Observer) {
  const operations = await observer.allOperations();
  const chargeEffects = new Map<string, EffectRow | undefined>();
  const chargeAttempts = new Map<string, AttemptRow[]>();
  for (const o of operations.filter((x) => x.kind === 'charge')) {
    const ref = { tenant: o.tenant, id: o.id };
    const [effects, attempts] = await Promise.all([
      observer.store.effectList(ref),
      observer.store.attemptList(ref),
    ]);
    chargeEffects.set(
      `${o.tenant}/${o.id}`,
      effects.find((e) => e.name === 'charge'),
    );
    chargeAttempts.set(`${o.tenant}/${o.id}`, attempts);
  }
  return { operations, chargeEffects, chargeAttempts };
}

function limitsOf(options: DrillOptions): DrillSettings['limits'] {
  const { provider, tenants, perTenant, global } = DRILL_SPEND;
  return {
    maxRunning: DRILL_MAX_RUNNING,
    slotsPerWorker: { ...DRILL_SLOTS },
    latencyMultiple: options.latencyMultiple,
    latencyFloorMs: options.latencyFloorMs,
    spendLimit: {
      ...Object.fromEntries(Object.entries(tenants).map(([t, v]) => [`spend:${provider}:tenant:${t}`, v])),
      [`spend:${provider}:tenant:*`]: perTenant,
      [`spend:${provider}:*`]: global,
    },
  };
}

function toResult(e: Evidence, invariants: InvariantResult[], settings: DrillSettings): DrillResult {
  const count = (state: string) => e.operations.filter((o) => o.state === state).length;
  const north = northMeasurement(e);
  const k = e.deployment.kills;
  return {
    settings,
    phases: e.phases,
    samples: e.observations.map((o) => o.sample),
    invariants,
    summary: {
      accepted: e.operations.length,
      succeeded: count('succeeded'),
      failed: count('failed'),
      cancelled: count('cancelled'),
      dead: count('dead'),
      needsReconciliation: count('needs_reconciliation'),
      duplicatesAnswered: e.duplicates.answered,
      kills: k.byDrill + k.byFailpoint + k.other,
      northP95BaselineMs: Math.round(north.p95Baseline),
      northP95PressureMs: Math.round(north.p95Pressure),
    },
    passed: invariants.every((i) => i.pass),
  };
}
