/**
 * @module config/engine-options
 * What `new Sluice` takes, and each option checked and given its default in one place: a
 * misspelt key or an out-of-range value is refused when the engine is made, not met later as a
 * default the caller did not mean (a NaN window, a budget that never refuses).
 */
import type { Logger } from 'pino';
import { type ProviderBudgets, validateBudgets } from '../admission/budgets.js';
import { Admission, type AdmissionConfig } from '../admission/limits.js';
import { DEFAULT_RETRY_BUDGET, type RetryBudgetConfig } from '../admission/retry-budget.js';
import { bounded, knownKeys, MAX_DURATION_MS } from '../core/bounds.js';
import { InvalidArgument } from '../core/errors/index.js';
import {
  deriveEffectKey,
  type EffectKeyFn,
  MAX_KEY_NAMESPACE_CHARS,
  namespacedEffectKey,
} from '../effects/effect-key.js';
import { sluiceLogger } from '../observability/logger.js';
import { DEFAULT_RETENTION, type RetentionPolicy } from '../queue/maintenance.js';
import type { Store } from '../store/store.js';
import { logLevel } from './inputs.js';

export interface SluiceOptions {
  store: Store;
  /** pino logger. Default: warnings and errors to stderr (`SLUICE_LOG_LEVEL` overrides). */
  logger?: Logger;
  /** Lease expiries after which an operation is a poison message (dead, `crash-loop`). Default 3. */
  maxLeaseExpiries?: number;
  /** How long terminal operations and tombstones are kept. Default 7 and 30 days. */
  retention?: Partial<RetentionPolicy>;
  /** The provider idempotency key of an effect. Change it only if you know why: it must be stable. */
  effectKey?: EffectKeyFn;
  /**
   * Derives every effect key from this too (1–200 printable characters): for stores whose
   * effects reach one provider account (staging and production on one account, two
   * applications), which would otherwise derive one key for two operations of one tenant and
   * id. An effect keeps the key its journal row was written with: a namespace set or changed
   * later applies to effects not begun yet. Default none (keys as they always were).
   */
  effectKeyNamespace?: string;
  /** Source of randomness for back-off jitter (tests). */
  random?: () => number;
  /** Workload classes: global queue bound and default per-tenant limits (admission/limits.ts). */
  classes?: AdmissionConfig['classes'];
  /** Per-tenant limits by class (`'*'` for all classes): running and waiting caps, weight. */
  tenants?: AdmissionConfig['tenants'];
  /** Spend budgets and call-rate caps per paid provider (admission/budgets.ts). */
  providers?: ProviderBudgets;
  /**
   * The service-wide retry budget, across all processes: retries at most `ratio` of first
   * attempts over `windowMs`, plus `floor`. Default `{ ratio: 0.1, floor: 10, windowMs: 60_000 }`;
   * `false` turns it off.
   */
  retryBudget?: Partial<RetryBudgetConfig> | false;
}

/** The options an engine runs with: every default applied, every value checked. */
export interface EngineSettings {
  store: Store;
  log: Logger;
  effectKey: EffectKeyFn;
  retention: RetentionPolicy;
  maxLeaseExpiries: number;
  random: () => number;
  admission: Admission;
  providers: ProviderBudgets;
  retryBudget: RetryBudgetConfig | false;
}

/**
 * Checks `new Sluice`'s options and applies their defaults, in the order the caller reads them.
 *
 * @throws InvalidArgument no store, an unknown key, or a value out of its range
 */
export function engineSettings(options: SluiceOptions): EngineSettings {
  // A misspelt option left unread was its default without a word (`logLevel` is the
  // `SLUICE_LOG_LEVEL` variable, or a `logger`); a missing store failed later, in `migrate`.
  const store: unknown = (options as Partial<SluiceOptions> | null | undefined)?.store;
  if (typeof store !== 'object' || store === null || typeof (store as Store).migrate !== 'function')
    throw new InvalidArgument(
      'new Sluice needs a store: { store: sqliteStore({ path }) } or { store: postgresStore({ connectionString }) }',
    );
  knownKeys('new Sluice options', options, SLUICE_OPTION_KEYS);
  const log = options.logger ?? sluiceLogger(logLevel('warn'));
  const effectKey = effectKeyOf(options);
  const retention = retentionOf(options.retention);
  const maxLeaseExpiries = bounded('maxLeaseExpiries', options.maxLeaseExpiries, 3, {
    min: 1,
    max: 1000,
    integer: true,
  });
  const admission = new Admission({ classes: options.classes, tenants: options.tenants });
  const providers = options.providers ?? {};
  validateBudgets(providers);
  const retryBudget = options.retryBudget === false ? false : retryBudgetOf(options.retryBudget);
  return {
    store: options.store,
    log,
    effectKey,
    retention,
    maxLeaseExpiries,
    random: options.random ?? Math.random,
    admission,
    providers,
    retryBudget,
  };
}

const MAX_RETRY_RATIO = 1_000_000;
/** The largest count the stores keep as a 32-bit integer, as admission's caps. */
const MAX_CAP = 2 ** 31 - 1;
/** The longest retry budget window: the stores purge the budget's buckets after a day. */
const MAX_RETRY_WINDOW_MS = 86_400_000;
/** The shortest ceiling of a denied retry's wait. */
const MIN_RETRY_DEFER_MS = 100;

/** The retention policy with its defaults; a tombstone outlives the operation it replaces. */
function retentionOf(given: Partial<RetentionPolicy> | undefined): RetentionPolicy {
  // At most 100 years, as every duration the stores add to a time (core/bounds.ts).
  const terminalMs = bounded('retention.terminalMs', given?.terminalMs, DEFAULT_RETENTION.terminalMs, {
    min: 0,
    max: MAX_DURATION_MS,
  });
  const tombstoneMs = bounded('retention.tombstoneMs', given?.tombstoneMs, DEFAULT_RETENTION.tombstoneMs, {
    min: 0,
    max: MAX_DURATION_MS,
  });
  // Both count from the operation's end: a shorter tombstone would free the id when it is purged.
  if (tombstoneMs < terminalMs)
    throw new InvalidArgument('retention.tombstoneMs must be at least retention.terminalMs');
  return { terminalMs, tombstoneMs };
}

function retryBudgetOf(given: Partial<RetryBudgetConfig> | undefined): RetryBudgetConfig {
  const d = DEFAULT_RETRY_BUDGET;
  // `false` or an object: a misspelt key (`windowMS`) or another value (`'off'`) was the default.
  if (given !== undefined) knownKeys('retryBudget', given, RETRY_BUDGET_KEYS);
  const windowMs = bounded('retryBudget.windowMs', given?.windowMs, d.windowMs, {
    min: 1,
    // The stores keep a day of the budget's buckets.
    max: MAX_RETRY_WINDOW_MS,
    integer: true,
  });
  return {
    // A retry per first attempt a million times over is no budget; beyond, a typo.
    ratio: bounded('retryBudget.ratio', given?.ratio, d.ratio, { min: 0, max: MAX_RETRY_RATIO }),
    floor: bounded('retryBudget.floor', given?.floor, d.floor, { min: 0, max: MAX_CAP, integer: true }),
    windowMs,
    bucketMs: bounded('retryBudget.bucketMs', given?.bucketMs, d.bucketMs, {
      min: 1,
      max: windowMs,
      integer: true,
    }),
    // At 0 a denied retry asked the budget again at once, hundreds of times a second.
    deferMaxMs: bounded('retryBudget.deferMaxMs', given?.deferMaxMs, d.deferMaxMs, {
      min: MIN_RETRY_DEFER_MS,
      max: MAX_DURATION_MS,
      integer: true,
    }),
  };
}

/** The key derivation: the default, in a namespace, or the caller's own (not both). */
function effectKeyOf(options: SluiceOptions): EffectKeyFn {
  const ns = options.effectKeyNamespace;
  if (ns === undefined) return options.effectKey ?? deriveEffectKey;
  if (options.effectKey !== undefined)
    throw new InvalidArgument(
      'effectKeyNamespace and effectKey: give one, the namespace or your own derivation',
    );
  if (
    typeof ns !== 'string' ||
    ns.length === 0 ||
    ns.length > MAX_KEY_NAMESPACE_CHARS ||
    !/^[\x20-\x7e]+$/.test(ns)
  )
    throw new InvalidArgument(
      `effectKeyNamespace must be 1 to ${MAX_KEY_NAMESPACE_CHARS} printable ASCII characters`,
    );
  return namespacedEffectKey(ns);
}

const SLUICE_OPTION_KEYS = [
  'store',
  'logger',
  'maxLeaseExpiries',
  'retention',
  'effectKey',
  'effectKeyNamespace',
  'random',
  'classes',
  'tenants',
  'providers',
  'retryBudget',
] as const satisfies ReadonlyArray<keyof SluiceOptions>;

const RETRY_BUDGET_KEYS = [
  'ratio',
  'floor',
  'windowMs',
  'bucketMs',
  'deferMaxMs',
] as const satisfies ReadonlyArray<keyof RetryBudgetConfig>;
