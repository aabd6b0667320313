/**
 * @module config/config
 * The service's configuration: one object, usually the default export of `sluice.config.ts`
 * (or `.mjs` / `.js`), loaded with jiti so TypeScript needs no build step. Secrets may come from
 * the environment instead of the file (`serve`'s `--db`, `--port` and `--host` override these in
 * turn; every variable the commands read: docs/operations.md, "Environment variables"):
 *
 * | variable | meaning |
 * |---|---|
 * | `SLUICE_DB` | the store: a SQLite path or a `postgres://` URL (overrides `db`) |
 * | `PORT`, `HOST` | where the API listens (override `http.port`, `http.host`) |
 * | `SLUICE_TENANT_KEYS` | `tenant:key,tenant:key` — API keys, plaintext or `sha256:<hex>`, added to `auth.tenants` |
 * | `SLUICE_ADMIN_KEYS` | `key,key` — admin keys, added to `auth.admin` |
 * | `SLUICE_SHUTDOWN_GRACE_MS` | overrides `shutdownGraceMs` |
 *
 * A relative `db` (a SQLite file) or `worker.tempRoot` in a file is taken from the file's folder,
 * not from the folder a command runs in.
 *
 * @example
 * ```ts
 * // sluice.config.ts
 * import { defineConfig } from 'sluice';
 * import { z } from 'zod';
 * export default defineConfig({
 *   db: './data/sluice.db',
 *   kinds: { charge: { input: z.object({ amount_cents: z.number().int() }), run: async (input, ctx) => … } },
 *   tenants: { north: { default: { maxRunning: 2, maxWaiting: 5 } } },
 *   auth: { admin: ['sha256:…'] },
 * });
 * ```
 */
import { existsSync } from 'node:fs';
import { dirname, isAbsolute, resolve } from 'node:path';
import type { StandardSchemaV1 } from '@standard-schema/spec';
import type { ProviderBudgets } from '../admission/budgets.js';
import type { AdmissionConfig } from '../admission/limits.js';
import type { RetryBudgetConfig } from '../admission/retry-budget.js';
import { InvalidArgument } from '../core/errors/index.js';
import type { EffectKeyFn } from '../effects/effect-key.js';
import type { RetentionPolicy } from '../queue/maintenance.js';
import type { KindDefinition } from '../runtime/kinds.js';
import type { WorkerOptions } from '../runtime/worker.js';
import type { Sluice } from '../sluice.js';
import type { PostgresOptions } from '../store/postgres/connection.js';
import { portFrom, urlScheme } from './inputs.js';

/**
 * The PostgreSQL store's settings a config file may give: its schema, its pool, behind a pooler
 * in transaction mode `pooler: 'transaction'` with a direct `listenUrl` for wake-ups, and
 * `durableCommits: false` to keep a server's `synchronous_commit = off` (docs/operations.md).
 */
export type PostgresConfig = Pick<
  PostgresOptions,
  'schema' | 'poolSize' | 'pooler' | 'listenUrl' | 'durableCommits'
>;

export interface SluiceConfig {
  /** The store: a SQLite file path (default `./data/sluice.db`) or a `postgres://` URL. */
  db?: string;
  sqlite?: { synchronous?: 'FULL' | 'NORMAL' };
  /** The PostgreSQL store's settings a config may give (`postgresStore`'s options of the same names). */
  postgres?: PostgresConfig;
  /** Apply pending migrations at start-up (`auto`, default) or only with `sluice migrate`. */
  migrate?: 'auto' | 'manual';
  /**
   * The API's listener. `metricsAuth: 'admin'` asks for an admin key on `GET /metrics` (its
   * series name tenants); the default `none` leaves it open, for a scraper on a private network.
   */
  http?: {
    host?: string;
    port?: number;
    bodyLimitBytes?: number;
    metricsAuth?: 'none' | 'admin';
    /** Serve the dashboard at `/dashboard` (default true): a page over the API, no data of its own. */
    dashboard?: boolean;
    /** Requests one tenant may have in progress at once on this process (default 64; false: no cap). */
    maxRequestsPerTenant?: number | false;
    /**
     * Listings (`GET /v1/operations`) one tenant, or one admin key across tenants, may have in
     * progress at once on this process (default 2; false: no cap).
     */
    maxListingsPerTenant?: number | false;
    /** Connections held open at once, before and after authentication (default 1,000). */
    maxConnections?: number;
    /**
     * On SIGTERM, how long the API keeps answering (new work refused with 503, `/readyz` 503,
     * reads answered) before it closes its port: the time a load balancer needs to stop sending
     * it requests. At most the shutdown's grace. Default 5 s; 0 closes at once.
     */
    drainMs?: number;
  };
  /** API keys: per tenant, and for operators. Plaintext or `sha256:<hex>`; never logged. */
  auth?: { tenants?: Record<string, string[]>; admin?: string[] };
  /** Operation kinds by name. */
  // biome-ignore lint/suspicious/noExplicitAny: each kind has its own input type.
  kinds?: Record<string, KindDefinition<any, any>>;
  /** Called once the engine exists: define kinds that need it (e.g. to read other operations). */
  setup?(sluice: Sluice): void | Promise<void>;
  classes?: AdmissionConfig['classes'];
  tenants?: AdmissionConfig['tenants'];
  providers?: ProviderBudgets;
  retryBudget?: Partial<RetryBudgetConfig> | false;
  retention?: Partial<RetentionPolicy>;
  maxLeaseExpiries?: number;
  /**
   * Do not use outside tests. Replaces the provider idempotency key derivation (the engine's
   * `effectKey` option): a key must be stable forever for an effect, and the default is. The
   * drill uses it to prove that a broken key function is caught or contained.
   */
  effectKey?: EffectKeyFn;
  /**
   * Derives every effect key from this too: for stores whose effects reach one provider account
   * (staging and production on one account); effects already begun keep their key
   * (docs/effect-protocol.md). Default none.
   */
  effectKeyNamespace?: string;
  worker?: WorkerOptions;
  /** How long a stopping process lets running attempts finish before releasing them. Default 10 s. */
  shutdownGraceMs?: number;
}

/** Identity function that gives a config file its types. */
export function defineConfig<Schemas extends Record<string, StandardSchemaV1>>(
  config: Omit<SluiceConfig, 'kinds'> & {
    kinds?: { [Name in keyof Schemas]: KindDefinition<Schemas[Name]> };
  },
): SluiceConfig {
  return config;
}

export const CONFIG_FILES = [
  'sluice.config.ts',
  'sluice.config.mts',
  'sluice.config.mjs',
  'sluice.config.js',
];

/**
 * Loads a config file (TypeScript or JavaScript, its default export), or the first of
 * `CONFIG_FILES` found in `cwd`; an empty config when there is none.
 */
export async function loadConfig(path?: string, cwd = process.cwd()): Promise<SluiceConfig> {
  const file = path
    ? resolve(cwd, path)
    : CONFIG_FILES.map((f) => resolve(cwd, f)).find((f) => existsSync(f));
  if (!file) return {};
  if (!existsSync(file)) throw new InvalidArgument(`config file ${file} does not exist`);
  const loaded = (await importDefault(file)) as SluiceConfig | (() => SluiceConfig);
  const config: unknown = typeof loaded === 'function' ? await loaded() : loaded;
  if (typeof config !== 'object' || config === null || Array.isArray(config)) {
    const got =
      config === null || config === undefined
        ? String(config)
        : Array.isArray(config)
          ? 'an array'
          : `a ${typeof config}`;
    throw new InvalidArgument(
      `${file} must export a config object as its default export (it exports ${got})`,
    );
  }
  // A misspelled key would be ignored, and the service would run without what it names.
  const unknown = Object.keys(config).filter((key) => !CONFIG_KEYS.has(key));
  if (unknown.length > 0) {
    throw new InvalidArgument(
      `${file}: unknown config ${unknown.length === 1 ? 'key' : 'keys'} ${unknown.join(', ')} (known: ${[...CONFIG_KEYS].join(', ')})`,
    );
  }
  // The same one level down, in the sections whose keys are fixed: `postgres: { pooller }` would
  // leave the store without the pooler it names.
  for (const [section, known] of Object.entries(SECTION_KEYS)) {
    const value = (config as Record<string, unknown>)[section];
    if (typeof value !== 'object' || value === null || Array.isArray(value)) continue;
    const wrong = Object.keys(value).filter((key) => !known.has(key));
    if (wrong.length > 0)
      throw new InvalidArgument(
        `${file}: unknown config ${wrong.length === 1 ? 'key' : 'keys'} ${wrong.map((k) => `${section}.${k}`).join(', ')} (known in ${section}: ${[...known].join(', ')})`,
      );
  }
  // The store reads only `false` as false: `'false'` or `0` would keep durable commits without a word.
  const durable = (config as SluiceConfig).postgres?.durableCommits;
  if (durable !== undefined && typeof durable !== 'boolean')
    throw new InvalidArgument(
      `${file}: postgres.durableCommits must be true or false, not ${JSON.stringify(durable) ?? typeof durable}`,
    );
  return withPathsFrom(dirname(file), config as SluiceConfig);
}

/**
 * The config's relative paths (`db` when it names a SQLite file, `worker.tempRoot`) made
 * absolute from the file's folder: the file means the same files whatever folder a command runs
 * in (`sluice migrate --config /srv/app/sluice.config.ts` from anywhere, a unit whose working
 * folder is `/`). A URL, SQLite's own names and absolute paths are kept as written.
 */
function withPathsFrom(folder: string, config: SluiceConfig): SluiceConfig {
  const relative = (path: unknown): path is string =>
    typeof path === 'string' &&
    path !== '' &&
    path !== ':memory:' &&
    !path.startsWith('file:') &&
    urlScheme(path) === undefined &&
    !isAbsolute(path);
  const out = { ...config };
  if (relative(config.db)) out.db = resolve(folder, config.db);
  if (relative(config.worker?.tempRoot))
    out.worker = { ...config.worker, tempRoot: resolve(folder, config.worker.tempRoot) };
  return out;
}

/** Every key of `T`, listed: the compiler refuses a list that misses one or names one more. */
const keysOf = <T>(keys: Record<keyof T, true>): Set<string> => new Set(Object.keys(keys));

/** The keys of the config's sections whose keys are fixed, checked when a file is loaded. */
const SECTION_KEYS: Record<string, Set<string>> = {
  sqlite: keysOf<NonNullable<SluiceConfig['sqlite']>>({ synchronous: true }),
  postgres: keysOf<PostgresConfig>({
    schema: true,
    poolSize: true,
    pooler: true,
    listenUrl: true,
    durableCommits: true,
  }),
  http: keysOf<NonNullable<SluiceConfig['http']>>({
    host: true,
    port: true,
    bodyLimitBytes: true,
    metricsAuth: true,
    dashboard: true,
    maxRequestsPerTenant: true,
    maxListingsPerTenant: true,
    maxConnections: true,
    drainMs: true,
  }),
  auth: keysOf<NonNullable<SluiceConfig['auth']>>({ tenants: true, admin: true }),
  worker: keysOf<WorkerOptions>({
    slots: true,
    defaultSlots: true,
    leaseMs: true,
    heartbeatMs: true,
    pollIntervalMs: true,
    rescueIntervalMs: true,
    purgeIntervalMs: true,
    tempRoot: true,
    abortGraceMs: true,
    tempCheckMs: true,
    id: true,
  }),
  retention: keysOf<RetentionPolicy>({ terminalMs: true, tombstoneMs: true }),
  retryBudget: keysOf<RetryBudgetConfig>({
    ratio: true,
    floor: true,
    windowMs: true,
    bucketMs: true,
    deferMaxMs: true,
  }),
};

/**
 * The file's default export. Read from the module's namespace, not through jiti's default
 * interop, which hands back the named exports of a file without a default export (so their names
 * were reported as unknown config keys) and fails with a TypeError of its own on a default export
 * of `null`. A CommonJS file's `module.exports` is its default here.
 */
async function importDefault(file: string): Promise<unknown> {
  const { createJiti } = await import('jiti');
  const jiti = createJiti(import.meta.url, { interopDefault: false, moduleCache: false });
  const mod = await jiti.import<Record<string, unknown>>(file);
  if (!Object.hasOwn(mod, 'default')) {
    const named = Object.keys(mod);
    throw new InvalidArgument(
      `${file} must export a config object as its default export (it has none` +
        (named.length > 0 ? `; its named exports: ${named.join(', ')})` : ')'),
    );
  }
  return mod.default;
}

/** The keys of `SluiceConfig`, checked when a file is loaded. */
const CONFIG_KEYS = new Set<string>([
  'db',
  'sqlite',
  'postgres',
  'migrate',
  'http',
  'auth',
  'kinds',
  'setup',
  'classes',
  'tenants',
  'providers',
  'retryBudget',
  'retention',
  'maxLeaseExpiries',
  'effectKeyNamespace',
  'effectKey',
  'worker',
  'shutdownGraceMs',
] satisfies Array<keyof SluiceConfig>);

/** The config with the environment's overrides applied (see the module header). */
export function withEnvironment(config: SluiceConfig, env: NodeJS.ProcessEnv = process.env): SluiceConfig {
  const out: SluiceConfig = {
    ...config,
    http: { ...config.http },
    auth: { tenants: { ...config.auth?.tenants }, admin: [...(config.auth?.admin ?? [])] },
  };
  if (env.SLUICE_DB) out.db = env.SLUICE_DB;
  // Empty is unset, as shells mean it; anything else must be a port.
  if (env.PORT !== undefined && env.PORT !== '') out.http!.port = portFrom('PORT', env.PORT);
  if (env.HOST) out.http!.host = env.HOST;
  for (const pair of (env.SLUICE_TENANT_KEYS ?? '').split(',').filter(Boolean)) {
    const at = pair.indexOf(':');
    if (at <= 0) throw new InvalidArgument('SLUICE_TENANT_KEYS must be tenant:key pairs, comma-separated');
    const tenant = pair.slice(0, at);
    out.auth!.tenants![tenant] = [...(out.auth!.tenants![tenant] ?? []), pair.slice(at + 1)];
  }
  for (const key of (env.SLUICE_ADMIN_KEYS ?? '').split(',').filter(Boolean)) out.auth!.admin!.push(key);
  if (env.SLUICE_SHUTDOWN_GRACE_MS) out.shutdownGraceMs = Number(env.SLUICE_SHUTDOWN_GRACE_MS);
  return out;
}
