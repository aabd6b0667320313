/**
 * A handler's result is bounded as its input is (`maxResultBytes`, the JSON the store writes):
 * at the limit it is stored; one byte over, the operation is dead with `result-too-large`, not
 * retried, since the same handler would return the same result again (a fix, then a redrive). An effect's answer,
 * which the journal keeps and replays, has the same bound: one over it has still been done by the
 * provider, so nothing is sent again and the operation asks a person.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { type Harness, harness } from '../helpers/engine.js';

describe('maxResultBytes', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('stores a result of exactly the limit; one a byte over is dead, without a retry', async () => {
    h = await harness();
    let runs = 0;
    h.sluice.define('report', {
      input: z.object({ result: z.unknown() }),
      limits: { maxResultBytes: 64, maxAttempts: 3 },
      run: (input) => {
        runs++;
        return input.result;
      },
    });
    h.worker().start();
    // {"text":"…"} is 11 bytes of framing: 53 characters make 64 bytes, 54 make 65.
    const at = { text: 'x'.repeat(53) };
    const over = { text: 'x'.repeat(54) };
    expect(Buffer.byteLength(JSON.stringify(at))).toBe(64);
    // A string of control characters takes six bytes each as JSON: 10 fit in 64 (62), 11 do not (68).
    const cases = [
      { id: 'at', result: at, ok: true },
      { id: 'over', result: over, ok: false },
      { id: 'nul-fits', result: '\u0000'.repeat(10), ok: true },
      { id: 'nul-over', result: '\u0000'.repeat(11), ok: false },
      { id: 'number', result: 12345, ok: true },
    ];
    for (const c of cases) {
      runs = 0;
      await h.sluice.submit({ tenant: 'North', id: c.id, kind: 'report', input: { result: c.result } });
      const op = await h.sluice.wait({ tenant: 'North', id: c.id });
      if (c.ok) {
        expect([c.id, op.state, op.result]).toEqual([c.id, 'succeeded', c.result]);
      } else {
        expect([c.id, op.state, op.result, op.error?.code]).toEqual([c.id, 'dead', null, 'result-too-large']);
        expect(op.error?.details).toEqual({ bytes: c.id === 'over' ? 65 : 68, maxResultBytes: 64 });
      }
      expect(runs).toBe(1);
    }
  });

  it('keeps an effect answer of exactly the limit and asks a person for one a byte over', async () => {
    h = await harness();
    let calls = 0;
    h.sluice.define('charge', {
      input: z.object({ answer: z.unknown() }),
      limits: { maxResultBytes: 64, maxAttempts: 3 },
      async run(input, ctx) {
        const answer = await ctx.effect('pay', {
          call: async () => {
            calls++;
            return input.answer;
          },
        });
        // The handler's own result stays small: only the effect's answer is at the edge.
        return Buffer.byteLength(JSON.stringify(answer));
      },
    });
    h.worker().start();
    const at = { text: 'x'.repeat(53) };
    const over = { text: 'x'.repeat(54) };
    for (const c of [
      { id: 'effect-at', answer: at, ok: true },
      { id: 'effect-over', answer: over, ok: false },
      { id: 'effect-nul-over', answer: '\u0000'.repeat(11), ok: false },
    ]) {
      calls = 0;
      const ref = { tenant: 'North', id: c.id };
      await h.sluice.submit({ ...ref, kind: 'charge', input: { answer: c.answer } });
      const op = await h.sluice.wait(ref);
      const [effect] = await h.store.effectList(ref);
      if (c.ok) {
        expect([c.id, op.state, op.result, effect?.state, effect?.result]).toEqual([
          c.id,
          'succeeded',
          64,
          'committed',
          c.answer,
        ]);
      } else {
        expect([c.id, op.state, op.error?.code, effect?.state, effect?.result]).toEqual([
          c.id,
          'needs_reconciliation',
          'effect-result-too-large',
          'pending',
          null,
        ]);
        expect(op.error?.details).toEqual({ bytes: c.id === 'effect-over' ? 65 : 68, maxResultBytes: 64 });
      }
      expect(calls).toBe(1);
    }
  });
});
