/**
 * @module drill/report/charts
 * The drill's chart set: which sampled series go on which chart, how they are drawn, and which
 * reference lines make an invariant visible (configured workers, slot capacity per class, tenant
 * caps, North's baseline and objective). Every chart shares the x axis (the whole run) and draws
 * the phases as labelled bands, so the pressure and the return to baseline line up across charts.
 *
 * Keys (classes, tenants, rejection reasons) are discovered from the samples, in sorted order, so a
 * class that appears mid-run still gets its series; a key missing from a sample counts as 0 there.
 */
import type { DrillResult, PhaseName, Sample } from '../types.js';
import { formatMs, percentile } from './format.js';
import { extent } from './scale.js';
import { type ChartBand, type ChartPoint, type ChartRefLine, type ChartSpec, PALETTE } from './svg-chart.js';

/** One colour per phase, the same on every chart and in the HTML tables. */
export const PHASE_COLORS: Record<PhaseName, string> = {
  baseline: '#7f8c9a',
  pressure: '#e8871e',
  stall: '#8e63ce',
  crash: '#d64545',
  recovery: '#2e9e6a',
};

/** The tenants whose running counts get their own chart: the interactive one and the flooder. */
export const FOCUS_TENANTS = ['north', 'bulk'] as const;

/** Window of the rolling p95 drawn over North's latency scatter. */
export const LATENCY_WINDOW_MS = 2000;

/** North's latency objective under pressure, as the drill checks it: the multiple of the baseline, but never below the floor. */
export function latencyObjectiveMs(result: DrillResult): number {
  const { latencyMultiple, latencyFloorMs } = result.settings.limits;
  return Math.max(latencyMultiple * result.summary.northP95BaselineMs, latencyFloorMs);
}

function phaseBands(result: DrillResult): ChartBand[] {
  return result.phases.map((p) => ({
    label: p.name,
    start: p.startMs,
    end: p.endMs,
    color: PHASE_COLORS[p.name] ?? '#999',
  }));
}

/** The whole run: from 0 (or the earliest phase or sample) to the planned duration or the last phase or sample. */
function xDomain(result: DrillResult): [number, number] {
  const times = extent([
    0,
    result.settings.durationMs,
    ...result.phases.flatMap((p) => [p.startMs, p.endMs]),
    ...result.samples.map((s) => s.t),
  ]);
  return [times?.min ?? 0, Math.max(1, times?.max ?? 1)];
}

function sum(record: Record<string, number> | undefined): number {
  let total = 0;
  for (const v of Object.values(record ?? {})) if (Number.isFinite(v)) total += v;
  return total;
}

function sortedKeys(records: Iterable<Record<string, unknown> | undefined>): string[] {
  const keys = new Set<string>();
  for (const r of records) for (const k of Object.keys(r ?? {})) keys.add(k);
  return [...keys].sort();
}

function seriesOf(samples: readonly Sample[], value: (s: Sample) => number): ChartPoint[] {
  return samples.map((s) => ({ x: s.t, y: value(s) }));
}

/** Running or waiting, summed over tenants, one series per class. */
function perClass(samples: readonly Sample[], field: 'running' | 'waiting') {
  const classes = sortedKeys(samples.map((s) => s[field]));
  return classes.map((cls) => ({
    name: cls,
    kind: 'step' as const,
    points: seriesOf(samples, (s) => sum(s[field][cls])),
  }));
}

/**
 * Builds the chart specs, in reading order. Always the same ten ids (`workers`, `running-class`,
 * `running-tenant`, `waiting-class`, `db-connections`, `temp-bytes`, `provider`, `rejections`,
 * `retry-denials`, `north-latency`), so a report directory's file names do not depend on the data.
 */
export function buildCharts(result: DrillResult): ChartSpec[] {
  const { samples, settings } = result;
  const common = {
    xLabel: 'time since the drill started',
    xFormat: 'offset' as const,
    xDomain: xDomain(result),
    bands: phaseBands(result),
  };
  const charts: ChartSpec[] = [];

  charts.push({
    ...common,
    id: 'workers',
    title: 'Worker processes alive',
    yLabel: 'processes',
    yFormat: 'count',
    series: [{ name: 'alive', kind: 'step', points: seriesOf(samples, (s) => s.workersAlive) }],
    refLines: [{ label: `configured: ${settings.workers}`, value: settings.workers, color: '#555' }],
  });

  const runningClass = perClass(samples, 'running');
  charts.push({
    ...common,
    id: 'running-class',
    title: 'Running attempts per class (all tenants)',
    yLabel: 'attempts',
    yFormat: 'count',
    series: runningClass,
    refLines: runningClass.flatMap((s, i): ChartRefLine[] => {
      const slots = settings.limits.slotsPerWorker[s.name];
      if (slots === undefined || !Number.isFinite(slots)) return [];
      const capacity = slots * settings.workers;
      return [{ label: `${s.name} slots: ${capacity}`, value: capacity, color: PALETTE[i % PALETTE.length] }];
    }),
  });

  // Per tenant for the two that tell the story: North (must keep its service) and Bulk (floods).
  const tenantSeries: ChartSpec['series'][number][] = [];
  const tenantRefs: ChartRefLine[] = [];
  const classes = sortedKeys(samples.map((s) => s.running));
  for (const cls of classes) {
    const tenants = sortedKeys(samples.map((s) => s.running[cls]));
    for (const tenant of tenants) {
      if (!FOCUS_TENANTS.includes(tenant.toLowerCase() as (typeof FOCUS_TENANTS)[number])) continue;
      const color = PALETTE[tenantSeries.length % PALETTE.length]!;
      const name = `${tenant} / ${cls}`;
      tenantSeries.push({
        name,
        kind: 'step',
        color,
        points: seriesOf(samples, (s) => s.running[cls]?.[tenant] ?? 0),
      });
      const cap = settings.limits.maxRunning[cls]?.[tenant];
      if (cap !== undefined && Number.isFinite(cap))
        tenantRefs.push({ label: `cap ${name}: ${cap}`, value: cap, color });
    }
  }
  charts.push({
    ...common,
    id: 'running-tenant',
    title: 'Running attempts, North and Bulk, per class',
    yLabel: 'attempts',
    yFormat: 'count',
    series: tenantSeries,
    refLines: tenantRefs,
  });

  charts.push({
    ...common,
    id: 'waiting-class',
    title: 'Waiting operations per class (all tenants)',
    yLabel: 'operations',
    yFormat: 'count',
    series: perClass(samples, 'waiting'),
  });

  charts.push({
    ...common,
    id: 'db-connections',
    title: 'Database connections in use',
    yLabel: 'connections',
    yFormat: 'count',
    series: [{ name: 'in use', kind: 'step', points: seriesOf(samples, (s) => s.dbConnections) }],
  });

  charts.push({
    ...common,
    id: 'temp-bytes',
    title: 'Temporary storage on disk',
    yLabel: 'size',
    yFormat: 'bytes',
    series: [{ name: 'temp bytes', kind: 'step', points: seriesOf(samples, (s) => s.tempBytes) }],
  });

  charts.push({
    ...common,
    id: 'provider',
    title: 'Provider calls and charges (cumulative)',
    yLabel: 'requests',
    yFormat: 'count',
    series: [
      { name: 'calls', kind: 'step', points: seriesOf(samples, (s) => s.providerCalls) },
      { name: 'charges', kind: 'step', points: seriesOf(samples, (s) => s.providerCharges) },
    ],
  });

  const reasons = sortedKeys(samples.map((s) => s.rejections));
  charts.push({
    ...common,
    id: 'rejections',
    title: 'Admission rejections by reason (cumulative)',
    yLabel: 'submissions refused',
    yFormat: 'count',
    series: reasons.map((reason) => ({
      name: reason,
      kind: 'step' as const,
      points: seriesOf(samples, (s) => s.rejections[reason] ?? 0),
    })),
  });

  charts.push({
    ...common,
    id: 'retry-denials',
    title: 'Retries denied by the retry budget (cumulative)',
    yLabel: 'denials',
    yFormat: 'count',
    series: [{ name: 'denied retries', kind: 'step', points: seriesOf(samples, (s) => s.retryDenials) }],
  });

  charts.push({ ...common, ...northLatency(result) });
  return charts;
}

function northLatency(result: DrillResult): Omit<ChartSpec, 'xLabel' | 'xFormat' | 'xDomain' | 'bands'> {
  const { samples, summary } = result;
  const scatter: ChartPoint[] = samples.flatMap((s) =>
    (s.northLatencyMs ?? []).map((ms) => ({ x: s.t, y: ms })),
  );
  // Rolling p95 over the last LATENCY_WINDOW_MS, at every sample that has observations in it; a
  // gap where the window is empty (North finished nothing — itself worth seeing).
  const rolling: ChartPoint[] = [];
  let from = 0;
  for (let i = 0; i < samples.length; i++) {
    const t = samples[i]!.t;
    while (from < i && samples[from]!.t <= t - LATENCY_WINDOW_MS) from++;
    const window = samples.slice(from, i + 1).flatMap((s) => s.northLatencyMs ?? []);
    rolling.push({ x: t, y: window.length > 0 ? percentile(window, 95) : null });
  }
  const refLines: ChartRefLine[] = [];
  if (Number.isFinite(summary.northP95BaselineMs) && summary.northP95BaselineMs > 0) {
    refLines.push({
      label: `baseline p95: ${formatMs(summary.northP95BaselineMs)}`,
      value: summary.northP95BaselineMs,
      color: '#2e9e6a',
    });
  }
  const objective = latencyObjectiveMs(result);
  if (Number.isFinite(objective) && objective > 0) {
    refLines.push({ label: `objective p95: ${formatMs(objective)}`, value: objective, color: '#d64545' });
  }
  return {
    id: 'north-latency',
    title: "North's interactive latency (submit → succeeded)",
    yLabel: 'latency',
    yFormat: 'ms',
    series: [
      { name: 'one operation', kind: 'scatter', points: scatter, color: '#4e79a7' },
      { name: `p95, rolling ${LATENCY_WINDOW_MS / 1000} s`, kind: 'line', points: rolling, color: '#111' },
    ],
    refLines,
  };
}
