/**
 * @module drill/report/format
 * Number, size, duration and text formatting shared by the report's tables, its charts and the
 * progress line. Pure functions; every one returns a finite-looking string for any input (a
 * non-finite number prints as `—`, never as `NaN` or `Infinity`), so nothing the drill measures
 * can leak `NaN` into an SVG attribute or a table cell.
 */

const DASH = '—';

/** Escapes text for HTML and SVG (element content and double- or single-quoted attributes). */
export function escapeXml(text: string): string {
  return text
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

/**
 * Escapes plain text (an invariant's name or figure) so Markdown shows it as written: no emphasis
 * from `*` or a word-edge `_`, no link from `[…]`, no code span from a backtick, no HTML tag from
 * `<letter`. Characters that are harmless where they stand (`a_b`, `< 400 ms`) are left alone, so
 * the file still reads as plain text.
 */
export function escapeMarkdownText(text: string): string {
  return text
    .replace(/\\/g, '\\\\')
    .replace(/([*[\]`])/g, '\\$1')
    .replace(/(^|[^\p{L}\p{N}])_|_(?=[^\p{L}\p{N}]|$)/gu, (m) => m.replace('_', '\\_'))
    .replace(/<(?=[A-Za-z/!?])/g, '\\<');
}

/** Escapes text for one cell of a Markdown table: no pipe splits the row, no newline ends it. */
export function escapeMarkdownCell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\r?\n/g, '<br>');
}

/** Trims a number's decimals to at most `digits` significant digits, without trailing zeros. */
function significant(value: number, digits: number): string {
  if (value === 0) return '0';
  const text = Number(value.toPrecision(digits)).toString();
  // toString switches to exponent notation past 1e21; keep it readable rather than wrong.
  return text;
}

/** `1234567` → `1,234,567`; fractional values keep up to two decimals. */
export function formatInteger(value: number): string {
  if (!Number.isFinite(value)) return DASH;
  const rounded = Math.abs(value) >= 100 || Number.isInteger(value) ? Math.round(value) : value;
  return rounded.toLocaleString('en-US', { maximumFractionDigits: 2 });
}

const SI = [
  { at: 1e15, suffix: 'P' },
  { at: 1e12, suffix: 'T' },
  { at: 1e9, suffix: 'G' },
  { at: 1e6, suffix: 'M' },
  { at: 1e3, suffix: 'k' },
];

/** A short count for narrow places: `950`, `12.3k`, `4.5M`; beyond peta, exponent notation. */
export function formatCompact(value: number): string {
  if (!Number.isFinite(value)) return DASH;
  const abs = Math.abs(value);
  if (abs >= 1e18) return value.toExponential(1).replace('e+', 'e');
  for (const { at, suffix } of SI) {
    if (abs >= at) return significant(value / at, 3) + suffix;
  }
  return significant(value, 3);
}

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'] as const;

/** The binary unit (power of 1024) a byte scale up to `max` is best labelled in. */
export function byteUnit(max: number): { unit: (typeof BYTE_UNITS)[number]; size: number } {
  let index = 0;
  let size = 1;
  const abs = Number.isFinite(max) ? Math.abs(max) : 0;
  while (index < BYTE_UNITS.length - 1 && abs >= size * 1024) {
    index += 1;
    size *= 1024;
  }
  return { unit: BYTE_UNITS[index]!, size };
}

/** `1536` → `1.5 KiB`; `unitOf` fixes the unit (so every tick of an axis uses the same one). */
export function formatBytes(value: number, unitOf: number = value): string {
  if (!Number.isFinite(value)) return DASH;
  const { unit, size } = byteUnit(unitOf);
  return `${significant(value / size, 3)} ${unit}`;
}

/** A latency or interval: `850 ms`, `1.5 s`, `2 min 5 s`. */
export function formatMs(value: number): string {
  if (!Number.isFinite(value)) return DASH;
  const abs = Math.abs(value);
  if (abs < 1000) return `${significant(value, 3)} ms`;
  if (abs < 120_000) return `${significant(value / 1000, 3)} s`;
  const minutes = Math.trunc(value / 60_000);
  const seconds = Math.round((value - minutes * 60_000) / 1000);
  return seconds === 0 ? `${minutes} min` : `${minutes} min ${Math.abs(seconds)} s`;
}

/** A time since the drill started, for tables and axes: `12.3 s`, `1:05.0`. */
export function formatOffset(ms: number): string {
  if (!Number.isFinite(ms)) return DASH;
  const sign = ms < 0 ? '-' : '';
  const abs = Math.abs(ms);
  if (abs < 60_000) return `${sign}${(abs / 1000).toFixed(1)} s`;
  const minutes = Math.floor(abs / 60_000);
  const seconds = (abs - minutes * 60_000) / 1000;
  return `${sign}${minutes}:${seconds.toFixed(1).padStart(4, '0')}`;
}

/** A clock reading for the progress line: `0:23`, `12:05`, `1:02:03`. */
export function formatClock(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '0:00';
  const total = Math.floor(ms / 1000);
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const seconds = String(total % 60).padStart(2, '0');
  return hours > 0 ? `${hours}:${String(minutes).padStart(2, '0')}:${seconds}` : `${minutes}:${seconds}`;
}

/** A number in an SVG coordinate: one decimal, never `NaN` (a non-finite value becomes 0). */
export function svgNumber(value: number): string {
  if (!Number.isFinite(value)) return '0';
  const rounded = Math.round(value * 10) / 10;
  return Object.is(rounded, -0) ? '0' : String(rounded);
}

/** Nearest-rank percentile of `values` (`p` in 0..100); `NaN` for none. */
export function percentile(values: readonly number[], p: number): number {
  const finite = values.filter(Number.isFinite);
  if (finite.length === 0) return Number.NaN;
  const sorted = [...finite].sort((a, b) => a - b);
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1]!;
}
