/**
 * @module drill/report/progress
 * The drill's live progress line: one line of plain text (no colour codes, no cursor control —
 * the caller decides whether to redraw it with `\r` on a terminal or print it now and then to a
 * log), at most `width` columns. No progress bar: elapsed/total already says it, and a bar costs
 * the columns the counters need. It degrades rather than wraps: first the labels are shortened,
 * then counts are abbreviated (12.3k), and only then is the line cut.
 */
import type { Sample } from '../types.js';
import { formatClock, formatCompact } from './format.js';

export interface ProgressState {
  /** The current phase (or anything short: `starting`, `draining`, `done`). */
  phase: string;
  elapsedMs: number;
  totalMs: number;
  accepted: number;
  succeeded: number;
  /** Submissions refused by admission, all reasons. */
  rejected: number;
  running: number;
  waiting: number;
  kills: number;
  providerCharges: number;
}

/**
 * Formats one progress line, at most `width` (default 100) columns.
 *
 * @example
 * ```ts
 * formatProgress({ phase: 'pressure', elapsedMs: 23_000, totalMs: 60_000, accepted: 1234,
 *   succeeded: 1100, rejected: 87, running: 12, waiting: 340, kills: 3, providerCharges: 1100 });
 * // 'pressure  0:23/1:00  accepted 1234 ok 1100 rejected 87 running 12 waiting 340 kills 3 charges 1100'
 * ```
 */
export function formatProgress(state: ProgressState, width = 100): string {
  const phase = state.phase.length > 9 ? state.phase.slice(0, 9) : state.phase.padEnd(9);
  const clock = `${formatClock(state.elapsedMs)}/${formatClock(state.totalMs)}`;
  const counters: Array<[label: string, short: string, value: number]> = [
    ['accepted', 'acc', state.accepted],
    ['ok', 'ok', state.succeeded],
    ['rejected', 'rej', state.rejected],
    ['running', 'run', state.running],
    ['waiting', 'wait', state.waiting],
    ['kills', 'kill', state.kills],
    ['charges', 'chg', state.providerCharges],
  ];
  const render = (labels: 'long' | 'short', numbers: 'full' | 'compact') => {
    const parts = counters.map(([label, short, value]) => {
      const v = numbers === 'full' ? plain(value) : formatCompact(value);
      return `${labels === 'long' ? label : short} ${v}`;
    });
    return `${phase} ${clock}  ${parts.join(' ')}`;
  };
  const attempts = [render('long', 'full'), render('short', 'full'), render('short', 'compact')];
  const line = attempts.find((a) => a.length <= width) ?? attempts[attempts.length - 1]!;
  return line.length <= width ? line : line.slice(0, Math.max(0, width));
}

/** An integer without separators (they cost columns); `—` when not finite. */
function plain(value: number): string {
  return Number.isFinite(value) ? String(Math.round(value)) : '—';
}

function total(record: Record<string, Record<string, number>> | undefined): number {
  let sum = 0;
  for (const tenants of Object.values(record ?? {})) {
    for (const v of Object.values(tenants)) if (Number.isFinite(v)) sum += v;
  }
  return sum;
}

/**
 * Running and waiting totals of one sample (all classes and tenants), and its provider charges
 * and rejections, for a caller that builds a `ProgressState` from its latest sample.
 */
export function progressCountsFromSample(
  sample: Sample,
): Pick<ProgressState, 'running' | 'waiting' | 'providerCharges' | 'rejected'> {
  let rejected = 0;
  for (const v of Object.values(sample.rejections ?? {})) if (Number.isFinite(v)) rejected += v;
  return {
    running: total(sample.running),
    waiting: total(sample.waiting),
    providerCharges: sample.providerCharges,
    rejected,
  };
}
