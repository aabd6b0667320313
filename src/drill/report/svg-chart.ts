/**
 * @module drill/report/svg-chart
 * A small time-series chart renderer that writes SVG text itself, so the drill's report needs no
 * charting dependency and its charts open anywhere: inline in an HTML page, or as `.svg` files a
 * Markdown viewer shows. One function, `renderChart(spec)`, draws:
 *
 * - series: `line` (points joined), `step` (a sampled gauge or counter held until the next
 *   sample), `scatter` (one dot per observation) — each series is exactly one `<path>`;
 * - bands: labelled, shaded spans of the x axis (the drill's phases), with a boundary line at each
 *   start and a `<title>` tooltip;
 * - reference lines: dashed horizontal lines with a label (a cap, a baseline, an objective);
 * - axes with "nice" ticks in the value's unit (counts, binary byte sizes, milliseconds, offsets
 *   since the start), grid lines, a legend that wraps.
 *
 * Robustness, because the input is whatever a drill measured: an empty series draws nothing and a
 * chart with no data says so; a lone point (or a point between gaps) is drawn as a dot; an all-zero
 * series gets a 0–1 scale; values are clamped to ±1e300 so scaling never overflows; non-finite
 * values are gaps. No coordinate in the output is ever `NaN` or `Infinity` (see `svgNumber`).
 */
import { escapeXml, svgNumber } from './format.js';
import {
  clampValue,
  extent,
  formatTick,
  linearScale,
  niceTicks,
  type Scale,
  type ValueFormat,
  yTicks,
} from './scale.js';

export type { ValueFormat } from './scale.js';

/** One observation; `y: null` (or a non-finite y) is a gap in a line or step series. */
export interface ChartPoint {
  x: number;
  y: number | null;
}

export interface ChartSeries {
  name: string;
  kind: 'line' | 'step' | 'scatter';
  points: readonly ChartPoint[];
  /** CSS colour; by default the next one of `PALETTE`. */
  color?: string;
}

/** A shaded span of the x axis, e.g. one phase of the drill. */
export interface ChartBand {
  label: string;
  start: number;
  end: number;
  color: string;
}

/** A dashed horizontal line at `value`, e.g. a cap or an objective. */
export interface ChartRefLine {
  label: string;
  value: number;
  color?: string;
}

export interface ChartSpec {
  /** Unique within a page: used for element ids and file names. Letters, digits and `-` only. */
  id: string;
  title: string;
  xLabel: string;
  xFormat: ValueFormat;
  /** The x range to show; by default the range of the data and bands. */
  xDomain?: readonly [number, number];
  yLabel: string;
  yFormat: ValueFormat;
  series: readonly ChartSeries[];
  bands?: readonly ChartBand[];
  refLines?: readonly ChartRefLine[];
  /** Width of the whole SVG in px (default 960); the height follows from the legend. */
  width?: number;
  /** Height of the plotting area in px (default 190). */
  plotHeight?: number;
}

/** Tableau 10: distinguishable, and readable on white. */
export const PALETTE = [
  '#4e79a7',
  '#f28e2b',
  '#e15759',
  '#76b7b2',
  '#59a14f',
  '#edc948',
  '#b07aa1',
  '#ff9da7',
  '#9c755f',
  '#bab0ac',
] as const;

const FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
const CHAR_WIDTH = 6.6; // average advance of the 12 px font, for layout estimates only
const MARGIN = { left: 74, right: 20 };
const LEGEND_ROW = 18;
const DOT_RADIUS = 2.2;

function validPoints(points: readonly ChartPoint[]): Array<{ x: number; y: number | null }> {
  return points
    .filter((p) => Number.isFinite(p.x))
    .map((p) => ({
      x: clampValue(p.x),
      y: p.y !== null && Number.isFinite(p.y) ? clampValue(p.y) : null,
    }))
    .sort((a, b) => a.x - b.x);
}

function dot(x: string, y: string): string {
  const r = DOT_RADIUS;
  return `M${x} ${y}m${-r} 0a${r} ${r} 0 1 0 ${2 * r} 0a${r} ${r} 0 1 0 ${-2 * r} 0`;
}

/** The `d` of one series: runs of defined points joined, lone points as dots, gaps skipped. */
function seriesPath(series: ChartSeries, sx: Scale, sy: Scale): string {
  const points = validPoints(series.points);
  if (series.kind === 'scatter') {
    return points
      .filter((p) => p.y !== null)
      .map((p) => dot(svgNumber(sx(p.x)), svgNumber(sy(p.y!))))
      .join('');
  }
  // Split into runs of defined points; each run is one subpath.
  const runs: Array<Array<{ x: number; y: number }>> = [];
  let run: Array<{ x: number; y: number }> = [];
  for (const p of points) {
    if (p.y === null) {
      if (run.length > 0) runs.push(run);
      run = [];
    } else {
      run.push({ x: p.x, y: p.y });
    }
  }
  if (run.length > 0) runs.push(run);

  const parts: string[] = [];
  for (const r of runs) {
    const first = r[0]!;
    if (r.length === 1) {
      parts.push(dot(svgNumber(sx(first.x)), svgNumber(sy(first.y))));
      continue;
    }
    parts.push(`M${svgNumber(sx(first.x))} ${svgNumber(sy(first.y))}`);
    let lastX = svgNumber(sx(first.x));
    let lastY = svgNumber(sy(first.y));
    for (let i = 1; i < r.length; i++) {
      const p = r[i]!;
      const x = svgNumber(sx(p.x));
      const y = svgNumber(sy(p.y));
      const isLast = i === r.length - 1;
      if (series.kind === 'step') {
        // Hold the value until the next sample; unchanged values only extend the run.
        if (y !== lastY) {
          parts.push(`H${x}V${y}`);
          lastX = x;
          lastY = y;
        } else if (isLast && x !== lastX) {
          parts.push(`H${x}`);
          lastX = x;
        }
      } else if (x !== lastX || y !== lastY || isLast) {
        parts.push(`L${x} ${y}`);
        lastX = x;
        lastY = y;
      }
    }
  }
  return parts.join('');
}

interface LegendItem {
  label: string;
  color: string;
  kind: 'line' | 'step' | 'scatter' | 'ref' | 'band';
}

function textWidth(text: string, charWidth = CHAR_WIDTH): number {
  return text.length * charWidth;
}

/** Shortens `text` with an ellipsis to fit `width` px; empty when not even two characters fit. */
function fitText(text: string, width: number, charWidth = CHAR_WIDTH): string {
  const max = Math.floor(width / charWidth);
  if (text.length <= max) return text;
  if (max < 3) return '';
  return text.slice(0, max - 1) + '…';
}

function layoutLegend(items: LegendItem[], width: number): Array<LegendItem & { x: number; row: number }> {
  const placed: Array<LegendItem & { x: number; row: number }> = [];
  let x = 0;
  let row = 0;
  for (const item of items) {
    const w = 26 + textWidth(item.label) + 18;
    if (x > 0 && x + w > width) {
      row += 1;
      x = 0;
    }
    placed.push({ ...item, x, row });
    x += w;
  }
  return placed;
}

function legendSwatch(item: LegendItem, x: number, y: number): string {
  const c = escapeXml(item.color);
  switch (item.kind) {
    case 'scatter':
      return `<circle cx="${svgNumber(x + 10)}" cy="${svgNumber(y)}" r="3" fill="${c}"/>`;
    case 'ref':
      return `<line x1="${svgNumber(x)}" x2="${svgNumber(x + 20)}" y1="${svgNumber(y)}" y2="${svgNumber(y)}" stroke="${c}" stroke-width="1.5" stroke-dasharray="5 3"/>`;
    case 'band':
      return `<rect x="${svgNumber(x)}" y="${svgNumber(y - 6)}" width="20" height="12" fill="${c}" fill-opacity="0.25"/>`;
    default:
      return `<line x1="${svgNumber(x)}" x2="${svgNumber(x + 20)}" y1="${svgNumber(y)}" y2="${svgNumber(y)}" stroke="${c}" stroke-width="2.5"/>`;
  }
}

/**
 * Renders one chart as a standalone SVG document fragment (it carries its own `xmlns`, so the
 * same text is a valid `.svg` file and valid inline SVG in HTML).
 *
 * @example
 * ```ts
 * renderChart({
 *   id: 'workers', title: 'Workers alive', xLabel: 'time since start', xFormat: 'offset',
 *   yLabel: 'processes', yFormat: 'count',
 *   series: [{ name: 'alive', kind: 'step', points: [{ x: 0, y: 4 }, { x: 250, y: 3 }] }],
 *   bands: [{ label: 'baseline', start: 0, end: 10_000, color: '#9aa5b1' }],
 * });
 * ```
 */
export function renderChart(spec: ChartSpec): string {
  const width = spec.width ?? 960;
  const plotHeight = spec.plotHeight ?? 190;
  const bands = (spec.bands ?? []).filter((b) => Number.isFinite(b.start) && Number.isFinite(b.end));
  const refLines = (spec.refLines ?? []).filter((r) => Number.isFinite(r.value));
  const series = spec.series.map((s, i) => ({ ...s, color: s.color ?? PALETTE[i % PALETTE.length]! }));
  const id = spec.id.replace(/[^A-Za-z0-9-]/g, '-');

  // Domains. x: as given, else data and bands; y: from 0 (or below, for negative data) to the max.
  const all = series.flatMap((s) => validPoints(s.points));
  const defined = all.filter((p) => p.y !== null) as Array<{ x: number; y: number }>;
  let x0: number;
  let x1: number;
  if (spec.xDomain && Number.isFinite(spec.xDomain[0]) && Number.isFinite(spec.xDomain[1])) {
    [x0, x1] = [clampValue(spec.xDomain[0]), clampValue(spec.xDomain[1])];
  } else {
    const xs = extent([...all.map((p) => p.x), ...bands.flatMap((b) => [b.start, b.end])]);
    x0 = xs?.min ?? 0;
    x1 = xs?.max ?? 1;
  }
  if (!(x1 > x0)) x1 = x0 + 1000;
  const ys = extent([...defined.map((p) => p.y), ...refLines.map((r) => clampValue(r.value))]);
  const yMin = Math.min(0, ys?.min ?? 0);
  // Headroom, so a series or a reference line at its maximum does not run into the band labels.
  const yMax = Math.max(0, ys?.max ?? 0) * 1.08;
  const xt = niceTicks(x0, x1, { target: 10, time: spec.xFormat === 'offset', extend: false });
  const yt = yTicks(yMin, yMax, spec.yFormat);
  const yScaleMax = Math.max(Math.abs(yt.min), Math.abs(yt.max));

  // Layout, top to bottom: title, band labels, plot, x ticks, x label, legend.
  const left = MARGIN.left;
  const plotWidth = width - MARGIN.left - MARGIN.right;
  const top = bands.length > 0 ? 46 : 32;
  const bottom = top + plotHeight;
  const sx = linearScale(x0, x1, left, left + plotWidth);
  const sy = linearScale(yt.min, yt.max, bottom, top);

  const legendItems: LegendItem[] = [
    ...series.map((s) => ({ label: s.name, color: s.color, kind: s.kind })),
    ...refLines.map((r) => ({ label: r.label, color: r.color ?? '#555', kind: 'ref' as const })),
  ];
  const legend = layoutLegend(legendItems, plotWidth);
  const legendRows = legend.length > 0 ? legend[legend.length - 1]!.row + 1 : 0;
  const legendTop = bottom + 50;
  const height = legendTop + legendRows * LEGEND_ROW + 4;

  const out: string[] = [];
  const n = svgNumber;
  out.push(
    `<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="chart-${id}" viewBox="0 0 ${width} ${n(height)}" width="${width}" height="${n(height)}" role="img" aria-labelledby="chart-${id}-title" font-family="${FONT}" font-size="12">`,
    `<title id="chart-${id}-title">${escapeXml(spec.title)}</title>`,
    `<defs><clipPath id="chart-${id}-clip"><rect x="${left - 4}" y="${top - 4}" width="${plotWidth + 8}" height="${plotHeight + 8}"/></clipPath></defs>`,
    `<rect width="${width}" height="${n(height)}" fill="#fff"/>`,
    `<text x="${left}" y="18" font-size="14" font-weight="600" fill="#111">${escapeXml(spec.title)}</text>`,
  );

  // Phase bands: shaded span, boundary line at the start, label above the plot.
  for (const band of bands) {
    const bx0 = Math.max(left, Math.min(left + plotWidth, sx(band.start)));
    const bx1 = Math.max(left, Math.min(left + plotWidth, sx(band.end)));
    const color = escapeXml(band.color);
    const label = fitText(band.label, bx1 - bx0 - 6);
    const tooltip = `${band.label}: ${formatTick(band.start, spec.xFormat, x1)} – ${formatTick(band.end, spec.xFormat, x1)}`;
    out.push(
      `<g class="phase-band" data-phase="${escapeXml(band.label)}">`,
      `<title>${escapeXml(tooltip)}</title>`,
      `<rect x="${n(bx0)}" y="${top}" width="${n(Math.max(0, bx1 - bx0))}" height="${plotHeight}" fill="${color}" fill-opacity="0.14"/>`,
      `<line x1="${n(bx0)}" x2="${n(bx0)}" y1="${top - 14}" y2="${bottom}" stroke="${color}" stroke-width="1.2"/>`,
      label
        ? `<text x="${n(bx0 + 4)}" y="${top - 5}" fill="#333" font-size="11">${escapeXml(label)}</text>`
        : '',
      '</g>',
    );
  }
  if (bands.length > 0) {
    const last = bands.reduce((a, b) => (b.end > a.end ? b : a));
    const ex = Math.max(left, Math.min(left + plotWidth, sx(last.end)));
    out.push(
      `<line class="phase-end" x1="${n(ex)}" x2="${n(ex)}" y1="${top - 14}" y2="${bottom}" stroke="${escapeXml(last.color)}" stroke-width="1.2"/>`,
    );
  }

  // Grid and y axis.
  out.push('<g class="y-axis">');
  for (const v of yt.values) {
    const y = n(sy(v));
    out.push(
      `<line x1="${left}" x2="${left + plotWidth}" y1="${y}" y2="${y}" stroke="#000" stroke-opacity="${v === 0 ? 0.5 : 0.08}"/>`,
      `<text x="${left - 6}" y="${y}" dy="0.32em" text-anchor="end" fill="#444">${escapeXml(formatTick(v, spec.yFormat, yScaleMax))}</text>`,
    );
  }
  const yLabelY = n(top + plotHeight / 2);
  out.push(
    `<text transform="translate(14 ${yLabelY}) rotate(-90)" text-anchor="middle" fill="#444">${escapeXml(spec.yLabel)}</text>`,
    '</g>',
  );

  // x axis.
  out.push(
    '<g class="x-axis">',
    `<line x1="${left}" x2="${left + plotWidth}" y1="${bottom}" y2="${bottom}" stroke="#000" stroke-opacity="0.5"/>`,
  );
  for (const v of xt.values) {
    const x = n(sx(v));
    out.push(
      `<line x1="${x}" x2="${x}" y1="${bottom}" y2="${bottom + 5}" stroke="#000" stroke-opacity="0.5"/>`,
      `<text x="${x}" y="${bottom + 18}" text-anchor="middle" fill="#444">${escapeXml(formatTick(v, spec.xFormat, x1))}</text>`,
    );
  }
  out.push(
    `<text x="${n(left + plotWidth / 2)}" y="${bottom + 36}" text-anchor="middle" fill="#444">${escapeXml(spec.xLabel)}</text>`,
    '</g>',
  );

  // Reference lines (those within a label's height of each other share one label), then the
  // series on top of them, clipped to the plot.
  const refGroups: Array<{ y: number; refs: ChartRefLine[] }> = [];
  for (const ref of [...refLines].sort((a, b) => a.value - b.value)) {
    const y = sy(ref.value);
    const group = refGroups.find((g) => Math.abs(g.y - y) < 12);
    if (group) group.refs.push(ref);
    else refGroups.push({ y, refs: [ref] });
  }
  const refLabels: string[] = [];
  for (const group of refGroups) {
    for (const ref of group.refs) {
      const y = n(sy(ref.value));
      out.push(
        `<line class="ref-line" x1="${left}" x2="${left + plotWidth}" y1="${y}" y2="${y}" stroke="${escapeXml(ref.color ?? '#555')}" stroke-width="1.5" stroke-dasharray="5 3"/>`,
      );
    }
    const label = group.refs.map((r) => r.label).join(' · ');
    const color = escapeXml(group.refs.length === 1 ? (group.refs[0]!.color ?? '#555') : '#444');
    refLabels.push(
      `<text class="ref-label" x="${left + plotWidth - 4}" y="${n(group.y)}" dy="-0.35em" text-anchor="end" fill="${color}" font-size="11" stroke="#fff" stroke-width="3" paint-order="stroke">${escapeXml(label)}</text>`,
    );
  }
  out.push(`<g class="series-group" clip-path="url(#chart-${id}-clip)">`);
  for (const s of series) {
    const d = seriesPath(s, sx, sy);
    if (d === '') continue;
    const color = escapeXml(s.color);
    const paint =
      s.kind === 'scatter'
        ? `fill="${color}" fill-opacity="0.55" stroke="none"`
        : `fill="none" stroke="${color}" stroke-width="1.8" stroke-linejoin="round"`;
    out.push(
      `<path class="series" data-series="${escapeXml(s.name)}" data-kind="${s.kind}" ${paint} d="${d}"/>`,
    );
  }
  out.push('</g>');
  // Labels of reference lines above the series, on a white halo, so a busy series cannot hide them.
  out.push(...refLabels);
  if (defined.length === 0) {
    out.push(
      `<text class="no-data" x="${n(left + plotWidth / 2)}" y="${n(top + plotHeight / 2)}" text-anchor="middle" fill="#888">No samples</text>`,
    );
  }

  // Legend.
  out.push('<g class="legend">');
  for (const item of legend) {
    const x = left + item.x;
    const y = legendTop + item.row * LEGEND_ROW;
    out.push(
      legendSwatch(item, x, y),
      `<text x="${n(x + 26)}" y="${n(y)}" dy="0.32em" fill="#222">${escapeXml(item.label)}</text>`,
    );
  }
  out.push('</g>', '</svg>');
  return out.filter((line) => line !== '').join('\n');
}
