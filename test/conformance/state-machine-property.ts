/**
 * @module test/conformance/state-machine-property
 * A model-based property test of the Store state machine, reusable by every driver: fast-check
 * generates random histories of submits (new, duplicate, conflicting), claims, crashes (the
 * claimer abandons its lease and writes nothing), clock ticks, heartbeats, lease expiries
 * (rescue), cancels, finishes (succeeded / retry / failed / released / dead /
 * needs_reconciliation), effect begin / send / absent / commit, redrives, reconciles, and stale
 * writes by workers that lost their lease. Each command predicts its answer from a small model (the spec: the
 * transition table, core/decisions.ts, the Store contract) and the whole model is compared with
 * the store after it.
 *
 * After EVERY command, independently of the model's predictions, the store must keep:
 * - every state change between two snapshots allowed by `isAllowedMove` (core/states.ts), and a
 *   terminal state left only by the redrive / reconcile of that very operation;
 * - the digest, and the seq, of an accepted operation unchanged; no accepted operation lost;
 * - the epoch never decreasing, and moving only with a claim (by a random step: never reissued);
 * - exactly one live lease (the current epoch's) per running operation, none otherwise; every
 *   write with any other epoch refused and without effect (probed each step);
 * - the queue counters equal to the true counts, `maxRunning` never exceeded;
 * - no cancelled operation with an effect that happened or may have (`pending`/`committed`), and
 *   no unanswered cancel (`requested`) on an operation that is neither running nor cancelled.
 *
 * The model and its rules: state-machine/model.ts; the commands: state-machine/commands.ts; the
 * invariants: state-machine/invariants.ts.
 */
import fc from 'fast-check';
import type { StoreFactory } from './fixtures.js';
import { COMMANDS } from './state-machine/commands.js';

/** What every history set must reach, or the property is not exploring the state machine. */
export const REQUIRED_COVERAGE = [
  'state:queued',
  'state:running',
  'state:succeeded',
  'state:failed',
  'state:cancelled',
  'state:dead',
  'state:needs_reconciliation',
  'submit:existing',
  'submit:conflict',
  'submit:rejected',
  'cancel:queued:cancelled',
  'cancel:running:requested',
  'cancel:running:too_late',
  'rescue:queued',
  'rescue:dead',
  'finish:stale-refused',
  'effect-begin:created',
  'effect-begin:existing',
  'effect-begin:lease-lost',
  'effect-begin:cancel-requested',
  'effect-commit:true',
  'redrive:done',
  'reconcile:requeue',
  'stale-writes',
] as const;

export interface StateMachinePropertyOptions {
  /** Histories to run. Default 100. */
  numRuns?: number;
  /**
   * The longest history. fc.commands draws lengths up to it, so the mean is about half: the
   * default 60 gives histories of ~30 commands, deep enough to reach a crash-loop dead letter or
   * a reconciled requeue (see REQUIRED_COVERAGE), at ~3,000 store steps per run.
   */
  maxCommands?: number;
  /** Default: `SLUICE_PROPERTY_SEED`, else DEFAULT_PROPERTY_SEED, so every run explores the same histories. */
  seed?: number;
  /** A replay path printed by an earlier failure (default `SLUICE_PROPERTY_PATH`): runs only that history. */
  path?: string;
  /** The commands' replay path printed with it (default `SLUICE_PROPERTY_REPLAY`). */
  replayPath?: string;
}

export const DEFAULT_PROPERTY_SEED = 20_260_101;

export interface StateMachinePropertyRun {
  numRuns: number;
  seed: number;
  /** True when only a replay path ran: coverage then says nothing. */
  replay: boolean;
  /** REQUIRED_COVERAGE labels no history reached. */
  missing: string[];
}

/**
 * Runs the state-machine property against stores made by `factory` (one fresh store per
 * history). Throws on the first invariant broken, with the shrunk history, the seed and the
 * replay path.
 *
 * @example
 * ```ts
 * const run = await checkStateMachineProperty(postgresFixture);
 * expect(run.missing).toEqual([]);
 * ```
 */
export async function checkStateMachineProperty(
  factory: StoreFactory,
  options: StateMachinePropertyOptions = {},
): Promise<StateMachinePropertyRun> {
  const coverage = new Set<string>();
  const envSeed = process.env.SLUICE_PROPERTY_SEED;
  const seed = options.seed ?? (envSeed ? Number(envSeed) : DEFAULT_PROPERTY_SEED);
  const path = options.path ?? process.env.SLUICE_PROPERTY_PATH;
  const replayPath = options.replayPath ?? process.env.SLUICE_PROPERTY_REPLAY;
  const property = fc.asyncProperty(
    fc.commands(COMMANDS, {
      maxCommands: options.maxCommands ?? 60,
      size: 'max',
      ...(replayPath ? { replayPath } : {}),
    }),
    async (commands) => {
      const fx = await factory();
      try {
        await fc.asyncModelRun(
          () => ({
            model: { ops: new Map(), leases: [], snapshot: new Map() },
            real: { store: fx.store, clock: fx.clock, coverage },
          }),
          commands,
        );
      } finally {
        await fx.cleanup();
      }
    },
  );
  const details = await fc.check(property, {
    seed,
    numRuns: options.numRuns ?? 100,
    ...(path ? { path, endOnFailure: true } : {}),
  });
  if (details.failed) {
    const report = fc.defaultReportMessage(details) ?? `property failed (seed ${details.seed})`;
    const commands = /replayPath="([^"]*)"/.exec(report)?.[1];
    const replay =
      `replay: SLUICE_PROPERTY_SEED=${details.seed} SLUICE_PROPERTY_PATH='${details.counterexamplePath}'` +
      (commands ? ` SLUICE_PROPERTY_REPLAY='${commands}'` : '');
    throw new Error(`${report}\n${replay}`, { cause: details.errorInstance });
  }
  return {
    numRuns: details.numRuns,
    seed: details.seed,
    replay: path !== undefined,
    missing: REQUIRED_COVERAGE.filter((label) => !coverage.has(label)),
  };
}
