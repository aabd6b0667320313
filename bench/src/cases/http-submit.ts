/**
 * @module bench/cases/http-submit
 * Submit over HTTP against the same submit through the library, in one case run.
 *
 * - HTTP: `sluice serve --role api` in a child process (api-server.ts: `startService`, no
 *   worker) on a store of its own; autocannon in this process sends
 *   `POST /v1/operations` over 32 keep-alive connections, one request in flight on each, every
 *   request with a tenant's bearer key and an `Idempotency-Key` of its own. Every answer must be
 *   202 (accepted, durable): any other status, or a request with no answer, fails the run.
 * - Library: 32 concurrent callers of `sluice.submit` in this process, an engine on a store of
 *   its own (as the API's request handlers call it, minus HTTP).
 *
 * Both sides run with default settings but for the per-tenant cap on waiting operations, lifted
 * (NO_WAITING_CAP).
 *
 * Both sides are warmed up first, then timed in the order library, HTTP, HTTP, library, the same
 * number of operations each time: a drift of the shared machine during the run, or the tables
 * growing, weighs on both alike. Each side's figure is its operations over its two phases' time.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { ApiServerSpec } from '../api-server.js';
import { startServer, tail } from '../lib/child.js';
import { CostWindow } from '../lib/cost-window.js';
import { openSluice, PLAIN_KIND } from '../lib/engine.js';
import { percentile, sendMany } from '../lib/http-load.js';
import { databaseOf, PgObserver } from '../lib/pg-admin.js';
import { inputOf, submitRange, tenantName } from '../lib/submitters.js';
import { dbOf, storeOf, targetFor } from '../lib/targets.js';
import type { CaseResult, CaseSpec } from './types.js';

const HTTP_CLIENTS = 32;

/**
 * Nothing processes what is submitted here, so the default cap of 10,000 operations waiting per
 * tenant would refuse the run's 11,000 with one tenant: both sides lift it, nothing else.
 */
const NO_WAITING_CAP = { default: { tenant: { maxWaiting: null } } };

export async function httpSubmit(spec: CaseSpec): Promise<CaseResult> {
  const store = storeOf(spec);
  const perPhase = spec.ops ?? (spec.quick ? 1000 : 5000);
  const warm = spec.quick ? 200 : 1000;
  const tenants = spec.tenants;
  const names = Array.from({ length: tenants }, (_, i) => tenantName(i, tenants));
  const keys = Object.fromEntries(names.map((t) => [t, `bench-${t}-${randomBytes(12).toString('hex')}`]));
  const observer =
    store === 'pg' ? await PgObserver.open(spec.serverUrl, databaseOf(spec.databaseUrl)) : undefined;
  const lib = openSluice(targetFor(spec, 'lib'), undefined, { classes: NO_WAITING_CAP });
  const apiTarget = targetFor(spec, 'api');
  const logFile = join(spec.dir, 'api.log');
  const server = await startServer(
    'api-server.js',
    {
      db: dbOf(apiTarget),
      schema: apiTarget.schema,
      keys: Object.fromEntries(Object.entries(keys).map(([t, k]) => [t, [k]])),
      classes: NO_WAITING_CAP,
    } satisfies ApiServerSpec,
    logFile,
  );
  try {
    await lib.sluice.migrate();
    const request = (i: number) => {
      const tenant = tenantName(i, tenants);
      return {
        method: 'POST',
        path: '/v1/operations',
        headers: {
          authorization: `Bearer ${keys[tenant]}`,
          'content-type': 'application/json',
          'idempotency-key': `h${i}`,
        },
        body: JSON.stringify({ kind: PLAIN_KIND, input: inputOf(i) }),
      };
    };
    const statuses = new Map<number, number>();
    let unanswered = 0;
    const http = async (from: number, count: number, latenciesMs?: number[]) => {
      const r = await sendMany({
        url: server.url,
        connections: HTTP_CLIENTS,
        amount: count,
        request: (i) => request(from + i),
      });
      for (const [s, n] of r.statuses) statuses.set(s, (statuses.get(s) ?? 0) + n);
      unanswered += r.errors;
      latenciesMs?.push(...r.latenciesMs);
    };

    // Warm-up: both sides' code paths, connections and plans, untimed; ids below `warm`.
    await submitRange(lib.sluice, { prefix: 'l', from: 0, count: warm, tenants, callers: HTTP_CLIENTS });
    await http(0, warm);

    const libWindow = new CostWindow({ observer, counts: () => lib.counts });
    const httpWindow = new CostWindow({ observer, pid: server.pid, counts: () => server.calls() });
    const libMs: number[] = [];
    const httpMs: number[] = [];
    let from = warm;
    for (const side of ['lib', 'http', 'http', 'lib'] as const) {
      if (side === 'lib') {
        await libWindow.start();
        await submitRange(lib.sluice, {
          prefix: 'l',
          from,
          count: perPhase,
          tenants,
          callers: HTTP_CLIENTS,
          latenciesMs: libMs,
        });
        await libWindow.stop();
      } else {
        await httpWindow.start();
        await http(from, perPhase, httpMs);
        await httpWindow.stop();
      }
      from += perPhase;
    }

    const n = 2 * perPhase;
    const accepted = statuses.get(202) ?? 0;
    const non202 = [...statuses].filter(([s]) => s !== 202).reduce((sum, [, c]) => sum + c, 0) + unanswered;
    if (non202 > 0 || accepted !== n + warm) {
      throw new Error(
        `HTTP submit: ${accepted} of ${n + warm} requests answered 202; statuses ${JSON.stringify(Object.fromEntries(statuses))}, ` +
          `${unanswered} without an answer\n${tail(logFile)}`,
      );
    }
    return {
      figures: { http: n / httpWindow.seconds, lib: n / libWindow.seconds },
      perOp: { ...libWindow.perOp(n, 'lib'), ...httpWindow.perOp(n, 'http') },
      info: {
        n,
        clients: HTTP_CLIENTS,
        tenants,
        non202,
        httpP50Ms: percentile(httpMs, 50),
        httpP99Ms: percentile(httpMs, 99),
        libP50Ms: percentile(libMs, 50),
        libP99Ms: percentile(libMs, 99),
        httpSeconds: httpWindow.seconds,
        libSeconds: libWindow.seconds,
      },
    };
  } finally {
    await server.stop();
    await lib.sluice.close();
    await observer?.close();
  }
}
