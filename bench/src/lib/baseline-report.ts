/**
 * @module bench/lib/baseline-report
 * The table of the scenarios that carry their own baseline (http-submit, admission-caps,
 * backlog): each figure beside the baseline measured in the same case run, the ratio taken run
 * by run and then summarized, and the issue's target with met or missed. Figures that are not
 * rates (latencies, memory, counts) come from a run's `info`.
 */
import type { CaseResult } from '../cases/types.js';
import type { CaseDef, Collected } from './report.js';
import { caseKey } from './report.js';
import { type Summary, summarize } from './stats.js';

type Pick = (r: CaseResult) => number | undefined;

interface Line {
  what: string;
  unit: string;
  digits: number;
  value: Pick;
  baseline?: { what: string; value: Pick };
  /** Read on the ratio to the baseline, or on the value itself. */
  target?: { on: 'ratio' | 'value'; op: '≥' | '≤' | '<' | '='; bound: number };
}

const fig =
  (name: string): Pick =>
  (r) =>
    r.figures[name];
const info =
  (name: string): Pick =>
  (r) => {
    const v = r.info[name];
    return typeof v === 'number' ? v : undefined;
  };

const perOpKb =
  (key: string): Pick =>
  (r) => {
    const v = r.perOp[key];
    return v === undefined ? undefined : v / 1024;
  };

const count = (x: number) => Math.round(x).toLocaleString('en-US');

type Phase = 'Backlog' | 'Empty';

/** A figure with the backlog beside the same figure on the empty queue; `at` reads it per phase. */
const vsEmpty = (
  what: string,
  unit: string,
  digits: number,
  at: (phase: Phase) => Pick,
  target?: Line['target'],
): Line => ({
  what,
  unit,
  digits,
  value: at('Backlog'),
  baseline: { what: 'the same, empty queue', value: at('Empty') },
  ...(target ? { target } : {}),
});
/** `info.<name>Backlog` and `info.<name>Empty`. */
const infoAt = (name: string) => (phase: Phase) => info(`${name}${phase}`);
/** `perOp['backlog.<key>']` and `perOp['empty.<key>']`, in kB. */
const kbAt = (key: string) => (phase: Phase) => perOpKb(`${phase.toLowerCase()}.${key}`);

function linesOf(c: CaseDef, runs: CaseResult[]): Line[] {
  const first = runs[0];
  switch (c.scenario) {
    case 'http-submit': {
      const clients = first?.info.clients ?? '?';
      return [
        {
          what: `HTTP POST /v1/operations, ${clients} connections (autocannon)`,
          unit: 'req/s',
          digits: 0,
          value: fig('http'),
          baseline: { what: `library submit, ${clients} callers`, value: fig('lib') },
        },
        {
          what: 'HTTP latency p50',
          unit: 'ms',
          digits: 2,
          value: info('httpP50Ms'),
          baseline: { what: 'library p50', value: info('libP50Ms') },
        },
        {
          what: 'HTTP latency p99',
          unit: 'ms',
          digits: 2,
          value: info('httpP99Ms'),
          baseline: { what: 'library p99', value: info('libP99Ms') },
        },
        {
          what: 'answers other than 202 (a run with any fails)',
          unit: '',
          digits: 0,
          value: info('non202'),
          target: { on: 'value', op: '=', bound: 0 },
        },
        { what: `library submit, ${clients} callers`, unit: 'ops/s', digits: 0, value: fig('lib') },
      ];
    }
    case 'admission-caps': {
      const shape = `${first?.info.submitters ?? '?'} submitters, ${first?.info.tenants ?? '?'} tenants`;
      return [
        {
          what: `submit with caps on (${shape})`,
          unit: 'ops/s',
          digits: 0,
          value: fig('capsOn'),
          baseline: { what: 'caps off', value: fig('capsOff') },
          target: { on: 'ratio', op: '≥', bound: 0.9 },
        },
        { what: `submit with caps off (${shape})`, unit: 'ops/s', digits: 0, value: fig('capsOff') },
      ];
    }
    case 'backlog': {
      const size = first ? count(Number(first.info.backlog)) : '?';
      const tenants = first ? count(Number(first.info.tenants)) : '?';
      const n = first ? count(Number(first.info.n)) : '?';
      return [
        vsEmpty(`claim call latency, ${size} waiting over ${tenants} tenants`, 'ms', 2, infoAt('claimMs'), {
          on: 'ratio',
          op: '≤',
          bound: 2,
        }),
        {
          what: `processing the first ${n}, with the backlog`,
          unit: 'ops/s',
          digits: 0,
          value: fig('backlog'),
          baseline: { what: `${n} alone`, value: fig('empty') },
          target: { on: 'ratio', op: '≥', bound: 0.5 },
        },
        vsEmpty('worker RSS, peak while processing, with the backlog', 'MB', 0, infoAt('rssPeakMb'), {
          on: 'value',
          op: '<',
          bound: 200,
        }),
        {
          what: 'worker peak RSS since start (VmHWM), with the backlog',
          unit: 'MB',
          digits: 0,
          value: info('vmHwmMbBacklog'),
          target: { on: 'value', op: '<', bound: 200 },
        },
        { what: 'claim call latency, empty queue', unit: 'ms', digits: 2, value: info('claimMsEmpty') },
        { what: `processing ${n} alone`, unit: 'ops/s', digits: 0, value: fig('empty') },
        {
          what: `building the backlog: submit, ${first?.info.buildCallers ?? '?'} callers`,
          unit: 'ops/s',
          digits: 0,
          value: fig('build'),
        },
        ...(c.store === 'pg'
          ? pgLines(first)
          : [
              // SQLite writes its WAL and checkpoints in the worker process itself.
              vsEmpty(
                'written to disk by the worker process per operation, with the backlog',
                'kB',
                1,
                kbAt('diskWriteBytes'),
              ),
            ]),
      ];
    }
    default:
      return [];
  }
}

/** The backlog on PostgreSQL: how much of the queue each claim reads, and the claim after ANALYZE. */
function pgLines(first: CaseResult | undefined): Line[] {
  const whatIf = `after ANALYZE (what-if: autovacuum=${first?.info.autovacuum ?? '?'} on this server)`;
  return [
    vsEmpty('queue-table entries read per claim call, with the backlog', '', 0, infoAt('queueReadsPerClaim')),
    vsEmpty('operation entries read per claim call, with the backlog', '', 0, infoAt('opReadsPerClaim')),
    vsEmpty('WAL written per operation processed, with the backlog', 'kB', 1, kbAt('walBytes')),
    {
      what: `claim call latency with the backlog, ${whatIf}`,
      unit: 'ms',
      digits: 2,
      value: info('claimMsBacklogAnalyzed'),
      baseline: { what: 'the same, empty queue, after ANALYZE', value: info('claimMsEmptyAnalyzed') },
      target: { on: 'ratio', op: '≤', bound: 2 },
    },
    {
      what: 'queue-table entries read per claim call, with the backlog, after ANALYZE',
      unit: '',
      digits: 0,
      value: info('queueReadsPerClaimBacklogAnalyzed'),
    },
    {
      what: `processing with the backlog, ${whatIf}`,
      unit: 'ops/s',
      digits: 0,
      value: fig('backlogAnalyzed'),
      baseline: { what: 'alone, after ANALYZE', value: fig('emptyAnalyzed') },
      target: { on: 'ratio', op: '≥', bound: 0.5 },
    },
  ];
}

function meets(x: number, op: '≥' | '≤' | '<' | '=', bound: number): boolean {
  switch (op) {
    case '≥':
      return x >= bound;
    case '≤':
      return x <= bound;
    case '<':
      return x < bound;
    case '=':
      return x === bound;
  }
}

/** The table; empty when no case of these scenarios ran. */
export function renderBaselineTable(cases: CaseDef[], results: Collected): string {
  const lines = [
    '| scenario | store | figure | median | min–max | spread | × baseline | baseline (same run) | target |',
    '|---|---|---|---:|---:|---:|---:|---|---|',
  ];
  let any = false;
  for (const c of cases) {
    const all = results.get(caseKey(c)) ?? [];
    const runs = all.filter((r): r is CaseResult => r !== undefined);
    // Holes are rounds a once-per-run case skipped; an undefined result is a run that failed.
    const failed = all.filter((r) => r === undefined).length;
    for (const l of linesOf(c, runs)) {
      any = true;
      const num = (x: number) =>
        x.toLocaleString('en-US', { minimumFractionDigits: l.digits, maximumFractionDigits: l.digits });
      const v = summarize(runs.map(l.value).filter((x): x is number => x !== undefined));
      const ratios: number[] = [];
      if (l.baseline)
        for (const r of runs) {
          const a = l.value(r);
          const b = l.baseline.value(r);
          if (a !== undefined && b !== undefined && b > 0) ratios.push(a / b);
        }
      const ratio: Summary | undefined = summarize(ratios);
      let target = '—';
      if (l.target) {
        const read = l.target.on === 'ratio' ? ratio : v;
        const shown =
          l.target.on === 'ratio'
            ? `${l.target.bound.toFixed(2)}×`
            : `${num(l.target.bound)}${l.unit ? ` ${l.unit}` : ''}`;
        const met = read !== undefined && failed === 0 && meets(read.median, l.target.op, l.target.bound);
        target = `${l.target.op} ${shown}: ${met ? 'met' : 'missed'}${failed > 0 ? ` (${failed} run(s) failed)` : ''}`;
      }
      const unit = l.unit ? ` ${l.unit}` : '';
      lines.push(
        `| ${c.scenario} | ${c.store === 'pg' ? 'PostgreSQL' : 'SQLite'} | ${l.what} | ` +
          `${v ? `${num(v.median)}${unit}` : 'failed'} | ${v && v.runs > 1 ? `${num(v.min)}–${num(v.max)}` : '—'} | ` +
          `${v && !Number.isNaN(v.spread) ? `±${(v.spread * 100).toFixed(1)}%` : '—'} | ` +
          `${ratio ? `${ratio.median.toFixed(2)}×${ratio.runs > 1 ? ` (${ratio.min.toFixed(2)}–${ratio.max.toFixed(2)})` : ''}` : '—'} | ` +
          `${l.baseline?.what ?? '—'} | ${target} |`,
      );
    }
  }
  return any ? lines.join('\n') : '';
}
