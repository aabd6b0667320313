/**
 * @module cli/commands/demo
 * `sluice demo`: the payments demo as a running service (API, workers, the provider stub), on the
 * embedded SQLite default with zero set-up; `sluice demo story` prints the seed's O7 story,
 * scripted.
 *
 * Its keys are published (in the README and at start), an admin key among them, so it listens
 * only where no one else can reach it: a `HOST` beyond loopback is refused, pointing at `sluice
 * serve` with keys of one's own, unless `--public` says so on purpose, which is then warned about
 * in the log and on the terminal.
 */
import type { Command } from 'commander';
import { withEnvironment } from '../../config/config.js';
import { logLevel, portFrom } from '../../config/inputs.js';
import { InvalidArgument } from '../../core/errors/index.js';
import { DEMO_KEYS, paymentsConfig } from '../../demo/payments.js';
import { runStory } from '../../demo/story.js';
import { sluiceLogger } from '../../observability/logger.js';
import { isLoopback, logWarningsTo, startService, stopOnSignals } from '../../service/service.js';
import { startProviderServer } from '../../testing/provider-server.js';
import { redact } from '../open-store.js';

export function demoCommand(program: Command): void {
  const demo = program
    .command('demo')
    .description('run the payments demo: API on 127.0.0.1:8080 ($PORT), provider stub on :8081 ($STUB_PORT)')
    .option(
      '--public',
      'listen on a $HOST beyond loopback, published demo keys and all (never on a shared network)',
    )
    .action(async (opts: { public?: boolean }) => {
      const log = sluiceLogger(logLevel('info'));
      logWarningsTo(log);
      // The address the service will take: the demo's own, unless $HOST names another.
      const host = withEnvironment(paymentsConfig('http://127.0.0.1')).http?.host ?? '127.0.0.1';
      if (!isLoopback(host) && !opts.public) {
        throw new InvalidArgument(
          `the demo serves published keys (an admin key among them) and listens on loopback only, not on HOST=${host}: ` +
            'to serve on a network, run `sluice serve` with keys of your own (`sluice keys new`); ' +
            '`sluice demo --public` exposes the demo anyway',
        );
      }
      const exposed = !isLoopback(host);
      const stub = await startProviderServer({
        port: portFrom('STUB_PORT', process.env.STUB_PORT ?? '8081'),
      });
      const service = await startService(paymentsConfig(stub.url), { logger: log });
      const api = service.url!;
      const stop = async (o?: { graceMs?: number; drainMs?: number }) => {
        await service.stop(o);
        await stub.close();
      };
      // Before anything is printed: whoever reads the banner may stop the demo at once.
      stopOnSignals({ ...service, stop }, log);
      if (exposed) {
        log.warn(
          { url: api },
          'the demo is listening beyond loopback with its published keys: anyone who can reach it can act as any demo tenant, and as an admin',
        );
      }
      console.log(`
Sluice payments demo
  API            ${api}   (store: ${redact(process.env.SLUICE_DB ?? './data/sluice.db')})
  dashboard      ${api}/dashboard   (sign in with a key below)
  provider stub  ${stub.url}   ledger: GET /ledger   failures: POST /control
  keys (DEMO ONLY — never use these anywhere else):
    north  ${DEMO_KEYS.north}     south  ${DEMO_KEYS.south}     admin  ${DEMO_KEYS.admin}

  curl -s -X POST ${api}/v1/operations -H 'Authorization: Bearer ${DEMO_KEYS.north}' \\
       -H 'Idempotency-Key: O7' -H 'Content-Type: application/json' \\
       -d '{"kind":"charge","input":{"invoice":7,"amount_cents":5000}}'
  curl -s ${api}/v1/operations/O7 -H 'Authorization: Bearer ${DEMO_KEYS.north}'
  curl -s ${stub.url}/ledger

  The README walks through the seed's O7 story with these commands. Ctrl-C stops.
`);
      if (exposed)
        console.error(`
  !!! PUBLIC: the demo listens on ${host}, beyond loopback, with the published keys above.
  !!! Anyone who reaches ${api} can submit, read and cancel as north or south, and, with the
  !!! admin key, read, redrive and reconcile every tenant's operations. Stop it (Ctrl-C)
  !!! unless this network is yours alone; serve real traffic with \`sluice serve\` and keys of
  !!! your own.
`);
    });
  demo
    .command('story')
    .description("print the seed's O7 story step by step on ./data/demo.db and an HTTP provider stub")
    .option('--dir <folder>', 'where the demo database lives', './data')
    .action(async (opts: { dir: string }) => {
      await runStory(opts.dir);
    });
}
