/**
 * @module drill/invariants/evidence
 * What the invariants are computed from — the samples, the store's final operations, the stub's
 * ledger, the clients' records — and the small helpers they share to state their figures.
 */
import type { AttemptRow, EffectRow, OperationRow } from '../../store/types.js';
import type { Charge } from '../../testing/provider-stub.js';
import type { NorthRecord, Submitted, WalkawayRecord } from '../load.js';
import type { Observation } from '../sampler.js';
import type { Phase, PhaseName } from '../types.js';

export interface Evidence {
  phases: Phase[];
  observations: Observation[];
  /** Every operation in the store after the final drain. */
  operations: OperationRow[];
  /** The provider stub's ledger: every charge it made. */
  ledger: Charge[];
  /** `tenant/id` → the `charge` effect's journal row, for every charge operation. */
  chargeEffects: Map<string, EffectRow | undefined>;
  /** `tenant/id` → attempt history, for every charge operation. */
  chargeAttempts: Map<string, AttemptRow[]>;
  accepted: Map<string, Submitted>;
  north: NorthRecord[];
  walkaways: WalkawayRecord[];
  duplicates: { sent: number; answered: number; problems: string[] };
  bursts: { sent: number; created: number; problems: string[] };
  /** The epoch ms at which the drill's clock reads 0 (store times are epoch ms). */
  t0: number;
  /** How long the final drain took, and whether it ended by its guard. */
  drain: { ms: number; guardHit: boolean };
  workers: number;
  latencyMultiple: number;
  latencyFloorMs: number;
  recoveryBoundMs: number;
  /** How the sampler measured connections (observer.ts). */
  connectionsMethod: string;
  /** Worker processes started, and how they died. */
  deployment: { incarnations: number; kills: { byDrill: number; byFailpoint: number; other: number } };
  /** What went wrong in the run itself (a process that died on its own, a failed sample…). */
  runErrors: string[];
}

export { WARMUP_MS } from '../baseline.js';

export const opKey = (tenant: string, id: string) => `${tenant}/${id}`;
export const int = (n: number) => Math.round(n).toLocaleString('en-US');
export const ms = (n: number) => `${int(n)} ms`;
export const secs = (n: number) => `${(n / 1000).toFixed(1)} s`;
export const bytes = (n: number) =>
  n < 1024 ? `${n} B` : n < 1024 ** 2 ? `${(n / 1024).toFixed(1)} KiB` : `${(n / 1024 ** 2).toFixed(1)} MiB`;

/** Nearest-rank percentile; 0 for no values. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export const countBy = <T>(items: T[], key: (t: T) => string) => {
  const m: Record<string, number> = {};
  for (const i of items) m[key(i)] = (m[key(i)] ?? 0) + 1;
  return m;
};
export const describeCounts = (m: Record<string, number>) =>
  Object.entries(m)
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${k} ${n}`)
    .join(', ');

export const phase = (e: Evidence, name: PhaseName) => e.phases.find((p) => p.name === name);
export const total = (r: Record<string, Record<string, number>>) =>
  Object.values(r).reduce((s, t) => s + Object.values(t).reduce((a, b) => a + b, 0), 0);
export const listed = (items: string[], max = 12) =>
  items.length <= max
    ? items.join('; ')
    : `${items.slice(0, max).join('; ')}; … and ${items.length - max} more`;

/** The ledger's charges per operation, matched by (tenant, invoice): independent of the key sent. */
export function chargesByOperation(e: Evidence) {
  const byInvoice = new Map<string, Charge[]>();
  for (const c of e.ledger) {
    const k = `${String(c.params.tenant)}#${String(c.params.invoice)}`;
    byInvoice.set(k, [...(byInvoice.get(k) ?? []), c]);
  }
  const ops = e.operations.filter((o) => o.kind === 'charge');
  const perOp = new Map<string, Charge[]>();
  const matched = new Set<string>();
  for (const o of ops) {
    const k = `${o.tenant}#${String((o.input as { invoice?: unknown }).invoice)}`;
    perOp.set(opKey(o.tenant, o.id), byInvoice.get(k) ?? []);
    matched.add(k);
  }
  const orphans = [...byInvoice].filter(([k]) => !matched.has(k)).flatMap(([, cs]) => cs);
  return { ops, perOp, orphans };
}
