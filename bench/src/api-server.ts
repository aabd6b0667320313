/**
 * @module bench/api-server
 * `sluice serve --role api`, in a process of its own, for the http-submit case: the service that
 * `startService` builds (the function `sluice serve` calls), from a config object rather than a
 * config file, with the bench's plain kind, one API key per tenant and the case's admission
 * classes. No worker runs in it. The logger is the service's default (level info: one line per
 * request) on stderr, which the case sends to a file. Prints `@@url <base url>` once it listens;
 * SIGTERM stops it gracefully.
 *
 * The only addition is the bench's count of store calls by method (lib/engine.ts): `startService`
 * opens the store itself, so its methods are wrapped in place once the engine exists (the engine
 * looks them up on every call). SIGUSR2 prints the counts so far as `@@calls <json>`.
 *
 *   node dist/api-server.js '<ApiServerSpec as JSON>'
 */
import type { Sluice, SluiceConfig } from 'sluice';
import { startService } from 'sluice/service';
import { CallCounts, chargeInput, PLAIN_KIND } from './lib/engine.js';

export interface ApiServerSpec {
  /** A SQLite file or a `postgres://` URL. */
  db: string;
  /** PostgreSQL: the case run's schema. */
  schema?: string;
  /** API keys by tenant. */
  keys: Record<string, string[]>;
  /** Workload classes (admission), as in the config file. */
  classes?: SluiceConfig['classes'];
}

const counts = new CallCounts();

function countCalls(sluice: Sluice): void {
  const store = sluice.store as unknown as Record<string, unknown>;
  for (const [name, fn] of Object.entries(store)) {
    if (typeof fn !== 'function') continue;
    store[name] = (...args: unknown[]) => {
      counts.add(name);
      const t0 = performance.now();
      const out = (fn as (...a: unknown[]) => unknown).apply(store, args);
      if (out instanceof Promise) {
        const done = () => counts.addTime(name, performance.now() - t0);
        void out.then(done, done);
      }
      return out;
    };
  }
}

const spec = JSON.parse(process.argv[2] ?? '{}') as ApiServerSpec;
const service = await startService(
  {
    db: spec.db,
    ...(spec.schema === undefined ? {} : { postgres: { schema: spec.schema } }),
    kinds: { [PLAIN_KIND]: { input: chargeInput, run: () => undefined } },
    auth: { tenants: spec.keys },
    ...(spec.classes === undefined ? {} : { classes: spec.classes }),
    setup: countCalls,
  },
  { role: 'api', port: 0, host: '127.0.0.1' },
);
let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  service.stop({ graceMs: 1000 }).then(
    () => process.exit(0),
    (error) => {
      console.error(error);
      process.exit(1);
    },
  );
};
process.on('SIGUSR2', () => {
  const calls = { byMethod: [...counts.byMethod], msByMethod: [...counts.msByMethod] };
  process.stdout.write(`@@calls ${JSON.stringify(calls)}\n`);
});
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdout.write(`@@url ${service.url}\n`);
