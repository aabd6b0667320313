/**
 * A committed effect's reference (`ctx.effect(…, { reference })`, or a lookup's) that the journal
 * cannot keep. The effect has happened by then, so it must not fail the mark: written, a NUL in
 * it failed PostgreSQL's whole batch of marks and ends (22P05), and a value that is not a string
 * failed SQLite's bind; every attempt in that batch lost its end, and the effects stayed
 * `pending` to be sent again. The effect is recorded committed without it, and the worker warns.
 * Real stores, several operations at once so that their marks share batches.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import type { Store } from '../../src/store/store.js';
import { type Harness, harness } from '../helpers/engine.js';
import { captureLog } from '../helpers/log-capture.js';
import { usePostgres } from '../helpers/postgres.js';

const db = usePostgres();

/** What each operation's `reference` gives: kept as is, or not kept (null) for the reason named. */
const REFERENCES: Array<[string, () => unknown, string | null]> = [
  ['good-1', () => 'ch_1', 'ch_1'],
  ['nul', () => 'ch\u0000x', null],
  ['not-a-string', () => true, null],
  ['too-long', () => 'x'.repeat(501), null],
  ['lone-surrogate', () => 'ch_\ud800', null],
  [
    'throws',
    () => {
      throw new Error('no id in the answer');
    },
    null,
  ],
  ['longest', () => 'y'.repeat(500), 'y'.repeat(500)],
  ['none', () => undefined, null],
];

describe.each([
  [
    'SQLite',
    (): Store => sqliteStore({ path: join(mkdtempSync(join(tmpdir(), 'sluice-ref-')), 'sluice.db') }),
  ],
  ['PostgreSQL', (): Store => db.store()],
] as const)('an effect reference the journal cannot keep (%s)', (_name, makeStore) => {
  let h: Harness | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
  });

  it('records the effect committed without it; no attempt, its own or another, is failed', async () => {
    const { logger, lines } = captureLog('warn');
    h = await harness({ store: makeStore(), sluice: { logger } });
    const calls = new Map<string, number>();
    const byId = new Map(REFERENCES.map(([id, reference]) => [id, reference]));
    h.sluice.define('job', {
      input: z.object({}),
      async run(_input, ctx) {
        return ctx.effect('charge', {
          call: async () => {
            calls.set(ctx.id, (calls.get(ctx.id) ?? 0) + 1);
            return { charged: ctx.id };
          },
          reference: byId.get(ctx.id) as () => string,
        });
      },
    });
    for (const [id] of REFERENCES) await h.sluice.submit({ tenant: 'North', id, kind: 'job', input: {} });
    h.worker().start();
    for (const [id, , kept] of REFERENCES) {
      const done = await h.sluice.wait({ tenant: 'North', id }, { timeoutMs: 20_000 });
      expect([id, done.state, done.attempt, calls.get(id)]).toEqual([id, 'succeeded', 1, 1]);
      const full = await h.sluice.get({ tenant: 'North', id }, { include: ['effects'] });
      expect(full?.effects?.map((e) => [e.state, e.reference])).toEqual([['committed', kept]]);
    }
    const warned = lines.filter((l) => String(l.msg).startsWith("an effect's reference cannot be kept"));
    expect(warned.map((l) => [l.operation, l.why]).sort()).toEqual(
      [
        ['lone-surrogate', 'it holds a NUL or a lone surrogate'],
        ['not-a-string', 'it is a boolean, not a string'],
        ['nul', 'it holds a NUL or a lone surrogate'],
        ['throws', 'reference() threw: no id in the answer'],
        ['too-long', 'it is 501 characters long, over 500'],
      ].sort(),
    );
  });
});
