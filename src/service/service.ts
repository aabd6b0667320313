/**
 * @module service/service
 * `sluice serve`: the API, the workers, or both, in one process, from one configuration. Many
 * such processes may share a PostgreSQL store (API-only and worker-only processes scale apart).
 *
 * Shutdown (SIGTERM/SIGINT, or `stop()`): the API stops accepting work at once (submits get 503
 * with `Retry-After`, `/readyz` turns 503) while reads keep answering, for `http.drainMs` at least
 * (5 s; a load balancer's time to stop sending requests, which an API-only process would not
 * otherwise give it: it has no attempts to wait for); the worker stops claiming and gives running
 * attempts `shutdownGraceMs` to finish, then interrupts the rest, which go back to the queue
 * without using an attempt; then the server closes and the store is closed. SIGINT (Ctrl-C at a
 * terminal) does not drain. Nothing
 * is lost: an attempt that could not even be released keeps its lease until it expires and is
 * redelivered.
 */
import { BlockList, isIP } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { validateBudgets } from '../admission/budgets.js';
import { validateAdmission } from '../admission/limits.js';
import { assertMigrated, openStore } from '../cli/open-store.js';
import { type SluiceConfig, withEnvironment } from '../config/config.js';
import { logLevel } from '../config/inputs.js';
import { bounded, MAX_TIMER_MS } from '../core/bounds.js';
import { InvalidArgument } from '../core/errors/index.js';
import { sluiceLogger } from '../observability/logger.js';
import { createMetrics } from '../observability/metrics.js';
import { checkWorkerOptions, type Worker } from '../runtime/worker.js';
import { Sluice } from '../sluice.js';

export type Role = 'api' | 'worker' | 'all';

export interface ServiceOptions {
  role?: Role;
  /** Overrides the config's store. */
  db?: string;
  /**
   * The command that migrates this store, named when its schema is behind and `migrate` is
   * `'manual'` (`sluice serve` gives the one with its own `--db` and `--config`). Default:
   * `sluice migrate --db <db>`.
   */
  migrateCommand?: string;
  /**
   * The port to listen on, over the config's `http.port`. A worker-only process listens only when
   * given one: for its `/metrics`, `/healthz` and `/readyz`.
   */
  port?: number;
  host?: string;
  logger?: Logger;
}

export interface Service {
  sluice: Sluice;
  worker?: Worker;
  server?: FastifyInstance;
  /** The API's base URL, when this process serves it. */
  url?: string;
  /**
   * Graceful shutdown (see the module header). Safe to call twice. `drainMs` overrides the
   * config's `http.drainMs`; both are bounded by the grace.
   */
  stop(options?: { graceMs?: number; drainMs?: number }): Promise<void>;
}

/**
 * What `sluice serve` runs, from a config object: opens (and by default migrates) the store,
 * defines the kinds, then listens with the API and starts a worker, or one role of the two.
 * `stop()` drains as `SIGTERM` does.
 */
export async function startService(input: SluiceConfig, options: ServiceOptions = {}): Promise<Service> {
  const config = withEnvironment(input);
  // Checked before anything opens (a grace the shutdown's timer cannot wait would end at once).
  const shutdownGraceMs = bounded('shutdownGraceMs', config.shutdownGraceMs, 10_000, {
    min: 0,
    max: MAX_TIMER_MS,
  });
  const port = bounded('http.port', options.port ?? config.http?.port, 8080, {
    min: 0,
    max: 65_535,
    integer: true,
  });
  bounded('http.bodyLimitBytes', config.http?.bodyLimitBytes, 1, { min: 1, integer: true });
  const drainMs = bounded('http.drainMs', config.http?.drainMs, 5000, { min: 0, max: MAX_TIMER_MS });
  // The server checks these too; here, before the store is opened (and made, and migrated).
  const metricsAuth = config.http?.metricsAuth;
  if (metricsAuth !== undefined && metricsAuth !== 'none' && metricsAuth !== 'admin')
    throw new InvalidArgument(
      `http.metricsAuth must be 'none' or 'admin', not ${JSON.stringify(metricsAuth)}`,
    );
  const dashboard = config.http?.dashboard;
  if (dashboard !== undefined && typeof dashboard !== 'boolean')
    throw new InvalidArgument(`http.dashboard must be true or false, not ${JSON.stringify(dashboard)}`);
  for (const cap of ['maxRequestsPerTenant', 'maxListingsPerTenant'] as const)
    if (config.http?.[cap] !== false)
      bounded(`http.${cap}`, config.http?.[cap], 1, { min: 1, max: 1_000_000, integer: true });
  bounded('http.maxConnections', config.http?.maxConnections, 1, { min: 1, max: 1_000_000, integer: true });
  const role = options.role ?? 'all';
  // Anything but the two would read as 'manual', and refuse a store it could have migrated.
  if (config.migrate !== undefined && config.migrate !== 'auto' && config.migrate !== 'manual')
    throw new InvalidArgument(`migrate must be 'auto' or 'manual', not ${JSON.stringify(config.migrate)}`);
  if (role !== 'api') checkWorkerOptions(config.worker ?? {});
  // The engine checks these too, once the store is open: a mistake is better found before.
  validateAdmission({ classes: config.classes, tenants: config.tenants });
  validateBudgets(config.providers ?? {});
  const log = options.logger ?? sluiceLogger(logLevel('info'));
  const store = await openStore(options.db ?? config.db, {
    sqlite: config.sqlite,
    postgres: config.postgres,
  });
  const sluice = new Sluice({
    store,
    logger: log,
    classes: config.classes,
    tenants: config.tenants,
    providers: config.providers,
    retryBudget: config.retryBudget,
    retention: config.retention,
    maxLeaseExpiries: config.maxLeaseExpiries,
    effectKey: config.effectKey,
    effectKeyNamespace: config.effectKeyNamespace,
  });
  if ((config.migrate ?? 'auto') === 'auto') await sluice.migrate();
  else {
    // Left to `sluice migrate`, an old schema would surface as failed requests instead.
    try {
      await assertMigrated(store, options.db ?? config.db, { migrate: options.migrateCommand });
    } catch (error) {
      await sluice.close();
      throw error;
    }
  }
  for (const [name, kind] of Object.entries(config.kinds ?? {})) sluice.define(name, kind);
  await config.setup?.(sluice);
  if (role === 'worker' && sluice.definedKinds().length === 0) {
    // It would have no class to claim for, and the process would end at once, reported running.
    await sluice.close();
    throw new InvalidArgument(
      'a worker needs kinds to run: the config defines none (`kinds`, or `setup` calling sluice.define)',
    );
  }

  if (role !== 'worker' && sluice.definedKinds().length === 0) {
    // An API without kinds answers every submit `kind-unknown`: a config file not found (or not
    // the one meant) would otherwise show only in the clients' refusals.
    log.warn(
      'no kinds are defined: every submit will be refused as kind-unknown (a config file defines them in `kinds`, or in `setup` with sluice.define)',
    );
  }

  let accepting = true;
  let worker: Worker | undefined;
  let server: FastifyInstance | undefined;
  let url: string | undefined;
  // The API first, the worker once it listens: a start that fails (the port taken, a bad host,
  // an option only the server checks) must not have claimed work, nor run it, before it exits.
  // A worker-only process listens only when given a port of its own (`serve --port`): then for
  // its `/metrics`, `/healthz` and `/readyz`, no API. The config's `http.port` is the API's.
  const serves = role === 'api' || role === 'all' || options.port !== undefined;
  if (serves) {
    try {
      ({ server, url } = await listen());
    } catch (error) {
      await server?.close().catch(() => {});
      await sluice.close();
      throw error;
    }
  }
  if (role === 'worker' || role === 'all') {
    worker = sluice.worker(config.worker);
    worker.start();
  }
  log.info({ role, url, store: store.dialect }, 'sluice is running');

  async function listen(): Promise<{ server: FastifyInstance; url: string }> {
    const { buildServer } = await import('../http/server.js');
    const built = await buildServer({
      sluice,
      auth: { tenants: config.auth?.tenants ?? {}, admin: config.auth?.admin ?? [] },
      bodyLimitBytes: config.http?.bodyLimitBytes,
      metricsAuth: config.http?.metricsAuth,
      dashboard: config.http?.dashboard,
      maxRequestsPerTenant: config.http?.maxRequestsPerTenant,
      maxListingsPerTenant: config.http?.maxListingsPerTenant,
      maxConnections: config.http?.maxConnections,
      // The retry-budget gauges report over the window the budget itself uses.
      metrics: createMetrics({
        retryBudgetWindowMs: config.retryBudget === false ? undefined : config.retryBudget?.windowMs,
      }),
      logger: log,
      accepting: () => accepting,
      workers: () => (worker ? [worker] : []),
      api: role !== 'worker',
    });
    server = built;
    const host = options.host ?? config.http?.host ?? '127.0.0.1';
    const listening = await built.listen({ port, host });
    // The gauges name tenants and what each spends; the default serves them to anyone who can
    // reach the port, which is right on loopback or a private scrape network and wrong elsewhere.
    if ((config.http?.metricsAuth ?? 'none') === 'none' && !isLoopback(host)) {
      log.warn(
        { url: listening },
        "GET /metrics answers without a key on this address, and its gauges name tenants and their spend: keep the port private, or set http.metricsAuth: 'admin' (Prometheus can send an admin key as a bearer token)",
      );
    }
    return { server: built, url: listening };
  }

  let stopping: Promise<void> | undefined;
  const stop = (o: { graceMs?: number; drainMs?: number } = {}) => {
    stopping ??= (async () => {
      accepting = false;
      const graceMs = o.graceMs ?? shutdownGraceMs;
      // The port stays open meanwhile, answering 503 to new work and to `/readyz`: a process
      // that closed at once would meet the load balancer's next requests with refused connections.
      // (A worker's port serves only its metrics and health: no traffic to drain.)
      const drain = server && role !== 'worker' ? Math.min(o.drainMs ?? drainMs, graceMs) : 0;
      log.info({ graceMs, drainMs: drain }, 'shutting down: no new work accepted');
      await Promise.all([worker?.stop({ graceMs }), drain > 0 ? sleep(drain) : undefined]);
      await server?.close();
      await sluice.close({ graceMs });
      log.info('stopped');
    })();
    return stopping;
  };
  return { sluice, worker, server, url, stop };
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/**
 * Whether an address to listen on is reachable from this machine only: `localhost`, 127.0.0.0/8,
 * `::1` in any spelling, and IPv4-mapped 127.x. Anything else (`0.0.0.0`, `::`, a host name) may
 * be reachable from a network.
 */
export function isLoopback(host: string): boolean {
  const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  if (bare.toLowerCase() === 'localhost') return true;
  const family = isIP(bare);
  return family !== 0 && LOOPBACK.check(bare, family === 4 ? 'ipv4' : 'ipv6');
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The process's warnings (the PostgreSQL store's autovacuum check, Node's own deprecations) as
 * records of the service's log, for a process the service owns (`sluice serve`, `sluice demo`).
 * Node writes a warning to standard error as a line of plain text, in a stream of JSON records
 * that log collectors parse line by line; its printing listener is taken off, so that each
 * warning is said once, as a record.
 */
export function logWarningsTo(log: Logger): void {
  process.removeAllListeners('warning');
  process.on('warning', (warning: Error & { code?: string }) => {
    log.warn({ warning: { name: warning.name, code: warning.code ?? null } }, warning.message);
  });
}

/** Stops the service gracefully on SIGTERM or SIGINT, then exits. A second signal exits at once. */
export function stopOnSignals(service: Service, log: Logger, graceMs?: number): void {
  let signalled = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (signalled) process.exit(1);
    signalled = true;
    log.info({ signal }, 'signal received');
    // Ctrl-C at a terminal: no load balancer to wait for.
    service.stop(signal === 'SIGINT' ? { graceMs, drainMs: 0 } : { graceMs }).then(
      () => {
        // Not a clean stop: the store did not take some ends; their operations wait for their
        // leases to expire, then run again elsewhere.
        const unwritten = service.worker?.unwrittenEnds ?? 0;
        if (unwritten > 0) {
          log.error({ unwritten }, 'stopped with attempts whose end the store did not take');
          process.exit(1);
        }
        process.exit(0);
      },
      (error) => {
        log.error({ err: error }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}
