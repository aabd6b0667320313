/**
 * @module drill/report/html
 * `report.html`: one self-contained page — inline CSS, inline SVG charts, no script, no external
 * asset — with the same verdict and tables as `report.md` and every chart of `buildCharts`. It can
 * be attached to a CI run, mailed or opened from disk, and looks the same offline.
 */
import type { DrillResult } from '../types.js';
import { PHASE_COLORS } from './charts.js';
import { breakNotice, phaseRows, runLabel, settingsRows, summaryRows, verdictOf } from './content.js';
import { escapeXml as esc } from './format.js';

const STYLE = `
:root { color-scheme: light; }
body { margin: 0; background: #f6f7f9; color: #1d2330;
  font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; }
main { max-width: 1000px; margin: 0 auto; padding: 24px 20px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 10px; border-bottom: 1px solid #d8dde5; padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
h4 { font-size: 14px; margin: 12px 0 4px; color: #b42323; }
.meta { color: #566; margin: 0 0 16px; }
.verdict { font-size: 16px; padding: 10px 14px; border-radius: 6px; border: 1px solid; }
.verdict.pass { background: #e7f6ee; border-color: #7cc49c; }
.verdict.fail { background: #fdecec; border-color: #e39a9a; }
.broken { padding: 8px 14px; border-radius: 6px; background: #fff4d6; border: 1px solid #e0b84a; }
table { border-collapse: collapse; background: #fff; width: 100%; }
th, td { text-align: left; padding: 5px 10px; border: 1px solid #dde2ea; vertical-align: top; }
th { background: #eef1f5; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.pass-cell { color: #1c7a48; font-weight: 600; }
.fail-cell { color: #b42323; font-weight: 700; }
tr.failed td { background: #fff6f6; }
pre { background: #fff; border: 1px solid #dde2ea; padding: 8px 10px; overflow-x: auto; white-space: pre-wrap; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; vertical-align: -1px; margin-right: 6px; }
figure { margin: 14px 0; background: #fff; border: 1px solid #dde2ea; border-radius: 6px; padding: 6px; }
figure svg { display: block; width: 100%; height: auto; }
.phase-key { display: flex; flex-wrap: wrap; gap: 6px 18px; margin: 6px 0 4px; }
`;

function table(header: string[], rows: string[][], rowClass: (i: number) => string = () => ''): string {
  const head = `<tr>${header.map((h) => `<th scope="col">${esc(h)}</th>`).join('')}</tr>`;
  const body = rows
    .map((r, i) => {
      const cls = rowClass(i);
      return `<tr${cls ? ` class="${cls}"` : ''}>${r.join('')}</tr>`;
    })
    .join('\n');
  return `<table>\n<thead>${head}</thead>\n<tbody>\n${body}\n</tbody>\n</table>`;
}

function td(text: string, cls = ''): string {
  return `<td${cls ? ` class="${cls}"` : ''}>${esc(text)}</td>`;
}

/** A chart as the page embeds it: its title and its SVG text. */
export interface InlineChart {
  id: string;
  title: string;
  svg: string;
}

/** Renders `report.html` with `charts` (from `renderChart`) inline, in reading order. */
export function renderHtml(result: DrillResult, charts: readonly InlineChart[]): string {
  const verdict = verdictOf(result);
  const label = runLabel(result);
  const out: string[] = [];
  out.push(
    '<!doctype html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${esc(`${verdict.word} — Sluice drill: ${label}`)}</title>`,
    `<style>${STYLE}</style>`,
    '</head>',
    '<body>',
    '<main>',
    `<h1>Sluice drill: ${esc(label)}</h1>`,
    `<p class="meta">Started ${esc(result.settings.startedAt)} against <code>${esc(result.settings.db)}</code>.</p>`,
    breakNotice(result)
      ? `<p class="broken" id="broken"><strong>Warning:</strong> ${esc(breakNotice(result)!)}</p>`
      : '',
    `<p class="verdict ${verdict.pass ? 'pass' : 'fail'}" id="verdict"><strong>Verdict: ${verdict.word}</strong> — ${esc(verdict.reason)}</p>`,
    '<h2 id="invariants">Invariants</h2>',
  );
  if (result.invariants.length === 0) {
    out.push('<p><em>No invariant was checked.</em></p>');
  } else {
    out.push(
      table(
        ['Invariant', 'Result', 'Figure'],
        result.invariants.map((i) => [
          td(i.name),
          td(i.pass ? 'PASS' : 'FAIL', i.pass ? 'pass-cell' : 'fail-cell'),
          td(i.figure),
        ]),
        (index) => (result.invariants[index]!.pass ? '' : 'failed'),
      ),
    );
  }
  if (verdict.failed.length > 0) {
    out.push('<h3>Failures</h3>');
    for (const failure of verdict.failed) {
      out.push(`<h4>${esc(failure.name)}</h4>`, `<p>${esc(failure.figure)}</p>`);
      if (failure.detail) out.push(`<pre>${esc(failure.detail)}</pre>`);
    }
  }
  out.push(
    '<h2 id="summary">Summary</h2>',
    table(
      ['Measure', 'Value'],
      summaryRows(result).map((r) => [td(r.label), td(r.value, 'num')]),
    ),
    '<h2 id="phases">Phases</h2>',
  );
  const phases = phaseRows(result);
  if (phases.length === 0) {
    out.push('<p><em>No phases were recorded.</em></p>');
  } else {
    out.push(
      table(
        ['Phase', 'Start', 'End', 'Duration', 'Samples'],
        phases.map((p) => [
          `<td><span class="swatch" style="background:${PHASE_COLORS[p.name as keyof typeof PHASE_COLORS] ?? '#999'}"></span>${esc(p.name)}</td>`,
          td(p.start, 'num'),
          td(p.end, 'num'),
          td(p.duration, 'num'),
          td(String(p.samples), 'num'),
        ]),
      ),
    );
  }
  out.push(
    '<h2 id="charts">Charts</h2>',
    '<p>Times are since the drill started. The shaded, labelled bands are the phases:</p>',
    `<div class="phase-key">${Object.entries(PHASE_COLORS)
      .filter(([name]) => result.phases.some((p) => p.name === name))
      .map(
        ([name, color]) =>
          `<span><span class="swatch" style="background:${color}"></span>${esc(name)}</span>`,
      )
      .join('')}</div>`,
  );
  for (const chart of charts) {
    out.push(`<figure id="figure-${esc(chart.id)}">`, chart.svg, '</figure>');
  }
  out.push(
    '<h2 id="settings">Settings</h2>',
    table(
      ['Setting', 'Value'],
      settingsRows(result).map((r) => [td(r.label), td(r.value)]),
    ),
    '</main>',
    '</body>',
    '</html>',
    '',
  );
  return out.filter((line, i) => line !== '' || i === out.length - 1).join('\n');
}
