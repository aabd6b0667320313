/**
 * An attempt's `committed` marks: queued on the journal's batch, taken back by the end when it
 * comes first, waited for when already on their way, written again with the end when their
 * write failed, and never sent after the attempt was dropped.
 */
import { describe, expect, it } from 'vitest';
import { AttemptMarks } from '../../src/effects/attempt-marks.js';
import type { Journal } from '../../src/effects/run-effect.js';
import { Batcher } from '../../src/runtime/batcher.js';
import { jsonText } from '../../src/store/sqlite/rows.js';
import type { EffectMarkParams, LeaseRef } from '../../src/store/types.js';

const lease: LeaseRef = { tenant: 'North', id: 'op-1', epoch: 7 };
const mark = (name: string) => ({
  lease,
  name,
  state: 'committed' as const,
  result: name,
  reference: null,
});

/** A journal over a real batcher whose writes the test answers. */
function journal(write: (items: EffectMarkParams[]) => Promise<boolean[]>) {
  const sent: EffectMarkParams[][] = [];
  const marks = new Batcher<EffectMarkParams, boolean>((items) => {
    sent.push(items);
    return write(items);
  });
  const j: Journal = {
    begin: () => Promise.reject(new Error('not in this test')),
    mark: (p) => marks.add(p),
    takeMarks: (l) => marks.take((m) => m.lease === l),
  };
  return { j, sent, idle: () => marks.idle() };
}

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Marks as a store writes them: the name and the result's JSON text. */
const kept = (marks: EffectMarkParams[]) =>
  marks.map((m) => [m.name, m.state === 'committed' ? jsonText(m.result) : null]);

describe('an attempt’s marks', () => {
  it('the end that comes in the same turn takes them; the batch never sends them', async () => {
    const { j, sent, idle } = journal(async (items) => items.map(() => true));
    const marks = new AttemptMarks(j, lease);
    const a = mark('a');
    const b = mark('b');
    marks.add(a);
    marks.add(b);
    expect(kept(await marks.forEnd(false))).toEqual(kept([a, b]));
    marks.ended(true);
    await turn();
    await idle();
    expect(sent).toEqual([]);
  });

  it('marks already sent are waited for, not carried', async () => {
    let answer!: (ok: boolean[]) => void;
    const { j, sent } = journal(() => new Promise((resolve) => (answer = resolve)));
    const marks = new AttemptMarks(j, lease);
    marks.add(mark('a'));
    await turn();
    expect(sent).toHaveLength(1);
    let settled = false;
    const riding = marks.forEnd(false).then((r) => {
      settled = true;
      return r;
    });
    await turn();
    expect(settled).toBe(false);
    answer([true]);
    expect(await riding).toEqual([]);
  });

  it('a mark whose write failed goes again with the end', async () => {
    const { j } = journal(() => Promise.reject(new Error('store unreachable')));
    const marks = new AttemptMarks(j, lease);
    const a = mark('a');
    marks.add(a);
    await turn();
    expect(kept(await marks.forEnd(false))).toEqual(kept([a]));
  });

  it('a refusal while the handler runs stops the attempt, once; after the end it is the end’s', async () => {
    const { j, idle } = journal(async (items) => items.map(() => false));
    const marks = new AttemptMarks(j, lease);
    let refused = 0;
    marks.stop = { abort: () => refused++ };
    marks.add(mark('a'));
    await turn();
    await idle();
    expect(refused).toBe(1);
    marks.add(mark('b'));
    marks.ended(false);
    await turn();
    await idle();
    expect(refused).toBe(1);
  });

  it('alone: nothing is taken back; every mark is written before the end', async () => {
    const { j, sent } = journal(async (items) => items.map(() => true));
    const marks = new AttemptMarks(j, lease);
    const a = mark('a');
    marks.add(a);
    expect(await marks.forEnd(true)).toEqual([]);
    expect(sent.map(kept)).toEqual([kept([a])]);
  });

  it('dropped: the queued marks are never sent', async () => {
    const { j, sent, idle } = journal(async (items) => items.map(() => true));
    const marks = new AttemptMarks(j, lease);
    let refused = 0;
    marks.stop = { abort: () => refused++ };
    marks.add(mark('a'));
    marks.drop();
    await turn();
    await idle();
    expect(sent).toEqual([]);
    expect(refused).toBe(0);
  });

  it('keeps the result as it was when the provider answered, and answers a second look-up with it', async () => {
    const { j, sent } = journal(async (items) => items.map(() => true));
    const marks = new AttemptMarks(j, lease);
    const answer = { id: 'ch_1', amount: 5 };
    marks.add({ ...mark('charge'), result: answer });
    answer.amount = 6;
    const again = marks.committed('charge');
    expect(again).toEqual({ result: { id: 'ch_1', amount: 5 } });
    expect(again!.result).not.toBe(answer);
    expect(marks.committed('refund')).toBeUndefined();
    await turn();
    expect(kept(sent[0]!)).toEqual([['charge', '{"id":"ch_1","amount":5}']]);
  });
});

describe('refusal(): the refusals an attempt is still writing', () => {
  it('drops the absent marks of two effects asked again at once when their batch fails again', async () => {
    // Two 503s whose first writes failed, queued again on one batch; the handler asks both effects
    // again side by side; that batch fails too.
    const { j } = journal(() => Promise.reject(new Error('the store went away')));
    const marks = new AttemptMarks(j, lease);
    marks.add({ lease, name: 'Y', state: 'absent' });
    marks.add({ lease, name: 'Z', state: 'absent' });
    expect(await Promise.all([marks.refusal('Y'), marks.refusal('Z')])).toEqual([undefined, undefined]);
    // Dropped, neither rides with the end: the effects stay pending and are sent under their keys.
    expect(await marks.forEnd(true)).toEqual([]);
  });

  it('answers with a failed refusal, which still rides with the end', async () => {
    const { j } = journal(() => Promise.reject(new Error('the store went away')));
    const marks = new AttemptMarks(j, lease);
    const declined = {
      lease,
      name: 'charge',
      state: 'failed' as const,
      error: { code: 'card-declined', message: 'declined', outcome: 'permanent' as const },
    };
    marks.add(declined);
    expect(await marks.refusal('charge')).toBe(declined);
    expect(await marks.refusal('other')).toBeUndefined();
    expect(await marks.forEnd(true)).toEqual([declined]);
  });
});
