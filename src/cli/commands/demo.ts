/**
 * @module cli/commands/demo
 * `sluice demo`: the payments demo as a running service (API, workers, the provider stub), on the
 * embedded SQLite default with zero set-up; `sluice demo story` prints the seed's O7 story,
 * scripted.
 */
import type { Command } from 'commander';
import pino from 'pino';
import { logLevel, portFrom } from '../../config/inputs.js';
import { DEMO_KEYS, paymentsConfig } from '../../demo/payments.js';
import { runStory } from '../../demo/story.js';
import { startService, stopOnSignals } from '../../service/service.js';
import { startProviderServer } from '../../testing/provider-server.js';
import { redact } from '../open-store.js';

export function demoCommand(program: Command): void {
  const demo = program
    .command('demo')
    .description('run the payments demo: API on 127.0.0.1:8080 ($PORT), provider stub on :8081 ($STUB_PORT)')
    .action(async () => {
      const log = pino({ name: 'sluice', level: logLevel('info') }, pino.destination(2));
      const stub = await startProviderServer({
        port: portFrom('STUB_PORT', process.env.STUB_PORT ?? '8081'),
      });
      const service = await startService(paymentsConfig(stub.url), { logger: log });
      const api = service.url!;
      console.log(`
Sluice payments demo
  API            ${api}   (store: ${redact(process.env.SLUICE_DB ?? './data/sluice.db')})
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
      const stop = async (o?: { graceMs?: number; drainMs?: number }) => {
        await service.stop(o);
        await stub.close();
      };
      stopOnSignals({ ...service, stop }, log);
    });
  demo
    .command('story')
    .description("print the seed's O7 story step by step on ./data/demo.db and an HTTP provider stub")
    .option('--dir <folder>', 'where the demo database lives', './data')
    .action(async (opts: { dir: string }) => {
      await runStory(opts.dir);
    });
}
