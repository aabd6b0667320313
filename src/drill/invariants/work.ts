/**
 * @module drill/invariants/work
 * What happened to the work: one provider charge per charge operation, no accepted operation
 * lost, duplicate deliveries answered from the record, provider spend within its budget.
 */
import { isTerminal } from '../../core/states.js';
import { deriveEffectKey } from '../../effects/effect-key.js';
import type { EffectRow } from '../../store/types.js';
import { DRILL_SPEND } from '../serve-config.js';
import type { InvariantResult } from '../types.js';
import {
  chargesByOperation,
  countBy,
  describeCounts,
  type Evidence,
  int,
  listed,
  opKey,
  secs,
} from './evidence.js';

export function oneChargePerOperation(e: Evidence): InvariantResult {
  const { ops, perOp, orphans } = chargesByOperation(e);
  const problems: string[] = [];
  let extra = 0;
  let doubled = 0;
  let wrongKey = 0;
  let parkedCharged = 0;
  for (const o of ops) {
    const charges = perOp.get(opKey(o.tenant, o.id)) ?? [];
    const n = charges.length;
    if (n > 1) {
      doubled++;
      extra += n - 1;
    }
    for (const c of charges) if (c.key !== deriveEffectKey(o.tenant, o.id, 'charge')) wrongKey++;
    const ok =
      o.state === 'succeeded' ? n === 1 : o.state === 'cancelled' || o.state === 'failed' ? n === 0 : n <= 1;
    if (!ok)
      problems.push(`${o.tenant}/${o.id} ${o.state}: ${n} charges (${charges.map((c) => c.id).join(', ')})`);
    else if (n === 1) {
      const hidden = hiddenCharge(o.state, charges[0]!.id, e.chargeEffects.get(opKey(o.tenant, o.id)));
      if (hidden) problems.push(`${o.tenant}/${o.id} ${o.state}: ${hidden}`);
      if (o.state !== 'succeeded') parkedCharged++;
    }
  }
  for (const c of orphans) problems.push(`charge ${c.id} (key ${c.key}) matches no operation`);
  const succeeded = ops.filter((o) => o.state === 'succeeded').length;
  const cancelled = ops.filter((o) => o.state === 'cancelled').length;
  const failed = ops.filter((o) => o.state === 'failed').length;
  const pass = problems.length === 0 && succeeded > 0;
  const parked = parkedCharged
    ? `; ${int(parkedCharged)} charged operations parked for a person, each charge shown in its journal`
    : '';
  const figure = pass
    ? `0 double charges: ${int(succeeded)} succeeded charge operations charged once each; ` +
      `0 charges for ${int(cancelled)} cancelled and ${int(failed)} failed; ${int(e.ledger.length)} ledger charges, none unexplained${parked}`
    : succeeded === 0
      ? 'no charge operation succeeded: nothing was proven'
      : `${int(doubled)} operations charged more than once (${int(extra)} extra charges) over ${int(succeeded)} succeeded; ` +
        `${int(problems.length)} operations or charges in violation`;
  const keyNote = wrongKey
    ? ` ${int(wrongKey)} charges were sent under a key other than the derived effect key.`
    : ' Every charge was sent under its derived effect key.';
  return {
    name: 'One provider charge per charge operation',
    pass,
    figure,
    detail:
      `Ledger charges are matched to operations by (tenant, invoice), whatever key was sent. A succeeded ` +
      `operation must have exactly one, recorded as its journal's committed charge; a cancelled or failed one none; ` +
      `one parked for a person (dead or needs_reconciliation) at most one, and its journal must show that ` +
      `charge as committed or pending, so no charge is hidden behind the parked state.${keyNote}` +
      (problems.length ? ` Violations: ${listed(problems)}` : ''),
  };
}

/**
 * Why the one ledger charge of an operation in `state` is not what its journal says, or null
 * when it is: a succeeded operation's journal holds that charge committed (its reference the
 * ledger's id); a parked one's journal shows a charge may have happened (pending or committed),
 * so the person who reconciles it sees the money moved.
 */
export function hiddenCharge(state: string, chargeId: string, effect: EffectRow | undefined): string | null {
  if (!effect) return `charged (${chargeId}) with no charge in its journal`;
  if (state === 'succeeded') {
    if (effect.state !== 'committed') return `charged (${chargeId}), its journal says ${effect.state}`;
    if (effect.reference !== chargeId)
      return `charged (${chargeId}), its journal's reference is ${effect.reference ?? 'missing'}`;
    return null;
  }
  if (effect.state !== 'committed' && effect.state !== 'pending')
    return `charged (${chargeId}) and parked, its journal says ${effect.state}`;
  return null;
}

export function noOperationLost(e: Evidence): InvariantResult {
  const stored = new Map(e.operations.map((o) => [opKey(o.tenant, o.id), o]));
  const lost = [...e.accepted.keys()].filter((k) => !stored.has(k));
  const open = e.operations.filter((o) => !isTerminal(o.state));
  const unacknowledged = e.operations.filter((o) => !e.accepted.has(opKey(o.tenant, o.id)));
  const walkawayIds = new Set(e.walkaways.map((w) => w.id));
  const unexplained = unacknowledged.filter((o) => !(o.tenant === 'bulk' && walkawayIds.has(o.id)));
  const states = countBy(e.operations, (o) => o.state);
  const reasons = countBy(
    e.operations.filter((o) => o.state !== 'succeeded' && o.state !== 'cancelled'),
    (o) => `${o.state} ${o.error?.code ?? '?'}`,
  );
  const pass = lost.length === 0 && open.length === 0 && e.operations.length > 0;
  const breakdown = describeCounts(states);
  return {
    name: 'No accepted operation lost',
    pass,
    figure: pass
      ? `${int(e.operations.length)} accepted, all terminal after a ${secs(e.drain.ms)} drain: ${breakdown}`
      : `${int(lost.length)} acknowledged operations missing from the store, ${int(open.length)} not terminal after ` +
        `the drain (${secs(e.drain.ms)}${e.drain.guardHit ? ', its guard ran out' : ''})`,
    detail:
      `Every acknowledged submission (202, 200, or a cancel that found it) must be in the store and terminal; ` +
      `every other terminal state is explained by its recorded reason. Reasons: ${describeCounts(reasons) || 'none'}. ` +
      `${int(unacknowledged.length)} operations were accepted without any client hearing it ` +
      `(${int(unacknowledged.length - unexplained.length)} from clients that walked away mid-request).` +
      (lost.length ? ` Missing: ${listed(lost)}.` : '') +
      (open.length ? ` Not terminal: ${listed(open.map((o) => `${o.tenant}/${o.id} ${o.state}`))}.` : ''),
  };
}

export function duplicatesAnswered(e: Evidence): InvariantResult {
  const problems = [...e.duplicates.problems, ...e.bursts.problems];
  const pass = problems.length === 0;
  return {
    name: 'Duplicate deliveries answered from the record',
    pass,
    figure:
      `${int(e.duplicates.answered)} of ${int(e.duplicates.sent)} resubmissions answered 200 + Idempotent-Replayed; ` +
      `${int(e.bursts.sent)} bursts of concurrent identical submissions, none created twice` +
      (pass ? '' : `; ${int(problems.length)} wrong answers`),
    detail:
      'A resubmission of an accepted id with the same body must be answered from its record (never run again, ' +
      'never refused for capacity); of N identical submissions at once at most one creates the operation.' +
      (problems.length ? ` Wrong answers: ${listed(problems)}` : ''),
  };
}

export function spendWithinBudget(e: Evidence): InvariantResult {
  const { windowMs } = DRILL_SPEND;
  const { ops, perOp } = chargesByOperation(e);
  const windows = new Map<string, number>(); // `${key}@${start}` → cents
  let unattributed = 0;
  for (const o of ops) {
    const charges = perOp.get(opKey(o.tenant, o.id)) ?? [];
    if (charges.length === 0) continue;
    const effect = e.chargeEffects.get(opKey(o.tenant, o.id));
    for (const c of charges) {
      // The reservation was made when the journal's pending row was written (`firstSentAt`,
      // the store's clock); the stub's own time is the fallback.
      const at = effect?.firstSentAt ?? c.createdAt;
      if (!effect) unattributed++;
      const start = Math.floor(at / windowMs) * windowMs;
      for (const k of [`tenant:${o.tenant}`, 'all']) {
        const w = `${k}@${start}`;
        windows.set(w, (windows.get(w) ?? 0) + c.amount_cents);
      }
    }
  }
  const over: string[] = [];
  const maxBy: Record<string, number> = {};
  let atLimit = 0;
  for (const [w, cents] of windows) {
    const k = w.slice(0, w.indexOf('@'));
    const limit =
      k === 'all' ? DRILL_SPEND.global : (DRILL_SPEND.tenants[k.slice(7)] ?? DRILL_SPEND.perTenant);
    maxBy[k] = Math.max(maxBy[k] ?? 0, cents);
    if (cents === limit) atLimit++;
    if (cents > limit) over.push(`${w}: ${int(cents)} > ${int(limit)}`);
  }
  const refused = e.operations.filter((o) => o.error?.code === 'budget-exhausted').length;
  const pass = over.length === 0;
  const limitOf = (k: string) =>
    k === 'all' ? DRILL_SPEND.global : (DRILL_SPEND.tenants[k.slice(7)] ?? DRILL_SPEND.perTenant);
  return {
    name: 'Provider spend within its budget in every window',
    pass,
    figure:
      `most spent in one ${secs(windowMs)} window (cents): ${Object.entries(maxBy)
        .map(([k, v]) => `${k.replace('tenant:', '')} ${int(v)}/${int(limitOf(k))}`)
        .join(
          ', ',
        )}; ${int(atLimit)} windows exactly at a limit; ${int(refused)} charges refused before sending ` +
      `(budget-exhausted)` +
      (pass ? '' : `; ${int(over.length)} windows over`),
    detail:
      "Sums the stub's ledger per budget window, each charge in the window its reservation was made in (the effect " +
      "journal's first-sent time)." +
      (unattributed
        ? ` ${int(unattributed)} charges had no journal row and were placed by the stub's clock.`
        : '') +
      (over.length ? ` Over: ${listed(over)}` : ''),
  };
}
