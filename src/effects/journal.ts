/**
 * @module effects/journal
 * Group commit for the effect journal. Every effect costs two durable writes (`pending` before
 * the call, `committed` after it); written one by one they cost one commit — one fsync — each,
 * and a worker's throughput becomes its slots divided by the commit latency. Here the concurrent
 * attempts of a worker share them: the begins (and the marks) that arrive while a batch is being
 * written go together into the next one, each answered alone (store.effectBeginMany).
 *
 * A mark still queued can be taken back by its attempt, to be written with the attempt's end
 * instead (effects/attempt-marks.ts).
 *
 * Effects that draw on budgets go in the same batches: a batch takes its budget rows in one pass,
 * in the stores' order, so two processes' batches cannot deadlock over them (PostgreSQL's
 * migration 24; SQLite's writers take turns).
 */
import type { Batcher } from '../runtime/batcher.js';
import type { EffectBeginParams, EffectBeginResult, EffectMarkParams, Settled } from '../store/types.js';
import type { Journal } from './run-effect.js';

export function batchedJournal(
  begins: Batcher<EffectBeginParams, Settled<EffectBeginResult>>,
  marks: Batcher<EffectMarkParams, boolean>,
): Journal {
  return {
    async begin(params) {
      const settled = await begins.add(params);
      if (!settled.ok) throw settled.error;
      return settled.value;
    },
    mark: (params) => marks.add(params),
    takeMarks: (lease) => marks.take((m) => m.lease === lease),
  };
}
