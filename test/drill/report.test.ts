/**
 * The drill's report: `writeReport` over a synthetic `DrillResult` (five phases, 300 samples, one
 * failing invariant), checked on its text — verdict, invariants, tables, one band per phase and one
 * path per series on every chart — on edge cases (no samples, one sample, zeros, huge and
 * non-finite values) that must not throw or print NaN, and, where Debian's Chromium is installed,
 * rendered in the real browser (screenshot, non-zero SVG boxes, no request leaving the page).
 *
 */
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildCharts,
  formatProgress,
  type ProgressState,
  progressCountsFromSample,
  renderChart,
  renderHtml,
  renderMarkdown,
  verdictOf,
  writeReport,
} from '../../src/drill/report/index.js';
import { niceTicks } from '../../src/drill/report/scale.js';
import type { DrillResult, Phase, Sample } from '../../src/drill/types.js';
import { CHROMIUM, hasChromium, launchChromium, requireChromiumInCi } from '../helpers/chromium.js';
import { zeroSample } from '../helpers/drill-sample.js';
import { prng } from '../helpers/seeded.js';

// ---------------------------------------------------------------------------------------------
// A synthetic drill shaped like drill/serve-config.ts's deployment: tenants north and bulk,
// classes interactive and bulk, 3 workers, the `all` scenario's phases over 60 s, samples every
// 200 ms; a seeded PRNG, so every run renders the same bytes.

const PHASES: Phase[] = [
  { name: 'baseline', startMs: 0, endMs: 12_000 },
  { name: 'pressure', startMs: 12_000, endMs: 27_000 },
  { name: 'stall', startMs: 27_000, endMs: 36_000 },
  { name: 'crash', startMs: 36_000, endMs: 48_000 },
  { name: 'recovery', startMs: 48_000, endMs: 60_000 },
];

function phaseAt(t: number): Phase['name'] {
  return PHASES.find((p) => t >= p.startMs && t < p.endMs)?.name ?? 'recovery';
}

const FAILING = {
  name: 'one charge per succeeded charge',
  figure: '2 double charges over 812 succeeded charges (0 for 31 cancelled)',
};

function syntheticResult(options: { failCharge: boolean; seed?: number }): DrillResult {
  const random = prng(options.seed ?? 7);
  const pick = (p: number) => (random() < p ? 1 : 0);
  const samples: Sample[] = [];
  let calls = 0;
  let charges = 0;
  let queueFull = 0;
  let budget = 0;
  let denials = 0;
  let bulkWaiting = 0;
  let temp = 0;
  let alive = 3;
  let respawnAt = -1;
  for (let t = 0; t < 60_000; t += 200) {
    const phase = phaseAt(t);
    const flooded = phase === 'pressure' || phase === 'stall' || phase === 'crash';
    if (phase === 'crash' && alive === 3 && random() < 0.05) {
      alive = 2;
      respawnAt = t + 800 + random() * 600;
    }
    if (alive < 3 && t >= respawnAt) alive = 3;
    const full = phase === 'pressure' ? 20 : 8;
    bulkWaiting = flooded ? Math.min(full, bulkWaiting + 2 * pick(0.7)) : Math.max(0, bulkWaiting - 3);
    if (flooded && bulkWaiting >= full) queueFull += 1 + Math.floor(random() * 3);
    if (phase === 'pressure') budget += pick(0.1);
    if (phase === 'stall') denials += pick(0.15);
    temp = flooded
      ? Math.min(11 * 2 ** 20, Math.max(0, temp + (random() - 0.35) * 2 ** 20))
      : Math.max(0, temp - 3 * 2 ** 20 * random());
    const stalled = phase === 'stall';
    const newCalls = stalled ? pick(0.3) : 1 + (phase === 'pressure' ? pick(0.5) : 0);
    calls += newCalls;
    charges += stalled ? 0 : newCalls;
    const base = phase === 'baseline' || phase === 'recovery' ? 70 : stalled ? 900 : 110;
    const latencies = Array.from({ length: stalled ? pick(0.3) : 1 }, () =>
      Math.round(base * (0.7 + random() * 0.8) + (random() < 0.04 ? 200 : 0)),
    );
    samples.push({
      t,
      workersAlive: alive,
      running: {
        bulk: { bulk: flooded ? Math.min(alive, 2 + pick(0.6)) : pick(0.1) },
        interactive: {
          north: stalled ? pick(0.5) : 1 + pick(0.3),
          bulk: phase === 'pressure' ? pick(0.5) : 0,
        },
      },
      waiting: {
        bulk: { bulk: bulkWaiting },
        interactive: { north: pick(0.2), bulk: phase === 'pressure' ? pick(0.4) * 2 : 0 },
      },
      dbConnections: 4 + (flooded ? 3 + Math.floor(random() * 3) : pick(0.4)),
      tempBytes: Math.round(temp),
      providerCalls: calls,
      providerCharges: charges,
      rejections: { 'tenant-queue-full': queueFull, 'budget-exhausted': budget },
      retryDenials: denials,
      northLatencyMs: latencies,
    });
  }
  const invariants = [
    options.failCharge
      ? {
          name: FAILING.name,
          pass: false,
          figure: FAILING.figure,
          detail:
            'op north-charge-0412: 2 provider charges (keys ch_91a, ch_91b)\nop north-charge-0733: 2 provider charges',
        }
      : {
          name: FAILING.name,
          pass: true,
          figure: '0 double charges over 812 succeeded charges (0 for 31 cancelled)',
        },
    { name: 'no accepted operation lost', pass: true, figure: '1,204 accepted: 1,204 terminal or explained' },
    {
      name: 'per-tenant and per-class caps',
      pass: true,
      figure: 'max bulk/bulk running 3 ≤ 3; north/interactive 2 ≤ 2',
    },
    {
      name: "North's latency objective",
      pass: true,
      figure: 'p95 161 ms under pressure < 400 ms (3 × 118 ms | floor 400)',
    },
    {
      name: 'back to baseline after pressure',
      pass: true,
      figure: 'temp 0 B, running 1, connections 4 within 5 s',
    },
    {
      name: 'retries within the retry budget',
      pass: true,
      figure: `${denials} denials, 0 retries over budget`,
    },
    {
      name: 'no provider call beyond the spend budget',
      pass: true,
      figure: '0 charges over budget & 0 refused sends',
    },
  ];
  return {
    settings: {
      store: 'sqlite',
      db: '/tmp/drill-x/sluice.db',
      workers: 3,
      durationMs: 60_000,
      scenario: 'all',
      startedAt: '2026-12-02T12:00:00.000Z',
      limits: {
        maxRunning: { interactive: { north: 2, bulk: 1 }, bulk: { north: 2, bulk: 3 } },
        slotsPerWorker: { interactive: 3, bulk: 1 },
        latencyMultiple: 3,
        latencyFloorMs: 400,
        spendLimit: { 'spend:stub:tenant:bulk': 10_000, 'spend:stub:*': 6_000_000 },
      },
    },
    phases: PHASES,
    samples,
    invariants,
    summary: {
      accepted: 1204,
      succeeded: 1118,
      failed: 12,
      cancelled: 31,
      dead: 3,
      needsReconciliation: 0,
      duplicatesAnswered: 96,
      kills: 4,
      northP95BaselineMs: 118,
      northP95PressureMs: 161,
    },
    passed: !options.failCharge,
  };
}

// ---------------------------------------------------------------------------------------------
// Structure checks that need no browser.

const VOID = new Set(['meta', 'br', 'hr', 'img', 'input', 'link', 'area', 'base', 'col', 'source', 'wbr']);

/** Matches every open tag with its close, in order; returns the problems found (none: balanced). */
function tagProblems(markup: string): string[] {
  const problems: string[] = [];
  const stack: string[] = [];
  const text = markup.replace(/<!--[\s\S]*?-->/g, '').replace(/<!doctype[^>]*>|<\?xml[^>]*\?>/gi, '');
  for (const m of text.matchAll(/<(\/?)([a-zA-Z][\w:-]*)\b[^<>]*?(\/?)>/g)) {
    const [, closing, rawName, selfClosing] = m;
    const name = rawName!.toLowerCase();
    if (selfClosing || (!closing && VOID.has(name))) continue;
    if (!closing) {
      stack.push(name);
    } else if (stack.at(-1) === name) {
      stack.pop();
    } else {
      problems.push(`</${name}> at ${m.index} closes <${stack.at(-1) ?? 'nothing'}>`);
      if (problems.length > 5) break;
    }
  }
  if (stack.length > 0) problems.push(`unclosed: ${stack.join(' > ')}`);
  // A stray `<` or `>` in text means something was not escaped.
  const stray = text.replace(/<(\/?)([a-zA-Z][\w:-]*)\b[^<>]*?(\/?)>/g, '').match(/[<>]/g);
  if (stray) problems.push(`${stray.length} unescaped < or > in text`);
  return problems;
}

/** The cells of every Markdown table row (header and separator rows included), unescaped and trimmed. */
function markdownRows(md: string): string[][] {
  return md
    .split('\n')
    .filter((l) => l.startsWith('| '))
    .map((l) =>
      l
        .slice(2, -2)
        .split(/ (?<!\\)\| /)
        .map((c) => c.trim().replace(/\\\|/g, '|')),
    );
}

function svgsIn(html: string): string[] {
  return [...html.matchAll(/<svg[\s\S]*?<\/svg>/g)].map((m) => m[0]);
}

const NOT_FINITE = /NaN|Infinity|undefined/;

// ---------------------------------------------------------------------------------------------

describe('writeReport', () => {
  const result = syntheticResult({ failCharge: true });
  let dir: string;
  let paths: { markdown: string; html: string };
  let md: string;
  let html: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sluice-report-'));
    paths = await writeReport(result, join(dir, 'nested', 'report'));
    md = await readFile(paths.markdown, 'utf8');
    html = await readFile(paths.html, 'utf8');
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('writes report.md, report.html and one SVG per chart, and returns the two paths', async () => {
    expect(paths.markdown).toBe(join(dir, 'nested', 'report', 'report.md'));
    expect(paths.html).toBe(join(dir, 'nested', 'report', 'report.html'));
    const files = (await readdir(join(dir, 'nested', 'report'))).sort();
    const charts = buildCharts(result);
    expect(charts.map((c) => c.id)).toEqual([
      'workers',
      'running-class',
      'running-tenant',
      'waiting-class',
      'db-connections',
      'temp-bytes',
      'provider',
      'rejections',
      'retry-denials',
      'north-latency',
    ]);
    expect(files).toEqual([...charts.map((c) => `chart-${c.id}.svg`), 'report.html', 'report.md'].sort());
  });

  it('gives the FAIL verdict, naming the failing invariant and its figure, in both files', () => {
    const verdict = verdictOf(result);
    expect(verdict.word).toBe('FAIL');
    const line = md.split('\n').find((l) => l.startsWith('**Verdict:'));
    expect(line).toBe(`**Verdict: FAIL** — 1 of 7 invariants failed: ${FAILING.name} (${FAILING.figure}).`);
    const htmlVerdict = html.match(/<p class="verdict fail" id="verdict">([\s\S]*?)<\/p>/)?.[1];
    expect(htmlVerdict).toContain('Verdict: FAIL');
    expect(htmlVerdict).toContain(FAILING.name);
    expect(htmlVerdict).toContain(FAILING.figure);
  });

  it('titles the report with store, workers, duration, scenario and start time', () => {
    expect(md.split('\n')[0]).toBe('# Sluice drill: sqlite, 3 workers, 60 s, scenario all');
    expect(md).toContain('Started 2026-12-02T12:00:00.000Z against `/tmp/drill-x/sluice.db`.');
    expect(html).toContain('<h1>Sluice drill: sqlite, 3 workers, 60 s, scenario all</h1>');
    expect(html).toContain('Started 2026-12-02T12:00:00.000Z');
  });

  it('lists every invariant with its result and figure in both files, and the failure detail', () => {
    const rows = markdownRows(md);
    for (const inv of result.invariants) {
      // Exactly three cells, even for a figure with a pipe in it.
      expect(rows.find((r) => r[0] === inv.name)).toEqual([
        inv.name,
        inv.pass ? 'PASS' : '**FAIL**',
        inv.figure,
      ]);
      const escaped = (s: string) =>
        s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/'/g, '&#39;');
      expect(html).toContain(`<td>${escaped(inv.name)}</td>`);
      expect(html).toContain(`<td>${escaped(inv.figure)}</td>`);
    }
    expect(md).toContain('### Failures');
    expect(md).toContain('op north-charge-0412: 2 provider charges (keys ch_91a, ch_91b)');
    expect(html).toContain('<pre>op north-charge-0412: 2 provider charges (keys ch_91a, ch_91b)\n');
    expect(html).toContain('<tr class="failed">');
  });

  it('has the summary and phase tables', () => {
    const rows = markdownRows(md);
    for (const [label, value] of [
      ['accepted', '1,204'],
      ['succeeded', '1,118'],
      ['failed', '12'],
      ['cancelled', '31'],
      ['dead', '3'],
      ['needs_reconciliation', '0'],
      ['duplicates answered', '96'],
      ['worker kills', '4'],
    ]) {
      expect(rows).toContainEqual([label, value]);
      expect(html).toContain(`<td>${label}</td><td class="num">${value}</td>`);
    }
    expect(rows).toContainEqual([
      'North p95: baseline → under pressure',
      '118 ms → 161 ms (×1.36); objective ≤ 400 ms (3× baseline, floor 400 ms)',
    ]);
    expect(rows).toContainEqual(['pressure', '12.0 s', '27.0 s', '15 s', '75']);
    expect(rows).toContainEqual(['recovery', '48.0 s', '1:00.0', '12 s', '60']);
  });

  it('leaves the latency-under-pressure row out of a run that had no pressure phase', () => {
    const crashOnly = syntheticResult({ failCharge: false });
    crashOnly.phases = crashOnly.phases.filter((p) => p.name !== 'pressure');
    crashOnly.settings = { ...crashOnly.settings, scenario: 'crash' };
    const labels = markdownRows(renderMarkdown(crashOnly, [])).map((r) => r[0]);
    expect(labels).toContain('worker kills');
    expect(labels).not.toContain('North p95: baseline → under pressure');
  });

  it('pads every Markdown table to aligned columns (the form the repository formatter keeps)', () => {
    // Runs of consecutive table lines: invariants, summary, phases, settings.
    const tables: string[][] = [];
    let previous = false;
    for (const line of md.split('\n')) {
      const inTable = line.startsWith('|');
      if (inTable && !previous) tables.push([]);
      if (inTable) tables.at(-1)!.push(line);
      previous = inTable;
    }
    expect(tables.length).toBe(4);
    for (const t of tables) {
      expect(new Set(t.map((l) => [...l].length)).size, t[0]).toBe(1);
      expect(t[1]).toMatch(/^\| -{3,}( \| -{3,})* \|$/);
    }
  });

  it('links every chart from the Markdown, and inlines every chart in the HTML', () => {
    const charts = buildCharts(result);
    for (const chart of charts) expect(md).toContain(`![${chart.title}](chart-${chart.id}.svg)`);
    expect(svgsIn(html)).toHaveLength(charts.length);
  });

  it('draws on every chart one band per phase and one path per series, with a legend', async () => {
    const charts = buildCharts(result);
    for (const chart of charts) {
      const svg = await readFile(join(dir, 'nested', 'report', `chart-${chart.id}.svg`), 'utf8');
      expect(svg.startsWith('<?xml')).toBe(true);
      expect(svg).toContain('xmlns="http://www.w3.org/2000/svg"');
      const inline = svgsIn(html).find((s) => s.includes(`id="chart-${chart.id}"`));
      expect(inline, chart.id).toBeDefined();
      for (const text of [svg, inline!]) {
        expect(tagProblems(text), chart.id).toEqual([]);
        const bands = [...text.matchAll(/<g class="phase-band" data-phase="([a-z]+)">/g)].map((m) => m[1]);
        expect(bands, chart.id).toEqual(PHASES.map((p) => p.name));
        for (const phase of PHASES) expect(text).toMatch(new RegExp(`>${phase.name}</text>`));
        expect(chart.series.length, chart.id).toBeGreaterThan(0);
        for (const series of chart.series) {
          const path = new RegExp(
            `<path class="series" data-series="${series.name.replace(/[/()]/g, '\\$&')}"[^>]* d="M`,
          );
          expect(text, `${chart.id}: ${series.name}`).toMatch(path);
          expect(text).toContain(`>${series.name}</text>`); // its legend entry
        }
        expect(text).not.toMatch(NOT_FINITE);
      }
    }
  });

  it('shows the tenants of interest, the caps and the latency objective as reference lines', () => {
    const charts = buildCharts(result);
    const tenant = charts.find((c) => c.id === 'running-tenant')!;
    expect(tenant.series.map((s) => s.name)).toEqual([
      'bulk / bulk',
      'bulk / interactive',
      'north / interactive',
    ]);
    expect(tenant.refLines?.map((r) => r.label)).toEqual([
      'cap bulk / bulk: 3',
      'cap bulk / interactive: 1',
      'cap north / interactive: 2',
    ]);
    const latency = charts.find((c) => c.id === 'north-latency')!;
    expect(latency.refLines?.map((r) => r.value)).toEqual([118, 400]); // the floor wins over 3 × 118
    const rejections = charts.find((c) => c.id === 'rejections')!;
    expect(rejections.series.map((s) => s.name)).toEqual(['budget-exhausted', 'tenant-queue-full']);
    // Byte axes are labelled in binary units, on round numbers of the unit.
    const temp = renderChart(charts.find((c) => c.id === 'temp-bytes')!);
    expect(temp).toMatch(/>\d+ MiB<\/text>/);
  });

  it('writes HTML whose tags all match and that loads nothing from outside', () => {
    expect(html.startsWith('<!doctype html>')).toBe(true);
    expect(tagProblems(html)).toEqual([]);
    expect(html).not.toMatch(/<script|<link|<img|<iframe|@import|url\((?!#)/i);
    expect(html).not.toMatch(/\s(?:src|href)="(?!#)/);
    expect(html).not.toMatch(NOT_FINITE);
    expect(md).not.toMatch(NOT_FINITE);
  });

  it('renders the same bytes for the same result', async () => {
    const again = join(dir, 'again');
    const second = await writeReport(result, again);
    expect(await readFile(second.html, 'utf8')).toBe(html);
    expect(await readFile(second.markdown, 'utf8')).toBe(md);
  });
});

describe('escaping', () => {
  it('shows names and figures as written, in Markdown and in HTML', async () => {
    const base = syntheticResult({ failCharge: true });
    const name = 'caps for <north> & *bulk* [x] `y` _z_ | a_b';
    const figure = 'north/interactive 3 > 2 at 4.2 s; p95 < 400 ms';
    const result = {
      ...base,
      invariants: [...base.invariants, { name, pass: false, figure, detail: '<script>x</script>' }],
    };
    const md = renderMarkdown(result, []);
    const row = markdownRows(md).find((r) => r[0]?.startsWith('caps for'));
    expect(row).toEqual([
      'caps for \\<north> & \\*bulk\\* \\[x\\] \\`y\\` \\_z\\_ | a_b',
      '**FAIL**',
      figure, // nothing in it that Markdown would reinterpret, so left readable
    ]);
    const html = renderHtml(result, []);
    expect(html).toContain('<td>caps for &lt;north&gt; &amp; *bulk* [x] `y` _z_ | a_b</td>');
    expect(html).toContain('<pre>&lt;script&gt;x&lt;/script&gt;</pre>');
    expect(html).not.toContain('<script>');
    expect(tagProblems(html)).toEqual([]);
  });
});

describe('a deliberately broken run', () => {
  it('says so above the verdict in both files, and in the settings', () => {
    const base = syntheticResult({ failCharge: true });
    const result = { ...base, settings: { ...base.settings, break: 'fresh-effect-key' } };
    const md = renderMarkdown(result, []);
    const lines = md.split('\n');
    const warning = lines.findIndex((l) =>
      l.startsWith('> **Warning:** This run used a deliberately broken'),
    );
    expect(warning).toBeGreaterThan(0);
    expect(lines[warning]).toContain('(fresh-effect-key)');
    expect(warning).toBeLessThan(lines.findIndex((l) => l.startsWith('**Verdict:')));
    expect(markdownRows(md)).toContainEqual(['deliberately broken', 'fresh-effect-key']);
    const html = renderHtml(result, []);
    expect(html).toMatch(
      /<p class="broken" id="broken"><strong>Warning:<\/strong> This run used [^<]*fresh-effect-key/,
    );
    expect(html.indexOf('id="broken"')).toBeLessThan(html.indexOf('id="verdict"'));
    expect(renderHtml(base, [])).not.toContain('id="broken"');
    expect(renderMarkdown(base, [])).not.toContain('Warning');
  });
});

describe('verdict', () => {
  it('is PASS only when the drill passed, all invariants passed, and there was at least one', () => {
    const pass = syntheticResult({ failCharge: false });
    expect(verdictOf(pass)).toMatchObject({ word: 'PASS', reason: 'all 7 invariants held.' });
    expect(verdictOf({ ...pass, invariants: [] })).toMatchObject({
      word: 'FAIL',
      reason: 'no invariant was checked.',
    });
    expect(verdictOf({ ...pass, passed: false }).word).toBe('FAIL');
    const contradicted = syntheticResult({ failCharge: true });
    expect(verdictOf({ ...contradicted, passed: true }).word).toBe('FAIL');
  });
});

describe('edge cases', () => {
  const base = syntheticResult({ failCharge: false });
  const cases: Array<[string, DrillResult]> = [
    ['no samples', { ...base, samples: [] }],
    ['one sample', { ...base, samples: [base.samples[40]!] }],
    ['all zeros', { ...base, samples: base.samples.map((s) => zeroSample(s.t)) }],
    [
      'no phases, no samples, no invariants',
      { ...base, phases: [], samples: [], invariants: [], passed: false },
    ],
    ['zero duration', { ...base, settings: { ...base.settings, durationMs: 0 }, phases: [], samples: [] }],
    [
      'huge values',
      {
        ...base,
        samples: base.samples.map((s, i) => ({
          ...s,
          tempBytes: i === 10 ? 8 * 2 ** 50 : s.tempBytes,
          providerCalls: s.providerCalls * 1e12,
          dbConnections: i === 5 ? Number.MAX_VALUE : s.dbConnections,
          northLatencyMs: i === 7 ? [1e9] : s.northLatencyMs,
        })),
      },
    ],
    [
      'non-finite values',
      {
        ...base,
        samples: base.samples.map((s, i) => ({
          ...s,
          tempBytes: i % 7 === 0 ? Number.NaN : s.tempBytes,
          dbConnections: i === 3 ? Number.POSITIVE_INFINITY : s.dbConnections,
          northLatencyMs: i === 9 ? [Number.NaN, 50] : s.northLatencyMs,
        })),
        summary: { ...base.summary, northP95BaselineMs: 0, northP95PressureMs: Number.NaN },
      },
    ],
  ];

  it.each(cases)('%s: renders both files without throwing, balanced, with no NaN', async (_name, result) => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-report-edge-'));
    try {
      const paths = await writeReport(result, dir);
      const html = await readFile(paths.html, 'utf8');
      const md = await readFile(paths.markdown, 'utf8');
      expect(tagProblems(html)).toEqual([]);
      expect(html).not.toMatch(NOT_FINITE);
      expect(md).not.toMatch(NOT_FINITE);
      const svgs = svgsIn(html);
      expect(svgs).toHaveLength(10);
      for (const svg of svgs) {
        expect(svg).toMatch(/viewBox="0 0 960 \d+(\.\d)?"/);
        expect(svg.match(/<g class="phase-band"/g)?.length ?? 0).toBe(result.phases.length);
      }
      if (result.samples.length === 0) {
        expect(svgs.every((s) => s.includes('>No samples</text>'))).toBe(true);
        expect(html).not.toContain('<path class="series"');
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('draws a lone sample as a dot, and an all-zero series as a flat line on a 0–1 scale', () => {
    const one = renderChart({
      id: 'one',
      title: 'one',
      xLabel: 't',
      xFormat: 'offset',
      yLabel: 'n',
      yFormat: 'count',
      series: [{ name: 'a', kind: 'step', points: [{ x: 500, y: 3 }] }],
    });
    expect(one).toMatch(/<path class="series" data-series="a"[^>]* d="M[\d.]+ [\d.]+m-2\.2 0a2\.2/);
    const zeros = renderChart({
      id: 'zeros',
      title: 'zeros',
      xLabel: 't',
      xFormat: 'offset',
      xDomain: [0, 10_000],
      yLabel: 'n',
      yFormat: 'count',
      series: [{ name: 'z', kind: 'line', points: [0, 1, 2, 3].map((i) => ({ x: i * 1000, y: 0 })) }],
    });
    const yLabels = [...zeros.matchAll(/text-anchor="end" fill="#444">([^<]+)</g)].map((m) => m[1]);
    expect(yLabels).toEqual(['0', '1']);
    expect(zeros).not.toMatch(NOT_FINITE);
  });

  it('gives reference lines at the same height one shared label, drawn above the series', () => {
    const svg = renderChart({
      id: 'refs',
      title: 'refs',
      xLabel: 't',
      xFormat: 'offset',
      yLabel: 'n',
      yFormat: 'count',
      series: [{ name: 's', kind: 'step', points: [0, 1, 2].map((i) => ({ x: i * 1000, y: i })) }],
      refLines: [
        { label: 'cap a: 2', value: 2 },
        { label: 'cap b: 2', value: 2 },
        { label: 'slots: 9', value: 9 },
      ],
    });
    expect(svg.match(/<line class="ref-line"/g)).toHaveLength(3);
    const labels = [...svg.matchAll(/<text class="ref-label"[^>]*>([^<]+)</g)].map((m) => m[1]);
    expect(labels).toEqual(['cap a: 2 · cap b: 2', 'slots: 9']);
    expect(svg.indexOf('class="ref-label"')).toBeGreaterThan(svg.indexOf('<path class="series"'));
  });

  it('breaks a line at a gap and keeps both runs', () => {
    const svg = renderChart({
      id: 'gap',
      title: 'gap',
      xLabel: 't',
      xFormat: 'offset',
      yLabel: 'ms',
      yFormat: 'ms',
      series: [
        {
          name: 'g',
          kind: 'line',
          points: [
            { x: 0, y: 1 },
            { x: 1000, y: 2 },
            { x: 2000, y: null },
            { x: 3000, y: 3 },
            { x: 4000, y: 4 },
          ],
        },
      ],
    });
    const d = svg.match(/data-series="g"[^>]* d="([^"]+)"/)?.[1] ?? '';
    expect(d.match(/M/g)).toHaveLength(2);
  });

  it('picks nice ticks, integers for counts, and stays finite at the extremes', () => {
    expect(niceTicks(0, 87, { integer: true })).toEqual({
      min: 0,
      max: 100,
      values: [0, 20, 40, 60, 80, 100],
    });
    expect(niceTicks(0, 0, { integer: true }).values).toEqual([0, 1]);
    expect(niceTicks(0, 60_000, { time: true, target: 10, extend: false }).values).toEqual(
      Array.from({ length: 13 }, (_, i) => i * 5000),
    );
    const huge = niceTicks(0, Number.MAX_VALUE);
    expect(huge.values.every(Number.isFinite)).toBe(true);
    expect(Number.isFinite(huge.max)).toBe(true);
  });
});

describe('formatProgress', () => {
  const state: ProgressState = {
    phase: 'pressure',
    elapsedMs: 23_400,
    totalMs: 60_000,
    accepted: 1234,
    succeeded: 1100,
    rejected: 87,
    running: 12,
    waiting: 340,
    kills: 3,
    providerCharges: 1100,
  };

  it('shows phase, elapsed/total and every counter on one line of at most 100 columns', () => {
    const line = formatProgress(state);
    expect(line).toBe(
      'pressure  0:23/1:00  accepted 1234 ok 1100 rejected 87 running 12 waiting 340 kills 3 charges 1100',
    );
    expect(line.length).toBeLessThanOrEqual(100);
    expect(line).not.toMatch(/[\n\r]/);
    expect(line.includes('\u001b')).toBe(false); // no terminal escapes
  });

  it('degrades instead of wrapping: shortens labels, then numbers, then cuts', () => {
    const big = {
      ...state,
      phase: 'recovery-and-more',
      elapsedMs: 3_725_000,
      totalMs: 7_200_000,
      accepted: 123_456_789,
      succeeded: 123_000_000,
      rejected: 9_876_543,
      running: 1_000,
      waiting: 250_000,
      kills: 99_999,
      providerCharges: 123_000_000,
    };
    const line = formatProgress(big);
    expect(line.length).toBeLessThanOrEqual(100);
    expect(line).toContain('1:02:05/2:00:00');
    expect(line).toContain('123M');
    expect(formatProgress(big, 40).length).toBeLessThanOrEqual(40);
    expect(formatProgress({ ...state, totalMs: 0, elapsedMs: Number.NaN })).not.toMatch(NOT_FINITE);
  });

  it('sums running, waiting and rejections of a sample', () => {
    const sample = syntheticResult({ failCharge: false }).samples[80]!;
    const counts = progressCountsFromSample(sample);
    expect(counts.running).toBe(
      Object.values(sample.running).reduce((a, t) => a + Object.values(t).reduce((x, y) => x + y, 0), 0),
    );
    expect(counts.rejected).toBe(
      sample.rejections['tenant-queue-full']! + sample.rejections['budget-exhausted']!,
    );
    expect(counts.providerCharges).toBe(sample.providerCharges);
  });
});

// ---------------------------------------------------------------------------------------------
// The page in a real browser. Debian's Chromium is not on a fresh machine unless the project
// installs it (`apt-get install -y chromium`); without it this block is skipped, and says why.

/** The part of SVGGraphicsElement used here (the project's tsconfig has no DOM lib). */
type Graphic = { getBBox(): { width: number; height: number } };

requireChromiumInCi("the report's browser test");
describe.skipIf(!hasChromium)(`report.html in Chromium (skipped when ${CHROMIUM} is not installed)`, () => {
  it('renders every chart at a non-zero size, draws every series, and requests nothing outside the page', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'sluice-report-browser-'));
    const context = await launchChromium(dir, { width: 1100, height: 900 });
    try {
      const result = syntheticResult({ failCharge: true });
      const paths = await writeReport(result, join(dir, 'report'));
      const page = await context.newPage();
      const requests: string[] = [];
      page.on('request', (request) => requests.push(request.url()));
      await page.goto(pathToFileURL(paths.html).href, { waitUntil: 'load' });

      const png = await page.screenshot({ fullPage: true });
      expect(png.subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a');
      const pngWidth = png.readUInt32BE(16);
      const pngHeight = png.readUInt32BE(20);
      expect(pngWidth).toBe(1100);
      expect(pngHeight).toBeGreaterThan(2000); // ten charts and four tables

      const boxes = await page.$$eval('svg.chart', (svgs) =>
        svgs.map((svg) => {
          const box = svg.getBoundingClientRect();
          const paths = [...svg.querySelectorAll('path.series')].map((p) => {
            const b = (p as unknown as Graphic).getBBox();
            return { series: p.getAttribute('data-series'), width: b.width, height: b.height };
          });
          const bands = [...svg.querySelectorAll('g.phase-band rect')].map(
            (r) => (r as unknown as Graphic).getBBox().width,
          );
          return { id: svg.id, width: box.width, height: box.height, paths, bands };
        }),
      );
      expect(boxes.map((b) => b.id)).toEqual(buildCharts(result).map((c) => `chart-${c.id}`));
      for (const box of boxes) {
        expect(box.width, box.id).toBeGreaterThan(500);
        expect(box.height, box.id).toBeGreaterThan(150);
        expect(box.paths.length, box.id).toBeGreaterThan(0);
        for (const p of box.paths) expect(p.width + p.height, `${box.id}: ${p.series}`).toBeGreaterThan(0);
        expect(box.bands).toHaveLength(PHASES.length);
        for (const w of box.bands) expect(w, box.id).toBeGreaterThan(0);
      }
      const verdict = await page.textContent('#verdict');
      expect(verdict).toContain('Verdict: FAIL');
      expect(requests.filter((url) => !url.startsWith('file:'))).toEqual([]);
    } finally {
      await context.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

// ---------------------------------------------------------------------------------------------
// The placeholder example for the docs, only on request.
