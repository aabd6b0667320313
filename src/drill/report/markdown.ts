/**
 * @module drill/report/markdown
 * `report.md`: the verdict, the invariant table (failures' details below it), the summary, the
 * phases, the settings, and the charts as images linking to the `chart-<id>.svg` files written
 * beside it — so the report reads in any Markdown viewer, a code review or a CI artifact listing.
 */
import type { DrillResult } from '../types.js';
import { breakNotice, phaseRows, runLabel, settingsRows, summaryRows, verdictOf } from './content.js';
import { escapeMarkdownCell as cell, escapeMarkdownText as plain } from './format.js';

/** A chart as the Markdown links it: its title and the file name beside `report.md`. */
export interface ChartFile {
  title: string;
  file: string;
}

/** Inline code that survives backticks inside the text. */
function code(text: string): string {
  const longest = Math.max(0, ...(text.match(/`+/g) ?? []).map((run) => run.length));
  const fence = '`'.repeat(longest + 1);
  const pad = text.startsWith('`') || text.endsWith('`') ? ' ' : '';
  return `${fence}${pad}${text}${pad}${fence}`;
}

/** A fenced block that survives fences inside the text. */
function block(text: string): string {
  const longest = Math.max(2, ...(text.match(/`{3,}/g) ?? []).map((run) => run.length));
  const fence = '`'.repeat(longest + 1);
  return `${fence}text\n${text.replace(/\s+$/, '')}\n${fence}`;
}

/** Columns a cell takes in a monospace view (code points; what Biome's Markdown formatter counts). */
function columns(text: string): number {
  return [...text].length;
}

/**
 * A table with its columns padded to a common width — easier to read as plain text, and the form
 * Biome's formatter gives Markdown tables, so a report committed to the repository stays lint-clean.
 */
function table(header: string[], rows: string[][]): string {
  const cells = [header, ...rows].map((r) => r.map(cell));
  const widths = header.map((_, i) => Math.max(3, ...cells.map((r) => columns(r[i] ?? ''))));
  const line = (r: string[]) =>
    `| ${widths.map((w, i) => (r[i] ?? '') + ' '.repeat(w - columns(r[i] ?? ''))).join(' | ')} |`;
  return [
    line(cells[0]!),
    `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`,
    ...cells.slice(1).map(line),
  ].join('\n');
}

/** Renders `report.md`; `charts` are the SVG files written beside it, in reading order. */
export function renderMarkdown(result: DrillResult, charts: readonly ChartFile[]): string {
  const verdict = verdictOf(result);
  const out: string[] = [];
  out.push(
    `# Sluice drill: ${plain(runLabel(result))}`,
    '',
    `Started ${result.settings.startedAt} against ${code(result.settings.db)}.`,
    '',
    ...(breakNotice(result) ? [`> **Warning:** ${plain(breakNotice(result)!)}`, ''] : []),
    `**Verdict: ${verdict.word}** — ${plain(verdict.reason)}`,
    '',
    '## Invariants',
    '',
    result.invariants.length === 0
      ? '_No invariant was checked._'
      : table(
          ['Invariant', 'Result', 'Figure'],
          result.invariants.map((i) => [plain(i.name), i.pass ? 'PASS' : '**FAIL**', plain(i.figure)]),
        ),
    '',
  );
  if (verdict.failed.length > 0) {
    out.push('### Failures', '');
    for (const failure of verdict.failed) {
      out.push(`#### ${plain(failure.name)}`, '', plain(failure.figure), '');
      if (failure.detail) out.push(block(failure.detail), '');
    }
  }
  out.push(
    '## Summary',
    '',
    table(
      ['Measure', 'Value'],
      summaryRows(result).map((r) => [plain(r.label), plain(r.value)]),
    ),
    '',
    '## Phases',
    '',
    result.phases.length === 0
      ? '_No phases were recorded._'
      : table(
          ['Phase', 'Start', 'End', 'Duration', 'Samples'],
          phaseRows(result).map((p) => [plain(p.name), p.start, p.end, p.duration, String(p.samples)]),
        ),
    '',
    'Times are since the drill started. On every chart the phases are the shaded, labelled bands.',
    '',
    '## Charts',
    '',
  );
  for (const chart of charts) {
    out.push(`### ${chart.title}`, '', `![${chart.title.replace(/[[\]]/g, '')}](${chart.file})`, '');
  }
  out.push(
    '## Settings',
    '',
    table(
      ['Setting', 'Value'],
      settingsRows(result).map((r) => [plain(r.label), plain(r.value)]),
    ),
    '',
    'The same report with the charts inline: [report.html](report.html).',
    '',
  );
  return out.join('\n');
}
