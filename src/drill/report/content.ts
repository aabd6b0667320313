/**
 * @module drill/report/content
 * What the report says, independent of how it is laid out: the title, the verdict, and the rows
 * of the invariant, summary, phase and settings tables. The Markdown and HTML renderers both read
 * from here, so the two files always state the same figures.
 *
 * The verdict is PASS only when the drill says it passed, every invariant passed, and at least one
 * invariant was checked: a drill that checked nothing proves nothing, and a disagreement between
 * `passed` and the invariants is reported rather than resolved in the drill's favour.
 */
import type { DrillResult, InvariantResult } from '../types.js';
import { latencyObjectiveMs } from './charts.js';
import { formatInteger, formatMs, formatOffset } from './format.js';

export interface Verdict {
  pass: boolean;
  /** `PASS` or `FAIL`. */
  word: 'PASS' | 'FAIL';
  /** One sentence after the word: what held, or what failed with its figure. */
  reason: string;
  failed: InvariantResult[];
}

export function verdictOf(result: DrillResult): Verdict {
  const total = result.invariants.length;
  const failed = result.invariants.filter((i) => !i.pass);
  let reason: string;
  if (total === 0) {
    reason = 'no invariant was checked.';
  } else if (failed.length > 0) {
    const list = failed.map((i) => `${i.name} (${i.figure})`).join('; ');
    reason = `${failed.length} of ${total} invariant${total === 1 ? '' : 's'} failed: ${list}.`;
  } else if (!result.passed) {
    reason = `the drill reported a failure although all ${total} invariants passed.`;
  } else {
    reason = `all ${total} invariant${total === 1 ? '' : 's'} held.`;
  }
  const pass = result.passed && total > 0 && failed.length === 0;
  return { pass, word: pass ? 'PASS' : 'FAIL', reason, failed };
}

/** A warning when the run used a deliberately broken configuration (test-only), else null. */
export function breakNotice(result: DrillResult): string | null {
  const broken = result.settings.break;
  return broken
    ? `This run used a deliberately broken configuration (${broken}): it exists to show that the drill catches the fault.`
    : null;
}

/** The run in one line: store, workers, duration, scenario. */
export function runLabel(result: DrillResult): string {
  const s = result.settings;
  const workers = `${s.workers} worker${s.workers === 1 ? '' : 's'}`;
  return `${s.store}, ${workers}, ${formatMs(s.durationMs)}, scenario ${s.scenario}`;
}

export interface Row {
  label: string;
  value: string;
}

export function summaryRows(result: DrillResult): Row[] {
  const s = result.summary;
  const base = s.northP95BaselineMs;
  const pressure = s.northP95PressureMs;
  const ratio = base > 0 && Number.isFinite(pressure) ? ` (×${(pressure / base).toFixed(2)})` : '';
  const objective = latencyObjectiveMs(result);
  const limits = result.settings.limits;
  // A run without a pressure phase (scenario crash) measured no latency under pressure.
  const underPressure = result.phases.some((p) => p.name === 'pressure');
  return [
    { label: 'accepted', value: formatInteger(s.accepted) },
    { label: 'succeeded', value: formatInteger(s.succeeded) },
    { label: 'failed', value: formatInteger(s.failed) },
    { label: 'cancelled', value: formatInteger(s.cancelled) },
    { label: 'dead', value: formatInteger(s.dead) },
    { label: 'needs_reconciliation', value: formatInteger(s.needsReconciliation) },
    { label: 'duplicates answered', value: formatInteger(s.duplicatesAnswered) },
    { label: 'worker kills', value: formatInteger(s.kills) },
    ...(underPressure
      ? [
          {
            label: 'North p95: baseline → under pressure',
            value:
              `${formatMs(base)} → ${formatMs(pressure)}${ratio}; objective ≤ ${formatMs(objective)} ` +
              `(${limits.latencyMultiple}× baseline, floor ${formatMs(limits.latencyFloorMs)})`,
          },
        ]
      : []),
  ];
}

export interface PhaseRow {
  name: string;
  start: string;
  end: string;
  duration: string;
  samples: number;
}

export function phaseRows(result: DrillResult): PhaseRow[] {
  return result.phases.map((p) => ({
    name: p.name,
    start: formatOffset(p.startMs),
    end: formatOffset(p.endMs),
    duration: formatMs(p.endMs - p.startMs),
    samples: result.samples.filter((s) => s.t >= p.startMs && s.t < p.endMs).length,
  }));
}

function formatCaps(caps: Record<string, Record<string, number>>): string {
  const parts: string[] = [];
  for (const [cls, tenants] of Object.entries(caps)) {
    for (const [tenant, cap] of Object.entries(tenants)) parts.push(`${tenant}/${cls} ≤ ${cap}`);
  }
  return parts.length > 0 ? parts.join(', ') : '—';
}

function formatRecord(record: Record<string, number>, unit = ''): string {
  const parts = Object.entries(record).map(([k, v]) => `${k}: ${formatInteger(v)}${unit}`);
  return parts.length > 0 ? parts.join(', ') : '—';
}

export function settingsRows(result: DrillResult): Row[] {
  const s = result.settings;
  const interval = samplingInterval(result);
  return [
    { label: 'store', value: `${s.store} (${s.db})` },
    { label: 'workers', value: String(s.workers) },
    { label: 'duration', value: formatMs(s.durationMs) },
    { label: 'scenario', value: s.scenario },
    { label: 'started', value: s.startedAt },
    ...(s.break ? [{ label: 'deliberately broken', value: s.break }] : []),
    {
      label: 'samples',
      value: `${result.samples.length}${interval === null ? '' : `, every ${formatMs(interval)} (median)`}`,
    },
    { label: 'running caps (tenant/class)', value: formatCaps(s.limits.maxRunning) },
    { label: 'slots per worker', value: formatRecord(s.limits.slotsPerWorker) },
    { label: 'spend limits per window', value: formatRecord(s.limits.spendLimit) },
  ];
}

/** The median gap between consecutive samples, or null with fewer than two. */
export function samplingInterval(result: DrillResult): number | null {
  const ts = result.samples
    .map((s) => s.t)
    .filter(Number.isFinite)
    .sort((a, b) => a - b);
  if (ts.length < 2) return null;
  const gaps = ts.slice(1).map((t, i) => t - ts[i]!);
  gaps.sort((a, b) => a - b);
  return gaps[Math.floor(gaps.length / 2)]!;
}
