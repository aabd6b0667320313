/**
 * @module bench/backlog-worker
 * The worker of the backlog case, in a process of its own so that its memory is the worker's
 * alone (the process that built the backlog held a million submits' garbage). An engine and
 * `sluice.worker()` with default settings start on a store that already holds the operations;
 * timed from `worker.start()` until `n` operations are terminal, then the engine closes (what it
 * claimed beyond them finishes or goes back to the queue). Meanwhile the process samples its own
 * resident set size every 50 ms; it also counts the bytes it wrote to storage (/proc/self/io:
 * SQLite's WAL and checkpoints run in this process).
 *
 *   node dist/backlog-worker.js '<BacklogWorkerSpec as JSON>'
 */
import { readFileSync } from 'node:fs';
import type { CaseResult } from './cases/types.js';
import { CLAIMING_METHODS, openSluice, type StoreTarget } from './lib/engine.js';
import { PhaseMeter } from './lib/meter.js';
import { databaseOf, PgObserver } from './lib/pg-admin.js';

export interface BacklogWorkerSpec {
  target: StoreTarget;
  /** Operations to wait for. */
  n: number;
  serverUrl: string;
}

const TERMINAL = new Set(['succeeded', 'failed', 'dead', 'needs_reconciliation', 'cancelled']);
const MB = 1024 * 1024;

/** Bytes this process caused to be written to storage so far (SQLite: its WAL and checkpoints). */
function writeBytes(): number {
  try {
    const m = /^write_bytes:\s+(\d+)/m.exec(readFileSync('/proc/self/io', 'utf8'));
    return m ? Number(m[1]) : Number.NaN;
  } catch {
    return Number.NaN;
  }
}

/** Peak resident set size of this process since it started (the kernel's high-water mark), in MB. */
function vmHwmMb(): number {
  const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

async function run(spec: BacklogWorkerSpec, observer: PgObserver | undefined): Promise<CaseResult> {
  const meter = new PhaseMeter(observer);
  await meter.open();
  const { sluice, counts } = openSluice(spec.target);
  const worker = sluice.worker();
  let terminal = 0;
  const done = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`timed out: ${terminal} of ${spec.n} operations terminal`)),
      Math.max(120_000, spec.n * 20),
    );
    worker.on('attempt', (e) => {
      if (e.report.outcome === 'written' && TERMINAL.has(e.report.end) && ++terminal === spec.n) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  const rssStart = process.memoryUsage.rss() / MB;
  let rssPeak = rssStart;
  let heapPeak = process.memoryUsage().heapUsed / MB;
  const sampler = setInterval(() => {
    const m = process.memoryUsage();
    rssPeak = Math.max(rssPeak, m.rss / MB);
    heapPeak = Math.max(heapPeak, m.heapUsed / MB);
  }, 50);
  const written0 = writeBytes();
  meter.start();
  worker.start();
  await done;
  meter.stop();
  const written = writeBytes() - written0;
  clearInterval(sampler);
  await meter.sampleServerCpu();
  await sluice.close();
  await meter.close();

  const perOp: Record<string, number> = meter.perOp(spec.n, 'process');
  let all = 0;
  for (const [m, c] of counts.byMethod) {
    perOp[`process.calls.${m}`] = c / spec.n;
    const ms = counts.msByMethod.get(m);
    if (ms !== undefined && c > 0) perOp[`process.ms.${m}`] = ms / c;
    all += c;
  }
  perOp['process.storeCalls'] = all / spec.n;
  if (Number.isFinite(written)) perOp['process.diskWriteBytes'] = written / spec.n;
  return {
    figures: { process: meter.rate(spec.n) },
    perOp,
    info: {
      n: spec.n,
      seconds: meter.seconds,
      claimCalls: CLAIMING_METHODS.reduce((sum, m) => sum + (counts.byMethod.get(m) ?? 0), 0),
      claimMsTotal: CLAIMING_METHODS.reduce((sum, m) => sum + (counts.msByMethod.get(m) ?? 0), 0),
      rssStartMb: rssStart,
      rssPeakMb: rssPeak,
      heapPeakMb: heapPeak,
      vmHwmMb: vmHwmMb(),
    },
  };
}

const spec = JSON.parse(process.argv[2] ?? '{}') as BacklogWorkerSpec;
const observer =
  spec.target.store === 'pg'
    ? await PgObserver.open(spec.serverUrl, databaseOf(spec.target.databaseUrl!))
    : undefined;
try {
  const result = await run(spec, observer);
  await observer?.close();
  process.stdout.write(`@@result ${JSON.stringify(result)}\n`);
  process.exit(0);
} catch (error) {
  console.error(error);
  process.exit(1);
}
