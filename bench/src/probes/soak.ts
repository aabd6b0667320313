/**
 * @module bench/probes/soak
 * Whether a long-running process grows with the keys it has seen. One engine with a worker (and,
 * with `--http`, the HTTP API in front of it) runs chunk after chunk of operations, each chunk on
 * keys no earlier chunk used: tenants, operation ids, per-tenant budget keys (every operation
 * draws on its tenant's spend and call budgets), retries, cancels, submits of kinds that are not
 * defined, and work of classes this process does not serve, put in by another connection (a
 * process with other kinds, as in a rolling deploy). After each chunk it waits for the worker to
 * go idle, scrapes the metrics, forces two full collections and samples the heap, the RSS, the
 * handles and requests Node holds (`process.getActiveResourcesInfo()`), the metric series and,
 * on PostgreSQL, the store's connections to the server. With `--kills`, each chunk also ends
 * every server connection of the store (`pg_terminate_backend`) that many times, while work runs:
 * the pool and the LISTEN connection must come back to what they were, not pile up.
 *
 * What grows with the keys is a leak; the first chunk is warm-up (compiled code, pools, caches
 * keyed by fixed sets). The last line gives the growth per key from the first sample to the last.
 * Each sample also counts the store's rows that are kept per tenant: queue rows and budget
 * windows. With `--retention-ms`, each sample first purges what finished longer ago than that
 * (`sluice.purgeExpired()`, as the workers do every minute), so those counts show what a
 * long-running store keeps for tenants that have gone.
 *
 *   node --expose-gc dist/probes/soak.js [--store sqlite|pg] [--keys 40000] [--chunks 10] [--kills 0] [--http]
 *                                        [--retention-ms N]
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { Store } from 'sluice';
import { pg } from '../lib/drivers.js';
import { databaseUrl, freshSchema, loadSluice, pgOptions } from './load.js';

const { values } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    keys: { type: 'string', default: '40000' },
    chunks: { type: 'string', default: '10' },
    kills: { type: 'string', default: '0' },
    http: { type: 'boolean', default: false },
    'retention-ms': { type: 'string' },
  },
});
const retentionMs = values['retention-ms'] === undefined ? undefined : Number(values['retention-ms']);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with node --expose-gc');
const onPg = values.store === 'pg';
const keys = Number(values.keys);
const chunks = Number(values.chunks);
const perChunk = Math.ceil(keys / chunks);
const kills = Number(values.kills);

const { sluice: S } = await loadSluice();
const service = await import('sluice/service');
const schema = freshSchema('soak');
const sqlitePath = join(mkdtempSync(join(tmpdir(), 'soak-')), 'sluice.db');
const openStore = (poolSize?: number): Store =>
  onPg
    ? S.postgresStore({ ...pgOptions(), schema, ...(poolSize === undefined ? {} : { poolSize }) })
    : S.sqliteStore({ path: sqlitePath });

const store = openStore();
const engine = new S.Sluice({
  store,
  ...(retentionMs === undefined ? {} : { retention: { terminalMs: retentionMs, tombstoneMs: retentionMs } }),
  providers: {
    pay: {
      // Short windows: the spend gauge reports each tenant with spend in the current window, and
      // a tenant of an earlier chunk must have left it by the next sample.
      perTenant: { limit: 1_000_000, windowMs: 1000 },
      ratePerTenant: { limit: 1000, windowMs: 1000 },
    },
  },
});
await engine.migrate();
const any = {
  '~standard': { version: 1 as const, vendor: 'soak', validate: (value: unknown) => ({ value }) },
};
engine.define('soak.work', {
  input: any,
  class: 'soak',
  limits: { backoff: { baseMs: 1, capMs: 5 } },
  async run(input, ctx) {
    const { i } = input as { i: number };
    await ctx.effect('charge', {
      provider: 'pay',
      cost: 1,
      call: async ({ key }) => ({ key }),
      retentionMs: 3_600_000,
    });
    // Every tenth operation fails its first attempt: a retry, a due wake, the retry budget.
    if (i % 10 === 0 && ctx.attempt === 1) throw new S.Retryable('first attempt of a tenth');
    return { i };
  },
});
const worker = engine.worker({ slots: { soak: 64 }, pollIntervalMs: 200 });
worker.start();
const metrics = service.createMetrics();
// Another process's connection: operations of classes this process has no kind for.
const foreign = openStore(2);

/** The API in front of the engine, one key per tenant (made up front: part of the baseline). */
let api: { url: string; close(): Promise<void> } | undefined;
if (values.http) {
  const tenants: Record<string, string[]> = {};
  for (let i = 0; i < keys; i++) tenants[`t${i}`] = [`key-t${i}`];
  const app = await service.buildServer({
    sluice: engine,
    auth: { tenants, admin: ['admin-key'] },
    metrics,
    workers: () => [worker],
  });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  api = { url, close: () => app.close() };
} else metrics.bind({ sluice: engine, workers: () => [worker] });

const admin = onPg ? new pg.Client({ connectionString: databaseUrl() }) : undefined;
await admin?.connect();
/** The store's connections to the server: its pool's and its LISTEN connection. */
async function backends(): Promise<{ pool: number; listen: number }> {
  if (!admin) return { pool: 0, listen: 0 };
  const { rows } = await admin.query<{ app: string; n: string }>(
    `SELECT application_name AS app, count(*) AS n FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1`,
  );
  const n = (app: string) => Number(rows.find((r) => r.app === app)?.n ?? 0);
  return { pool: n('sluice'), listen: n('sluice-listen') };
}
async function killBackends(): Promise<number> {
  const { rows } = await admin!.query(
    `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
      WHERE datname = current_database() AND pid <> pg_backend_pid()
        AND application_name IN ('sluice', 'sluice-listen')`,
  );
  return rows.length;
}

async function submit(tenant: string, id: string, kind: string, input: unknown, delayMs?: number) {
  if (!api) return engine.submit({ tenant, id, kind, input, ...(delayMs ? { delayMs } : {}) });
  const res = await fetch(`${api.url}/v1/operations`, {
    method: 'POST',
    headers: {
      authorization: `Bearer key-${tenant}`,
      'idempotency-key': id,
      'content-type': 'application/json',
    },
    body: JSON.stringify({ kind, input, ...(delayMs ? { delayMs } : {}) }),
  });
  await res.arrayBuffer();
  return res.status;
}

/** One key's work: an operation run to its end, and on some keys a cancel or a refused submit. */
async function oneKey(i: number): Promise<void> {
  const tenant = `t${i}`;
  await submit(tenant, `o${i}`, 'soak.work', { i });
  if (i % 7 === 0) {
    await submit(tenant, `late${i}`, 'soak.work', { i: -1 }, 600_000);
    if (api) {
      const res = await fetch(`${api.url}/v1/operations/late${i}/cancel`, {
        method: 'POST',
        headers: { authorization: `Bearer key-${tenant}` },
      });
      await res.arrayBuffer();
    } else await engine.cancel({ tenant, id: `late${i}` });
  }
  if (i % 5 === 0) await submit(tenant, `x${i}`, `gone.kind${i}`, {}).catch(() => {});
  if (api && i % 3 === 0) await (await fetch(`${api.url}/nowhere/${i}`)).arrayBuffer();
  await engine.wait({ tenant, id: `o${i}` }, { timeoutMs: 120_000, pollMs: 1000 });
}

async function foreignClasses(from: number, n: number): Promise<void> {
  const items = Array.from({ length: n }, (_, k) => ({
    tenant: 'elsewhere',
    id: `f${from + k}`,
    kind: `other.kind${from + k}`,
    class: `other${from + k}`,
    digest: `d${from + k}`,
    inputJson: '{}',
    maxAttempts: 1,
    deadlineMs: null,
  }));
  for (let k = 0; k < items.length; k += 200)
    await retrying(() => foreign.operationSubmitMany(items.slice(k, k + 200)));
  // Then that process's own cancels: the classes hold no work any more, as after a deploy that
  // retired them.
  for (const item of items)
    await retrying(() => foreign.operationCancel({ tenant: item.tenant, id: item.id }));
}

async function seriesCount(): Promise<number> {
  return (await metrics.scrape()).split('\n').filter((l) => l !== '' && !l.startsWith('#')).length;
}

interface Sample {
  keys: number;
  heapMb: number;
  rssMb: number;
  resources: number;
  series: number;
  pool: number;
  listen: number;
  queueRows: number;
  budgetRows: number;
  seconds: number;
}
const started = performance.now();
async function sample(done: number): Promise<Sample> {
  await worker.idle();
  // The last chunk's tenants leave their budget windows.
  await new Promise((r) => setTimeout(r, 1100));
  if (retentionMs !== undefined) await retrying(() => engine.purgeExpired());
  const series = await retrying(seriesCount);
  const b = await backends();
  const queueRows = (await retrying(() => store.queueStats())).length;
  const budgetRows = (await retrying(() => store.budgetUsage({ since: 0 }))).length;
  for (let k = 0; k < 3; k++) {
    gc!();
    await new Promise((r) => setImmediate(r));
  }
  const m = process.memoryUsage();
  return {
    keys: done,
    heapMb: m.heapUsed / 2 ** 20,
    rssMb: m.rss / 2 ** 20,
    resources: process.getActiveResourcesInfo().length,
    series,
    ...b,
    queueRows,
    budgetRows,
    seconds: (performance.now() - started) / 1000,
  };
}

const samples: Sample[] = [];
const print = (s: Sample) =>
  console.log(
    [
      `keys ${String(s.keys).padStart(6)}`,
      `heap ${s.heapMb.toFixed(1).padStart(6)} MB`,
      `rss ${s.rssMb.toFixed(0).padStart(4)} MB`,
      `resources ${String(s.resources).padStart(3)}`,
      `series ${String(s.series).padStart(4)}`,
      ...(onPg ? [`pool ${s.pool}`, `listen ${s.listen}`] : []),
      `queue rows ${String(s.queueRows).padStart(6)}`,
      `budget windows ${String(s.budgetRows).padStart(6)}`,
      `${s.seconds.toFixed(0)} s`,
    ].join('  '),
  );
console.log(
  `soak: ${values.store}, ${keys} keys in ${chunks} chunks${values.http ? ', over HTTP' : ''}` +
    (kills ? `, ${kills} connection kills a chunk` : '') +
    (retentionMs === undefined ? '' : `, retention ${retentionMs} ms`),
);
for (let c = 0; c < chunks; c++) {
  const from = c * perChunk;
  const killing = (async () => {
    for (let k = 0; k < kills; k++) {
      await new Promise((r) => setTimeout(r, 300));
      await killBackends();
    }
  })();
  await foreignClasses(from, Math.ceil(perChunk / 10));
  for (let i = from; i < from + perChunk; i += 100) {
    const batch = Array.from({ length: Math.min(100, from + perChunk - i) }, (_, k) => i + k);
    // A kill fails what is in flight: what a client does then is send it again.
    await Promise.all(batch.map((n) => retrying(() => oneKey(n))));
  }
  await killing;
  const s = await sample(from + perChunk);
  samples.push(s);
  print(s);
}

async function retrying<T>(fn: () => Promise<T>): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (error) {
      if (i >= 20) throw error;
      await new Promise((r) => setTimeout(r, 100 * (i + 1)));
    }
  }
}

const first = samples[0]!;
const last = samples[samples.length - 1]!;
const span = last.keys - first.keys;
console.log(
  `from ${first.keys} to ${last.keys} keys: heap ${(((last.heapMb - first.heapMb) * 2 ** 20) / span).toFixed(0)} bytes a key, ` +
    `rss ${(((last.rssMb - first.rssMb) * 2 ** 20) / span).toFixed(0)}, resources ${last.resources - first.resources}, ` +
    `series ${last.series - first.series}`,
);
await api?.close();
await worker.stop();
await foreign.close();
await engine.close();
await admin?.end();
