/**
 * @module effects/reconcile-checks
 * What a reconciliation must say before the store is asked to apply it. The HTTP API's schema
 * checks its shape for HTTP callers; library callers reach the store through here, where a typo
 * is as dangerous: an outcome `'comitted'` read as `absent` would have the charge sent again, a
 * mistyped effect name would be recorded as established while the real effect stayed `pending`.
 */
import { assertPlainJson } from '../core/digest.js';
import { InvalidArgument } from '../core/errors/index.js';
import { assertRecorded, isStoredText } from '../core/stored-text.js';
import type { EffectRow, ReconcileEffect, ReconcileParams } from '../store/types.js';
import { MAX_REFERENCE_CHARS } from './run-effect.js';

/** What `reconcile` takes beside the operation it names. */
export interface ReconcileRequest {
  by: string;
  reason: string;
  effects?: ReconcileEffect[];
  resolution: 'requeue' | 'succeeded' | 'failed';
  result?: unknown;
}

const RESOLUTIONS: ReadonlyArray<ReconcileParams['resolution']> = ['requeue', 'succeeded', 'failed'];

/**
 * Checks a reconciliation on its own, without the journal: who and why, the resolution, its
 * result, and each effect's outcome.
 *
 * @returns the effects it names
 * @throws InvalidArgument the first part that is not valid
 */
export function assertReconcileRequest(request: ReconcileRequest): ReconcileEffect[] {
  assertRecorded(request);
  if (!RESOLUTIONS.includes(request.resolution))
    throw new InvalidArgument(
      `resolution must be one of ${RESOLUTIONS.join(', ')}, not ${String(request.resolution)}`,
    );
  if (request.result !== undefined) {
    if (request.resolution !== 'succeeded')
      throw new InvalidArgument(
        `a result is kept only when the resolution is succeeded, not ${request.resolution}`,
      );
    assertPlainJson(request.result);
  }
  const effects: unknown = request.effects ?? [];
  if (!Array.isArray(effects)) throw new InvalidArgument('effects must be an array');
  for (const effect of effects) assertReconcileEffect(effect);
  return effects as ReconcileEffect[];
}

/**
 * Checks the effects a reconciliation names against the operation's journal: each names an
 * effect it has, once; and an end (not a requeue) leaves no effect's outcome unknown.
 */
export function assertEffectsEstablished(
  ref: { tenant: string; id: string },
  journal: readonly EffectRow[],
  effects: readonly ReconcileEffect[],
  resolution: ReconcileRequest['resolution'],
): void {
  const known = new Set(journal.map((e) => e.name));
  const named = new Set<string>();
  for (const effect of effects) {
    if (named.has(effect.name)) throw new InvalidArgument(`effect ${effect.name} is named twice`);
    named.add(effect.name);
    if (!known.has(effect.name)) {
      const list = [...known].join(', ') || 'none';
      throw new InvalidArgument(`operation ${ref.id} has no effect ${effect.name} (its effects: ${list})`);
    }
  }
  // Ended with an effect's outcome still unknown, the operation would read succeeded or failed
  // over a possible charge, and the purge would later delete the only record of it.
  const unknown = journal.filter((e) => e.state === 'pending' && !named.has(e.name)).map((e) => e.name);
  if (resolution !== 'requeue' && unknown.length > 0)
    throw new InvalidArgument(
      `the outcome of effect ${unknown.join(', ')} is unknown: establish it at the provider and name it ` +
        `committed or absent, or requeue the operation, before ending it ${resolution}`,
    );
}

/** One effect's established outcome, as `reconcile` takes it (the HTTP API's schema, for callers of the library). */
function assertReconcileEffect(effect: unknown): asserts effect is ReconcileEffect {
  if (typeof effect !== 'object' || effect === null)
    throw new InvalidArgument('each effect must be an object');
  const e = effect as Record<string, unknown>;
  if (typeof e.name !== 'string' || e.name === '')
    throw new InvalidArgument('each effect needs its name, a non-empty string');
  if (e.outcome !== 'committed' && e.outcome !== 'absent')
    throw new InvalidArgument(
      `the outcome of effect ${e.name} must be committed or absent, not ${String(e.outcome)}`,
    );
  if (e.outcome === 'absent') {
    if (e.result !== undefined || (e.reference !== undefined && e.reference !== null))
      throw new InvalidArgument(`effect ${e.name} is absent: it has no result or reference to keep`);
    return;
  }
  if (e.reference !== undefined && e.reference !== null) {
    if (
      typeof e.reference !== 'string' ||
      e.reference.length > MAX_REFERENCE_CHARS ||
      !isStoredText(e.reference)
    )
      throw new InvalidArgument(
        `the reference of effect ${e.name} must be a string of at most ${MAX_REFERENCE_CHARS} characters, ` +
          'without NUL or a lone surrogate',
      );
  }
  // Handed back to the handler as the effect's result: plain JSON, as a provider's answer.
  if (e.result !== undefined) assertPlainJson(e.result);
}
