/**
 * @module bench/lib/peer-report
 * The side-by-side table: each figure of Sluice and of the peer queues, with its median, range
 * and spread, its ratio to the best peer of the same figure (PostgreSQL peers only, and all
 * peers) and to the database's limit where one applies; then the issue's targets, each with
 * its measured value and whether it was met. Every ratio is taken per round (round r's figure
 * over round r's best peer or limit), then summarized, like the main table's.
 */
import { PEER_SHAPE_VARIANTS } from '../cases/peer-shapes.js';
import type { ScenarioName } from '../cases/types.js';
import { type CaseDef, type Collected, caseKey, LIMIT_NAMES } from './report.js';
import { type Summary, summarize } from './stats.js';

export const SIDE_BY_SIDE: ScenarioName[] = [
  'enqueue-one',
  'enqueue-batch',
  'process-defaults',
  'process-tuned',
  'latency',
];
const PG_PEERS = ['graphile', 'pg-boss'];
const PEERS = [...PG_PEERS, 'bullmq'];

const NAMES: Record<string, { queue: string; store: string }> = {
  'sluice-pg': { queue: 'Sluice', store: 'PostgreSQL' },
  'sluice-sqlite': { queue: 'Sluice', store: 'SQLite' },
  graphile: { queue: 'graphile-worker 0.17.3', store: 'PostgreSQL' },
  'pg-boss': { queue: 'pg-boss 10.4.2', store: 'PostgreSQL' },
  bullmq: { queue: 'BullMQ 6.7.0', store: 'Redis (in memory)' },
};

export const isPeer = (c: { variant: string }) => PEERS.includes(c.variant);

/**
 * The side-by-side cases. BullMQ has no SQL store; it is listed with the server-backed cases
 * (`--store pg`). Sluice has nothing to tune, so `process-tuned` runs the peers only and the
 * table reads Sluice's defaults against them.
 */
export const PEER_CASES: CaseDef[] = SIDE_BY_SIDE.flatMap((scenario) =>
  PEER_SHAPE_VARIANTS.filter((v) => scenario !== 'process-tuned' || isPeer({ variant: v })).map(
    (variant) => ({
      scenario,
      variant,
      store: variant === 'sluice-sqlite' ? ('sqlite' as const) : ('pg' as const),
    }),
  ),
);

interface FigureDef {
  what: string;
  scenario: ScenarioName;
  figure: 'jobs' | 'p50' | 'p99';
  unit: string;
  lowerIsBetter?: boolean;
  /** Where Sluice's row is read from, if not from this scenario. */
  sluiceFrom?: ScenarioName;
  limit?: (variant: string) => string | undefined;
}

const oneClientLimit = (v: string) =>
  v === 'sluice-sqlite' ? 'limit-sqlite/FULL' : v === 'bullmq' ? undefined : 'limit-pg/1';
const concurrentLimit = (v: string) =>
  v === 'sluice-sqlite' ? 'limit-sqlite/FULL' : v === 'bullmq' ? undefined : 'limit-pg/16';

const FIGURES: FigureDef[] = [
  {
    what: 'enqueue one at a time, 1 client',
    scenario: 'enqueue-one',
    figure: 'jobs',
    unit: 'jobs/s',
    limit: oneClientLimit,
  },
  { what: 'enqueue in batches of 1,000', scenario: 'enqueue-batch', figure: 'jobs', unit: 'jobs/s' },
  {
    what: 'process a backlog, defaults (concurrency 10)',
    scenario: 'process-defaults',
    figure: 'jobs',
    unit: 'jobs/s',
    limit: concurrentLimit,
  },
  {
    what: 'process a backlog, tuned per their docs (Sluice: defaults)',
    scenario: 'process-tuned',
    figure: 'jobs',
    unit: 'jobs/s',
    sluiceFrom: 'process-defaults',
    limit: concurrentLimit,
  },
  {
    what: 'enqueue→start latency at 200/s, p50',
    scenario: 'latency',
    figure: 'p50',
    unit: 'ms',
    lowerIsBetter: true,
  },
  {
    what: 'enqueue→start latency at 200/s, p99',
    scenario: 'latency',
    figure: 'p99',
    unit: 'ms',
    lowerIsBetter: true,
  },
];

function perRound(results: Collected, key: string, figure: string): Array<number | undefined> {
  return (results.get(key) ?? []).map((r) => r?.figures[figure]);
}

/** Per round, the best of `variants` (highest, or lowest where lower is better), and whose it was. */
function bestPerRound(results: Collected, f: FigureDef, variants: string[]): Array<number | undefined> {
  const rounds = Math.max(
    0,
    ...variants.map((v) => results.get(caseKey({ scenario: f.scenario, variant: v }))?.length ?? 0),
  );
  return Array.from({ length: rounds }, (_, r) => {
    const xs = variants
      .map((v) => results.get(caseKey({ scenario: f.scenario, variant: v }))?.[r]?.figures[f.figure])
      .filter((x): x is number => x !== undefined);
    if (xs.length === 0) return undefined;
    return f.lowerIsBetter ? Math.min(...xs) : Math.max(...xs);
  });
}

/** The peer with the best median: named beside the ratios. */
function bestName(results: Collected, f: FigureDef, variants: string[]): string | undefined {
  let best: { v: string; m: number } | undefined;
  for (const v of variants) {
    const m = summarize(
      perRound(results, caseKey({ scenario: f.scenario, variant: v }), f.figure).filter(
        (x): x is number => x !== undefined,
      ),
    )?.median;
    if (m === undefined) continue;
    if (!best || (f.lowerIsBetter ? m < best.m : m > best.m)) best = { v, m };
  }
  return best && NAMES[best.v]?.queue;
}

function ratioOf(values: Array<number | undefined>, against: Array<number | undefined>): Summary | undefined {
  const xs: number[] = [];
  values.forEach((v, r) => {
    const b = against[r];
    if (v !== undefined && b !== undefined && b > 0) xs.push(v / b);
  });
  return summarize(xs);
}

const limitPerRound = (results: Collected, limitKey: string | undefined) =>
  limitKey ? (results.get(limitKey) ?? []).map((r) => r?.figures.commits) : [];

interface PeerRow {
  f: FigureDef;
  variant: string;
  value: Summary | undefined;
  bestPg: Summary | undefined;
  bestPgName: string | undefined;
  best: Summary | undefined;
  bestName: string | undefined;
  limit: Summary | undefined;
  limitKey: string | undefined;
}

export function buildPeerRows(cases: CaseDef[], results: Collected): PeerRow[] {
  const ran = new Set(cases.map(caseKey));
  const rows: PeerRow[] = [];
  for (const f of FIGURES) {
    const bestPg = bestPerRound(results, f, PG_PEERS);
    const best = bestPerRound(results, f, PEERS);
    for (const variant of PEER_SHAPE_VARIANTS) {
      const from = !isPeer({ variant }) && f.sluiceFrom ? f.sluiceFrom : f.scenario;
      const key = caseKey({ scenario: from, variant });
      if (!ran.has(key)) continue;
      const values = perRound(results, key, f.figure);
      const limitKey = f.limit?.(variant);
      rows.push({
        f,
        variant,
        value: summarize(values.filter((x): x is number => x !== undefined)),
        bestPg: ratioOf(values, bestPg),
        bestPgName: bestName(results, f, PG_PEERS),
        best: ratioOf(values, best),
        bestName: bestName(results, f, PEERS),
        limit: ratioOf(values, limitPerRound(results, limitKey)),
        limitKey: limitKey && ran.has(limitKey) ? limitKey : undefined,
      });
    }
  }
  return rows;
}

const num = (x: number, unit: string) =>
  unit === 'ms' ? x.toFixed(x < 10 ? 2 : x < 100 ? 1 : 0) : Math.round(x).toLocaleString('en-US');
const pct = (s: Summary) => (Number.isNaN(s.spread) ? '—' : `±${(s.spread * 100).toFixed(1)}%`);
const ratio = (s: Summary | undefined) =>
  s ? `${s.median.toFixed(2)}×${s.runs > 1 ? ` (${s.min.toFixed(2)}–${s.max.toFixed(2)})` : ''}` : '—';

export function renderPeerTable(rows: PeerRow[]): string {
  const lines = [
    '| figure | queue | store | median | min–max | spread | × best PG peer | best PG peer | × best peer | best peer | × limit | limit |',
    '|---|---|---|---:|---:|---:|---:|---|---:|---|---:|---|',
  ];
  for (const r of rows) {
    const v = r.value;
    const n = NAMES[r.variant]!;
    const sluiceOfDefaults = !isPeer(r) && r.f.sluiceFrom ? ' (defaults)' : '';
    lines.push(
      `| ${r.f.what}${r.f.lowerIsBetter ? ' (lower is better)' : ''} | ${n.queue}${sluiceOfDefaults} | ${n.store} | ` +
        `${v ? `${num(v.median, r.f.unit)} ${r.f.unit}` : 'failed'} | ` +
        `${v && v.runs > 1 ? `${num(v.min, r.f.unit)}–${num(v.max, r.f.unit)}` : '—'} | ${v ? pct(v) : '—'} | ` +
        `${ratio(r.bestPg)} | ${r.bestPgName ?? '—'} | ${ratio(r.best)} | ${r.bestName ?? '—'} | ` +
        `${r.limitKey ? ratio(r.limit) : '—'} | ${r.limitKey ? LIMIT_NAMES[r.limitKey] : '—'} |`,
    );
  }
  return lines.join('\n');
}

/** The issue's targets, Sluice at its defaults, each with the value measured in this run. */
export function renderPeerTargets(results: Collected): string {
  const get = (scenario: ScenarioName, variant: string, figure: string) =>
    perRound(results, caseKey({ scenario, variant }), figure);
  const f = (s: ScenarioName, figure: FigureDef['figure']) =>
    FIGURES.find((x) => x.scenario === s && x.figure === figure)!;
  const out: string[] = [];
  const line = (
    what: string,
    s: Summary | undefined,
    target: string,
    met: (m: number) => boolean,
    unit = '×',
  ) => {
    if (!s) {
      out.push(`- ${what}: not measured in this run`);
      return;
    }
    const value =
      unit === '×'
        ? ratio(s)
        : `${num(s.median, unit)} ${unit}${s.runs > 1 ? ` (${num(s.min, unit)}–${num(s.max, unit)})` : ''}`;
    out.push(`- ${what}: ${value}, target ${target}: **${met(s.median) ? 'met' : 'missed'}**`);
  };
  const one = get('enqueue-one', 'sluice-pg', 'jobs');
  line(
    `Enqueue one at a time, PostgreSQL: Sluice × the best PostgreSQL peer (${bestName(results, f('enqueue-one', 'jobs'), PG_PEERS) ?? '—'})`,
    ratioOf(one, bestPerRound(results, f('enqueue-one', 'jobs'), PG_PEERS)),
    '≥ 1.5×',
    (m) => m >= 1.5,
  );
  line(
    'Enqueue one at a time, PostgreSQL: Sluice × the single-row commit limit (PG 1 client)',
    ratioOf(one, limitPerRound(results, 'limit-pg/1')),
    '≥ 0.8×',
    (m) => m >= 0.8,
  );
  line(
    'Enqueue one at a time, SQLite: Sluice × the single-row commit limit (SQLite FULL)',
    ratioOf(get('enqueue-one', 'sluice-sqlite', 'jobs'), limitPerRound(results, 'limit-sqlite/FULL')),
    '≥ 0.8×',
    (m) => m >= 0.8,
  );
  line(
    "Process plain jobs, PostgreSQL: Sluice's defaults × graphile-worker tuned",
    ratioOf(get('process-defaults', 'sluice-pg', 'jobs'), get('process-tuned', 'graphile', 'jobs')),
    '≥ 1.0×',
    (m) => m >= 1,
  );
  const p50 = get('latency', 'sluice-pg', 'p50');
  const p99 = get('latency', 'sluice-pg', 'p99');
  const values = (xs: Array<number | undefined>) => summarize(xs.filter((x): x is number => x !== undefined));
  line('Enqueue→start latency at 200/s, PostgreSQL: Sluice p50', values(p50), '≤ 2 ms', (m) => m <= 2, 'ms');
  line(
    'Enqueue→start latency at 200/s, PostgreSQL: Sluice p99',
    values(p99),
    '≤ 10 ms',
    (m) => m <= 10,
    'ms',
  );
  line(
    "Enqueue→start latency, PostgreSQL: Sluice's p50 × graphile-worker's",
    ratioOf(p50, get('latency', 'graphile', 'p50')),
    '< 1×',
    (m) => m < 1,
  );
  line(
    "Enqueue→start latency, PostgreSQL: Sluice's p99 × graphile-worker's",
    ratioOf(p99, get('latency', 'graphile', 'p99')),
    '< 1×',
    (m) => m < 1,
  );
  return out.join('\n');
}

/** The header line of a run with side-by-side cases. */
export function describePeerRuns(o: { quick: boolean; ops: number | undefined; peers: boolean }): string {
  const n = (full: number, quick: number) => (o.quick ? quick : full).toLocaleString('en-US');
  return (
    `- side by side: enqueue-one ${n(20_000, 1000)} jobs, enqueue-batch ${n(20_000, 3000)}, ` +
    `process-defaults/-tuned ${o.ops?.toLocaleString('en-US') ?? n(20_000, 2000)} (time box ${o.quick ? 10 : 30} s), ` +
    `latency 200 jobs/s for ${o.quick ? 3 : 10} s; peers ${o.peers ? 'graphile-worker 0.17.3, pg-boss 10.4.2, BullMQ 6.7.0' : 'off (--no-peers)'}`
  );
}

/** The section main.ts prints when any side-by-side case ran. */
export function renderPeerSection(cases: CaseDef[], results: Collected): string[] {
  if (!cases.some((c) => SIDE_BY_SIDE.includes(c.scenario))) return [];
  return [
    '### Side by side with the peer queues',
    '',
    renderPeerTable(buildPeerRows(cases, results)),
    '',
    '### Targets',
    '',
    renderPeerTargets(results),
    '',
  ];
}
