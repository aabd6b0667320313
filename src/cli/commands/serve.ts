/**
 * @module cli/commands/serve
 * `sluice serve`: the API and/or workers from a config file (see config/config.ts).
 */
import type { Command } from 'commander';
import { loadConfig } from '../../config/config.js';
import { logLevel, portFrom } from '../../config/inputs.js';
import { InvalidArgument } from '../../core/errors/index.js';
import { sluiceLogger } from '../../observability/logger.js';
import { logWarningsTo, type Role, startService, stopOnSignals } from '../../service/service.js';
import { migrateCommand } from '../open-store.js';

export function serveCommand(program: Command): void {
  program
    .command('serve')
    .description('run the HTTP API and workers (or one role) from a config file')
    .option(
      '--config <file>',
      'sluice.config.ts / .mjs / .js (default: the first found in the current folder)',
    )
    // Each flag beats its variable, which beats the config (config.ts's withEnvironment).
    .option(
      '--db <sqlite-path|postgres-url>',
      "the store (default: $SLUICE_DB, else the config's db, else ./data/sluice.db)",
    )
    .option(
      '--port <port>',
      "API port (default: $PORT, else the config's http.port, else 8080); with --role worker, the port of its /metrics, /healthz and /readyz (none without it)",
    )
    .option('--host <host>', "API address (default: $HOST, else the config's http.host, else 127.0.0.1)")
    .option('--role <role>', 'api, worker or all', 'all')
    .action(async (opts: { config?: string; db?: string; port?: string; host?: string; role: string }) => {
      if (!['api', 'worker', 'all'].includes(opts.role))
        throw new InvalidArgument(`--role must be api, worker or all, not ${JSON.stringify(opts.role)}`);
      const log = sluiceLogger(logLevel('info'));
      logWarningsTo(log);
      const config = await loadConfig(opts.config);
      const service = await startService(config, {
        role: opts.role as Role,
        db: opts.db,
        // The store's config schema is the config's: `--db` alone would migrate the default one.
        migrateCommand: migrateCommand({ db: opts.db, config: opts.config }),
        port: opts.port === undefined ? undefined : portFrom('--port', opts.port),
        host: opts.host,
        logger: log,
      });
      if (service.url && opts.role === 'worker')
        console.log(`sluice worker: metrics on ${service.url}/metrics`);
      else if (service.url) console.log(`sluice ${opts.role}: API on ${service.url}`);
      else console.log(`sluice ${opts.role}: running`);
      stopOnSignals(service, log);
    });
}
