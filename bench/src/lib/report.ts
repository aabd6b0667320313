/**
 * @module bench/lib/report
 * The table: one row per figure, its median over the runs with the range and spread, and its
 * ratio to the limit measured in the same run. A ratio is computed per run (the figure of run r
 * over the limit of run r) and then summarized, so a run disturbed by the shared machine
 * disturbs its figure and its limit together.
 */
import type { CaseResult, ScenarioName } from '../cases/types.js';
import type { StoreName } from './engine.js';
import { type Summary, summarize } from './stats.js';

export interface CaseDef {
  scenario: ScenarioName;
  variant: string;
  store: StoreName;
}

export const caseKey = (c: { scenario: string; variant: string }) => `${c.scenario}/${c.variant}`;

interface RowDef {
  key: string;
  figure: string;
  what: string;
  unit: string;
  /** The case key of the limit this figure is read against. */
  limit?: string;
}

/** The PostgreSQL ceiling every Sluice figure is also read against (issue 3's target). */
export const PG_CEILING = 'limit-pg/16';

export const LIMIT_NAMES: Record<string, string> = {
  'limit-pg/1': 'PG 1 client',
  'limit-pg/16': 'PG 16 clients',
  'limit-sqlite/FULL': 'SQLite FULL',
  'limit-sqlite/NORMAL': 'SQLite NORMAL',
};

export function rowsOf(c: CaseDef, submitters: number, slots?: number): RowDef[] {
  const key = caseKey(c);
  const concurrentLimit = c.store === 'pg' ? 'limit-pg/16' : 'limit-sqlite/FULL';
  switch (c.scenario) {
    case 'limit-pg':
      return [
        {
          key,
          figure: 'commits',
          what: `INSERT 1 row + commit, ${c.variant} client${c.variant === '1' ? '' : 's'}`,
          unit: 'commits/s',
        },
      ];
    case 'limit-sqlite':
      return [
        {
          key,
          figure: 'commits',
          what: `INSERT 1 row + commit, synchronous=${c.variant}`,
          unit: 'commits/s',
        },
      ];
    case 'submit-one':
      return [
        {
          key,
          figure: 'submit',
          what: 'submit one at a time, 1 client',
          unit: 'ops/s',
          limit: c.store === 'pg' ? 'limit-pg/1' : 'limit-sqlite/FULL',
        },
      ];
    case 'process-effect':
    case 'process-plain':
      return [
        {
          key,
          figure: 'submit',
          what: `submit, ${submitters} concurrent clients`,
          unit: 'ops/s',
          limit: concurrentLimit,
        },
        {
          key,
          figure: 'process',
          what:
            slots === undefined ? 'process, default worker' : `process, worker with ${slots} slots (what-if)`,
          unit: 'ops/s',
          limit: concurrentLimit,
        },
        {
          key,
          figure: 'e2e',
          what: 'end to end (submit, then process)',
          unit: 'ops/s',
          limit: concurrentLimit,
        },
      ];
    // Side by side with the peers: their own table (peer-report.ts).
    case 'enqueue-one':
    case 'enqueue-batch':
    case 'process-defaults':
    case 'process-tuned':
    case 'latency':
    // Read against baselines of their own run, not the limits: baseline-report.ts.
    case 'http-submit':
    case 'admission-caps':
    case 'backlog':
      return [];
  }
}

export type Collected = Map<string, Array<CaseResult | undefined>>;

export interface Row {
  def: RowDef;
  store: StoreName;
  scenario: ScenarioName;
  value: Summary | undefined;
  ownRatio: Summary | undefined;
  pgRatio: Summary | undefined;
  /** The same against PostgreSQL's 1-client commit rate. */
  pgOneRatio: Summary | undefined;
}

function ratios(
  results: Collected,
  key: string,
  figure: string,
  limitKey: string | undefined,
): Summary | undefined {
  if (!limitKey) return undefined;
  const runs = results.get(key) ?? [];
  const limits = results.get(limitKey) ?? [];
  const xs: number[] = [];
  runs.forEach((r, i) => {
    const v = r?.figures[figure];
    const l = limits[i]?.figures.commits;
    if (v !== undefined && l !== undefined && l > 0) xs.push(v / l);
  });
  return summarize(xs);
}

export function buildRows(cases: CaseDef[], results: Collected, submitters: number, slots?: number): Row[] {
  const rows: Row[] = [];
  for (const c of cases) {
    for (const def of rowsOf(c, submitters, slots)) {
      const values = (results.get(def.key) ?? [])
        .map((r) => r?.figures[def.figure])
        .filter((v) => v !== undefined);
      rows.push({
        def,
        store: c.store,
        scenario: c.scenario,
        value: summarize(values as number[]),
        ownRatio: ratios(results, def.key, def.figure, def.limit),
        pgRatio: c.scenario.startsWith('limit-')
          ? undefined
          : ratios(results, def.key, def.figure, PG_CEILING),
        pgOneRatio: c.scenario.startsWith('limit-')
          ? undefined
          : ratios(results, def.key, def.figure, 'limit-pg/1'),
      });
    }
  }
  return rows;
}

const int = (x: number) => Math.round(x).toLocaleString('en-US');
/** Rates as integers; the latency figures (milliseconds) keep their decimals. */
const figure = (x: number) => (x < 100 ? x.toFixed(2) : int(x));
const pct = (s: Summary) => (Number.isNaN(s.spread) ? '—' : `±${(s.spread * 100).toFixed(1)}%`);
const ratio = (s: Summary | undefined) =>
  s ? `${s.median.toFixed(2)}×${s.runs > 1 ? ` (${s.min.toFixed(2)}–${s.max.toFixed(2)})` : ''}` : '—';

export function renderTable(rows: Row[]): string {
  const lines = [
    '| scenario | store | figure | median | min–max | spread | × own limit | own limit | × PG ceiling |',
    '|---|---|---|---:|---:|---:|---:|---|---:|',
  ];
  for (const r of rows) {
    const v = r.value;
    lines.push(
      `| ${r.scenario} | ${r.store === 'pg' ? 'PostgreSQL' : 'SQLite'} | ${r.def.what} | ` +
        `${v ? `${int(v.median)} ${r.def.unit}` : 'failed'} | ${v && v.runs > 1 ? `${int(v.min)}–${int(v.max)}` : '—'} | ` +
        `${v ? pct(v) : '—'} | ${ratio(r.ownRatio)} | ${r.def.limit ? LIMIT_NAMES[r.def.limit] : '—'} | ${ratio(r.pgRatio)} |`,
    );
  }
  return lines.join('\n');
}

/**
 * The performance issue's target for effects: processing operations with one journaled effect at
 * ≥ 0.5× Sluice's own plain rate, read round by round (both cases run in the same round).
 */
function effectTarget(results: Collected, store: StoreName): string | undefined {
  const effect = results.get(`process-effect/${store}`) ?? [];
  const plain = results.get(`process-plain/${store}`) ?? [];
  const xs: number[] = [];
  effect.forEach((r, i) => {
    const e = r?.figures.process;
    const p = plain[i]?.figures.process;
    if (e !== undefined && p !== undefined && p > 0) xs.push(e / p);
  });
  const s = summarize(xs);
  if (!s) return undefined;
  return (
    `- issue 7 target, ${store === 'pg' ? 'PostgreSQL' : 'SQLite'}: processing with one journaled effect = ` +
    `${ratio(s)} the plain rate of the same round, target ≥ 0.50×: ${s.median >= 0.5 ? 'met' : 'missed'}`
  );
}

/**
 * Issue 3's target (submit then process N operations with one effect each, ≥ 0.5× the PG
 * ceiling), then the performance issue's effect-to-plain target.
 */
export function renderTarget(rows: Row[], results: Collected): string {
  const out: string[] = [];
  for (const r of rows) {
    if (r.scenario !== 'process-effect' || r.def.figure !== 'e2e' || !r.pgRatio) continue;
    const met = r.pgRatio.median >= 0.5;
    const one = r.pgOneRatio
      ? `; against the 1-client rate (one commit at a time): ${r.pgOneRatio.median.toFixed(2)}×`
      : '';
    out.push(
      `- issue 3 target, ${r.store === 'pg' ? 'PostgreSQL' : 'SQLite'}: end to end with one effect = ` +
        `${r.pgRatio.median.toFixed(2)}× the PostgreSQL single-row commit ceiling (16 clients), ` +
        `target ≥ 0.50×: ${met ? 'met' : 'missed'}${one}`,
    );
  }
  for (const store of ['sqlite', 'pg'] as const) {
    const line = effectTarget(results, store);
    if (line) out.push(line);
  }
  return out.join('\n');
}

/** The measured costs per operation, medians over the runs. */
export function renderCosts(cases: CaseDef[], results: Collected): string {
  const lines = [
    '| case | phase | store calls/op | commits/op | WAL syncs/op¹ | rows written/op | Node CPU µs/op (cores busy) | PG backend CPU µs/op (cores busy) | store calls by method: per op (mean latency) |',
    '|---|---|---:|---:|---:|---:|---:|---:|---|',
  ];
  const f2 = (x: number | undefined) => (x === undefined || Number.isNaN(x) ? '—' : x.toFixed(2));
  for (const c of cases) {
    const runs = (results.get(caseKey(c)) ?? []).filter((r): r is CaseResult => r !== undefined);
    if (runs.length === 0) continue;
    const med = (k: string) =>
      summarize(runs.map((r) => r.perOp[k]).filter((x): x is number => x !== undefined))?.median;
    const phases = [...new Set(runs.flatMap((r) => Object.keys(r.perOp).map((k) => k.split('.')[0]!)))];
    for (const p of phases) {
      const methods = [
        ...new Set(runs.flatMap((r) => Object.keys(r.perOp).filter((k) => k.startsWith(`${p}.calls.`)))),
      ]
        .map((k) => ({
          m: k.slice(p.length + 7),
          perOp: med(k) ?? 0,
          ms: med(`${p}.ms.${k.slice(p.length + 7)}`),
        }))
        .filter((x) => x.perOp >= 0.005)
        .map((x) => `${x.m} ${f2(x.perOp)}${x.ms === undefined ? '' : ` (${x.ms.toFixed(2)} ms)`}`);
      const provider = med(`${p}.providerUs`);
      if (provider !== undefined)
        methods.push(`awaiting the provider stub ${Math.round(provider)} µs (wall)`);
      // SQLite: each store write is one transaction, i.e. one commit; PostgreSQL: the server's count.
      const commits =
        c.store === 'sqlite' && !c.scenario.startsWith('limit-')
          ? med(`${p}.storeWrites`)
          : med(`${p}.commits`);
      const cpu = (k: string) => {
        const us = med(`${p}.${k}CpuUs`);
        const share = med(`${p}.${k}CpuShare`);
        return us === undefined ? '—' : `${Math.round(us)} (${f2(share)})`;
      };
      lines.push(
        `| ${caseKey(c)} | ${p} | ${f2(med(`${p}.storeCalls`))} | ${f2(commits ?? (c.scenario === 'limit-sqlite' ? 1 : undefined))} | ` +
          `${f2(med(`${p}.walSyncs`))} | ${f2(med(`${p}.rowsWritten`))} | ${cpu('node')} | ${cpu('pg')} | ${methods.join(' · ') || '—'} |`,
      );
    }
  }
  lines.push(
    '',
    '¹ `pg_stat_wal.wal_sync` is cluster-wide: other users of the server during the phase are counted too.',
  );
  return lines.join('\n');
}

/** Each run's figures beside the machine's load during it, to tell disturbed runs. */
export function renderRuns(
  cases: CaseDef[],
  results: Collected,
  machine: Map<string, Array<{ busyCores: number; cpuPressure: number; ioPressure: number } | undefined>>,
): string {
  const lines = [
    '| case | figures, run by run | machine cores busy | CPU pressure | I/O pressure |',
    '|---|---|---|---|---|',
  ];
  const join = (xs: Array<string | undefined>) => xs.map((x) => x ?? '—').join(' / ');
  for (const c of cases) {
    const key = caseKey(c);
    const runs = results.get(key) ?? [];
    const loads = machine.get(key) ?? [];
    const figures = [...new Set(runs.flatMap((r) => Object.keys(r?.figures ?? {})))];
    const figs = figures
      .map(
        (f) =>
          `${f} ${join(runs.map((r) => (r?.figures[f] === undefined ? undefined : figure(r.figures[f]!))))}`,
      )
      .join('; ');
    lines.push(
      `| ${key} | ${figs || 'failed'} | ${join(loads.map((l) => l?.busyCores.toFixed(2)))} | ` +
        `${join(loads.map((l) => (l ? `${(l.cpuPressure * 100).toFixed(0)}%` : undefined)))} | ` +
        `${join(loads.map((l) => (l ? `${(l.ioPressure * 100).toFixed(0)}%` : undefined)))} |`,
    );
  }
  return lines.join('\n');
}
