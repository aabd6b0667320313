/**
 * @module cli/commands/drill
 * `sluice drill`: runs the seed's controlled workload against a real deployment (an API process,
 * worker processes, the HTTP provider stub) on SQLite or PostgreSQL, checks the invariants, writes
 * `result.json` and the report, and exits 1 when any invariant fails (2 when the drill could not
 * run). See docs/drill.md.
 */
import type { Command } from 'commander';
import {
  DEFAULTS,
  type DrillOptions,
  MIN_DURATION_MS,
  parseDuration,
  type Scenario,
} from '../../drill/config.js';
import { runDrill } from '../../drill/run.js';
import { DRILL_BREAKS, type DrillBreak } from '../../drill/serve-config.js';

export interface DrillFlags {
  db?: string;
  workers: string;
  duration: string;
  scenario: string;
  report: string;
  keep?: boolean;
  latencyMultiple: string;
  latencyFloor: string;
  recoveryBound: string;
}

export function drillCommand(program: Command): void {
  program
    .command('drill')
    .description('run the controlled workload against a real deployment and check the guarantees')
    .option(
      '--db <sqlite-path|postgres-url>',
      'a new SQLite file, or PostgreSQL (a fresh schema per run); default: a temp SQLite file',
    )
    .option('--workers <n>', 'worker processes', String(DEFAULTS.workers))
    .option(
      '--duration <time>',
      `planned length of the phases, e.g. 60s, 2m; at least ${MIN_DURATION_MS / 1000}s`,
      `${DEFAULTS.durationMs / 1000}s`,
    )
    .option(
      '--scenario <name>',
      'all, pressure (no crashes) or crash (no pressure or stall)',
      DEFAULTS.scenario,
    )
    .option('--report <dir>', 'where result.json and the report go', DEFAULTS.reportDir)
    .option('--keep', 'keep the temp folder (SQLite file, logs) and the PostgreSQL schema')
    .option(
      '--latency-multiple <x>',
      "North's p95 under pressure ≤ x × its baseline p95",
      String(DEFAULTS.latencyMultiple),
    )
    .option(
      '--latency-floor <time>',
      'the latency objective is never tighter than this',
      `${DEFAULTS.latencyFloorMs}ms`,
    )
    .option(
      '--recovery-bound <time>',
      'how long the return to baseline may take',
      `${DEFAULTS.recoveryBoundMs / 1000}s`,
    )
    .action(async (opts: DrillFlags) => {
      let options: DrillOptions;
      try {
        options = drillOptions(opts);
      } catch (error) {
        // 2, as for any drill that could not run: 1 says a guarantee was broken.
        console.error(`drill: ${(error as Error).message}`);
        process.exit(2);
      }
      // A closed pipe (`drill | head`) must not crash the drill midway: that would leave its
      // deployment running. Anything else uncaught ends it with 2, "could not run", and the
      // drill's exit hook kills the deployment's processes on the way out.
      for (const stream of [process.stdout, process.stderr]) stream.on('error', () => {});
      process.on('uncaughtException', (error) => {
        try {
          console.error(`drill: could not run: ${error instanceof Error ? error.message : String(error)}`);
        } finally {
          process.exit(2);
        }
      });
      let outcome: Awaited<ReturnType<typeof runDrill>>;
      try {
        outcome = await runDrill(options);
      } catch (error) {
        const text =
          error instanceof Error ? (process.env.DEBUG ? error.stack : error.message) : String(error);
        console.error(`drill: could not run: ${text}`);
        process.exit(2);
      }
      const { result } = outcome;
      const width = Math.max(...result.invariants.map((i) => i.name.length));
      console.log('');
      for (const i of result.invariants)
        console.log(`${i.pass ? 'PASS' : 'FAIL'}  ${i.name.padEnd(width)}  ${i.figure}`);
      console.log('');
      console.log(`result: ${outcome.json}`);
      if (outcome.markdown) console.log(`report: ${outcome.markdown}`);
      if (outcome.html) console.log(`report: ${outcome.html}`);
      const failed = result.invariants.filter((i) => !i.pass).length;
      console.log(
        result.passed
          ? `drill passed: ${result.invariants.length} invariants held`
          : `drill FAILED: ${failed} of ${result.invariants.length} invariants violated`,
      );
      process.exit(result.passed ? 0 : 1);
    });
}

/** The longest latency floor and recovery bound. */
const MAX_OBJECTIVE_MS = 600_000;

/** The drill's options from its flags and environment; throws on any it cannot run with. */
export function drillOptions(opts: DrillFlags): DrillOptions {
  const workers = /^\d+$/.test(opts.workers.trim()) ? Number(opts.workers) : Number.NaN;
  if (!Number.isInteger(workers) || workers < 1 || workers > 16) throw new Error('--workers must be 1–16');
  if (!['all', 'crash', 'pressure'].includes(opts.scenario))
    throw new Error('--scenario must be all, crash or pressure');
  const broken = process.env.SLUICE_DRILL_BREAK || undefined;
  if (broken !== undefined && !(DRILL_BREAKS as readonly string[]).includes(broken))
    throw new Error(`SLUICE_DRILL_BREAK must be one of ${DRILL_BREAKS.join(', ')}`);
  const options: DrillOptions = {
    db: opts.db,
    workers,
    durationMs: parseDuration(opts.duration),
    scenario: opts.scenario as Scenario,
    reportDir: opts.report,
    keep: opts.keep,
    latencyMultiple: Number(opts.latencyMultiple),
    latencyFloorMs: parseDuration(opts.latencyFloor, 0, MAX_OBJECTIVE_MS),
    recoveryBoundMs: parseDuration(opts.recoveryBound, 1000, MAX_OBJECTIVE_MS),
    break: broken as DrillBreak | undefined,
  };
  // An objective past every latency the drill could see is no objective: 100× and 10 minutes.
  if (!(options.latencyMultiple >= 1 && options.latencyMultiple <= 100))
    throw new Error('--latency-multiple must be from 1 to 100');
  return options;
}
