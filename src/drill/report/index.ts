/**
 * @module drill/report
 * Renders a `DrillResult` for people: `report.md` (tables, charts as `chart-<id>.svg` files beside
 * it) and `report.html` (one self-contained page, charts inline), plus the live progress line the
 * drill prints while it runs. Rendering is pure and deterministic — the same result gives the same
 * bytes — so reports diff cleanly and tests assert on text.
 *
 * @example
 * ```ts
 * // result: the DrillResult the run filled (drill/types.ts)
 * const { markdown, html } = await writeReport(result, 'drill-report');
 * console.log(`${verdictOf(result).word}: ${markdown}, ${html}`);
 *
 * // while it runs, after each sample (a terminal narrower than 100 columns gets a shorter line):
 * const width = Math.min(100, (process.stderr.columns ?? 101) - 1);
 * process.stderr.write(`\r${formatProgress({ phase, elapsedMs, totalMs, accepted, succeeded, kills,
 *   ...progressCountsFromSample(sample) }, width)}\u001b[K`);
 * ```
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import type { DrillResult } from '../types.js';
import { buildCharts } from './charts.js';
import { renderHtml } from './html.js';
import { renderMarkdown } from './markdown.js';
import { renderChart } from './svg-chart.js';

export { buildCharts, latencyObjectiveMs, PHASE_COLORS } from './charts.js';
export { type Verdict, verdictOf } from './content.js';
export { type InlineChart, renderHtml } from './html.js';
export { type ChartFile, renderMarkdown } from './markdown.js';
export { formatProgress, type ProgressState, progressCountsFromSample } from './progress.js';
export {
  type ChartBand,
  type ChartPoint,
  type ChartRefLine,
  type ChartSeries,
  type ChartSpec,
  renderChart,
  type ValueFormat,
} from './svg-chart.js';

/** The charts of a result, rendered once for both files. */
export function renderCharts(
  result: DrillResult,
): Array<{ id: string; title: string; file: string; svg: string }> {
  return buildCharts(result).map((spec) => ({
    id: spec.id,
    title: spec.title,
    file: `chart-${spec.id}.svg`,
    svg: renderChart(spec),
  }));
}

/**
 * Writes `report.md`, `report.html` and the `chart-<id>.svg` files into `dir` (created if
 * missing; files of the same names are replaced) and returns the absolute paths of the two reports.
 */
export async function writeReport(
  result: DrillResult,
  dir: string,
): Promise<{ markdown: string; html: string }> {
  const root = resolve(dir);
  await mkdir(root, { recursive: true });
  const charts = renderCharts(result);
  const markdown = join(root, 'report.md');
  const html = join(root, 'report.html');
  await Promise.all([
    ...charts.map((c) => writeFile(join(root, c.file), `<?xml version="1.0" encoding="UTF-8"?>\n${c.svg}\n`)),
    writeFile(markdown, renderMarkdown(result, charts)),
    writeFile(html, renderHtml(result, charts)),
  ]);
  return { markdown, html };
}
