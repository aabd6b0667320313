/**
 * @module runtime/kinds
 * Operation kinds: a name, an input schema (any Standard Schema validator: zod, valibot,
 * arktype…), a workload class, limits, and the handler. Limits left out take the defaults below,
 * which are documented in docs/admission.md and the README.
 */
import type { StandardSchemaV1 } from '@standard-schema/spec';
import { bounded, knownKeys, MAX_DURATION_MS, MAX_TIMER_MS } from '../core/bounds.js';
import { InputInvalid, type InputIssue, InvalidArgument } from '../core/errors/index.js';
import { type BackoffOptions, DEFAULT_BACKOFF } from '../retry/backoff.js';
import type { OperationContext } from './context.js';

export interface KindLimits {
  /** Largest input, as canonical JSON bytes. Default 65,536. */
  maxInputBytes?: number;
  /**
   * Largest result the handler, or one of its effects' providers, may return, as JSON bytes; over
   * it the operation fails (`needs_reconciliation` for an effect's answer). Default 262,144.
   */
  maxResultBytes?: number;
  /** Longest single attempt before its signal fires and it is retried. Default 60 s. */
  attemptTimeoutMs?: number;
  /** Longest life from acceptance to the end, across all attempts; `null` for none. Default 1 h. */
  deadlineMs?: number | null;
  /** Attempts before the operation is dead-lettered, the first included. Default 5. */
  maxAttempts?: number;
  /** Full-jitter back-off between attempts. Default base 200 ms, cap 10 s. */
  backoff?: Partial<BackoffOptions>;
  /** How long providers honour an effect key, when an effect does not say. Default 24 h. */
  effectRetentionMs?: number;
  /** Bytes an attempt may keep in its `ctx.tempDir()` folders; beyond it the attempt is stopped. Default 1 GiB. */
  maxTempBytes?: number;
  /** Requests sent under the operation's effect keys (lookups not counted), all effects and attempts together. Default 50. */
  maxProviderCalls?: number;
}

export type ResolvedLimits = Required<Omit<KindLimits, 'backoff' | 'deadlineMs'>> & {
  backoff: BackoffOptions;
  deadlineMs: number | null;
};

/** Attempts a kind may allow (the stores keep counts as 32-bit integers; far beyond any real use). */
const MAX_ATTEMPTS = 1000;
/** The largest result a kind may allow: a row's JSON column is read whole by every view of it. */
const MAX_RESULT_BYTES = 16 * 1024 ** 2;
/** Provider requests a kind may allow one operation. */
const MAX_PROVIDER_CALLS = 1_000_000;

export const DEFAULT_LIMITS: ResolvedLimits = {
  maxInputBytes: 65_536,
  maxResultBytes: 262_144,
  attemptTimeoutMs: 60_000,
  deadlineMs: 3_600_000,
  maxAttempts: 5,
  backoff: DEFAULT_BACKOFF,
  effectRetentionMs: 86_400_000,
  maxTempBytes: 1024 ** 3,
  maxProviderCalls: 50,
};

export interface KindDefinition<Schema extends StandardSchemaV1 = StandardSchemaV1, Result = unknown> {
  /** Validates the input at submit (before anything is stored) and again before each run. */
  input: Schema;
  /** The workload class whose slots run it. Default `default`. */
  class?: string;
  limits?: KindLimits;
  /**
   * The handler. It runs at least once per operation and may run again after a crash, a lost
   * lease or a retryable failure: every external effect must go through `ctx.effect`. Its
   * return value (plain JSON) is stored as the operation's result.
   */
  run(input: StandardSchemaV1.InferOutput<Schema>, ctx: OperationContext): Promise<Result> | Result;
}

/** Never set: it carries a kind's types from `define` to `submit` and `wait`. */
declare const KIND_TYPES: unique symbol;

/**
 * A defined kind, as `sluice.define` returns it. Pass it as a submit's `kind` and the input is
 * checked at compile time against the schema, and the operation that comes back, and `wait` on
 * it, carry the handler's result type. `Input` is what the schema takes (a submit's input);
 * `Result` what the handler returns, stored as JSON.
 */
export interface Kind<Input = unknown, Result = unknown> {
  name: string;
  class: string;
  limits: ResolvedLimits;
  schema: StandardSchemaV1;
  run(input: unknown, ctx: OperationContext): Promise<unknown> | unknown;
  readonly [KIND_TYPES]?: { input: Input; result: Result };
}

/** What a kind's submit takes: `InputOf<typeof charge>`. */
export type InputOf<K> = K extends Kind<infer Input, unknown> ? Input : never;
/** What a kind's handler returns, as its succeeded operation's `result`: `ResultOf<typeof charge>`. */
export type ResultOf<K> = K extends Kind<unknown, infer Result> ? Result : never;

const NAME = /^[a-z][a-z0-9_.-]{0,63}$/;
/** What a kind may be named: a filter by a kind outside it is refused rather than sent to the store. */
export const KIND_NAME = NAME;

/**
 * A limit of at least `min` (1 unless said) and at most `max`; or the default. Every limit counts
 * whole things (bytes, attempts, calls, milliseconds the stores keep as integers).
 */
const positive = (name: string, value: number | undefined, fallback: number, min = 1, max?: number): number =>
  bounded(name, value, fallback, max === undefined ? { min, integer: true } : { min, max, integer: true });

const DEFINITION_KEYS = ['input', 'class', 'limits', 'run'] as const satisfies ReadonlyArray<
  keyof KindDefinition
>;
const LIMIT_KEYS = [
  'maxInputBytes',
  'maxResultBytes',
  'attemptTimeoutMs',
  'deadlineMs',
  'maxAttempts',
  'backoff',
  'effectRetentionMs',
  'maxTempBytes',
  'maxProviderCalls',
] as const satisfies ReadonlyArray<keyof KindLimits>;
const BACKOFF_KEYS = ['baseMs', 'capMs'] as const satisfies ReadonlyArray<keyof BackoffOptions>;

export function resolveKind(name: string, def: KindDefinition): Kind {
  if (typeof name !== 'string' || !NAME.test(name))
    throw new InvalidArgument(`kind name ${JSON.stringify(name)} must match ${NAME}`);
  // A misspelt key left unread ran the kind on its default: `clas: 'bulk'` in class `default`,
  // `limits: { timeoutMs }` with the 60 s attempt timeout.
  knownKeys(`kind ${name}`, def, DEFINITION_KEYS);
  if (def.limits !== undefined) {
    knownKeys(`kind ${name}: limits`, def.limits, LIMIT_KEYS);
    if (def.limits.backoff !== undefined)
      knownKeys(`kind ${name}: limits.backoff`, def.limits.backoff, BACKOFF_KEYS);
  }
  // Accepted without one, every operation of the kind burnt all its attempts on a TypeError.
  if (typeof def.run !== 'function')
    throw new InvalidArgument(
      `kind ${name}: run must be a function (input, ctx) => result, not ${typeof def.run}`,
    );
  if (typeof def.input?.['~standard']?.validate !== 'function') {
    throw new InvalidArgument(
      `kind ${name}: input must be a Standard Schema validator (zod, valibot, arktype…)`,
    );
  }
  const cls = def.class ?? 'default';
  if (!NAME.test(cls)) throw new InvalidArgument(`class name ${JSON.stringify(cls)} must match ${NAME}`);
  const l = def.limits ?? {};
  const limits: ResolvedLimits = {
    maxInputBytes: positive('maxInputBytes', l.maxInputBytes, DEFAULT_LIMITS.maxInputBytes),
    maxResultBytes: positive(
      'maxResultBytes',
      l.maxResultBytes,
      DEFAULT_LIMITS.maxResultBytes,
      1,
      MAX_RESULT_BYTES,
    ),
    // A timer measures it: no longer than a timer can wait.
    attemptTimeoutMs: positive(
      'attemptTimeoutMs',
      l.attemptTimeoutMs,
      DEFAULT_LIMITS.attemptTimeoutMs,
      1,
      MAX_TIMER_MS,
    ),
    deadlineMs:
      l.deadlineMs === null
        ? null
        : positive('deadlineMs', l.deadlineMs, DEFAULT_LIMITS.deadlineMs as number, 1, MAX_DURATION_MS),
    maxAttempts: Math.floor(
      positive('maxAttempts', l.maxAttempts, DEFAULT_LIMITS.maxAttempts, 1, MAX_ATTEMPTS),
    ),
    backoff: {
      baseMs: positive('backoff.baseMs', l.backoff?.baseMs, DEFAULT_BACKOFF.baseMs, 0, MAX_DURATION_MS),
      capMs: positive('backoff.capMs', l.backoff?.capMs, DEFAULT_BACKOFF.capMs, 0, MAX_DURATION_MS),
    },
    effectRetentionMs: positive(
      'effectRetentionMs',
      l.effectRetentionMs,
      DEFAULT_LIMITS.effectRetentionMs,
      1,
      MAX_DURATION_MS,
    ),
    maxTempBytes: positive('maxTempBytes', l.maxTempBytes, DEFAULT_LIMITS.maxTempBytes, 0),
    maxProviderCalls: Math.floor(
      positive(
        'maxProviderCalls',
        l.maxProviderCalls,
        DEFAULT_LIMITS.maxProviderCalls,
        1,
        MAX_PROVIDER_CALLS,
      ),
    ),
  };
  return { name, class: cls, limits, schema: def.input, run: def.run as Kind['run'] };
}

function issuePath(path: StandardSchemaV1.Issue['path']): Array<string | number> {
  return (path ?? []).map((seg) => {
    const key = typeof seg === 'object' && seg !== null && 'key' in seg ? seg.key : seg;
    return typeof key === 'number' ? key : String(key);
  });
}

/** Runs the kind's schema; returns the parsed value or throws `InputInvalid` with every issue. */
export async function validateInput(kind: Kind, input: unknown): Promise<unknown> {
  let result = kind.schema['~standard'].validate(input);
  if (result instanceof Promise) result = await result;
  if (result.issues) {
    const issues: InputIssue[] = result.issues.map((i) => ({ path: issuePath(i.path), message: i.message }));
    throw new InputInvalid(kind.name, issues);
  }
  return result.value;
}
