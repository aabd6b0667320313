/**
 * What `sluice ops` refuses, and how it says so, run as a user runs it (the built CLI, on a SQLite
 * store an engine in this process shares):
 *
 * - `cancel --by` is held to the rule `redrive` and `reconcile` follow (1–200 characters, not all
 *   blank): `--by ''` cancelled with no event recorded, and 5,000 characters were stored;
 * - `reconcile --effect name=committed` needs the provider's answer as JSON, which a requeued
 *   handler gets back (a bare `committed` journaled `null`), and `--reference` keeps the
 *   provider's reference;
 * - a missing operation and an unknown resolution fail with their stable codes;
 * - `redrive-dead` lists (`--dry-run`) and redrives every tenant's dead operations, or those a
 *   tenant, kind or error code names, oldest first and at most `--limit`, each recorded.
 */
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ambiguous, type OperationContext } from '../../src/index.js';
import { type Ran, runCli } from '../helpers/cli.js';
import { type Harness, harness } from '../helpers/engine.js';
import { assertBuilt } from '../helpers/worker-process.js';

/**
 * The built CLI on `db`, with `SLUICE_OPERATOR` and `USER` as given (unset otherwise), so the
 * recorded `by` is known.
 */
const cli = (db: string, args: string[], env: Record<string, string | undefined> = {}): Promise<Ran> =>
  runCli([...args, '--db', db], { env: { SLUICE_OPERATOR: undefined, USER: undefined, ...env } });

let h: Harness | undefined;
beforeAll(() => assertBuilt());
afterEach(async () => {
  await h?.close();
  h = undefined;
});

describe('sluice ops cancel --by', () => {
  it('refuses an empty, blank or over-long name, cancelling nothing; records a good one', async () => {
    h = await harness();
    h.sluice.define('later', { input: z.object({}), run: () => null });
    await h.sluice.submit({ tenant: 'north', id: 'q1', kind: 'later', input: {}, delayMs: 600_000 });
    for (const by of ['', '   ', 'x'.repeat(201), 'x'.repeat(5000)]) {
      const refused = await cli(h.dbPath, ['ops', 'cancel', 'north', 'q1', '--by', by]);
      expect([by.length, refused.status, refused.stderr]).toEqual([
        by.length,
        1,
        'sluice: invalid-argument: --by must be 1–200 characters, not all blank, without NUL or a lone surrogate\n',
      ]);
    }
    const untouched = await h.sluice.get({ tenant: 'north', id: 'q1' }, { include: ['events'] });
    expect([untouched?.state, untouched?.cancel, untouched?.events]).toEqual(['queued', null, []]);

    // The longest name allowed, and the defaults: an empty variable is unset, as shells mean it.
    const longest = 'x'.repeat(200);
    expect((await cli(h.dbPath, ['ops', 'cancel', 'north', 'q1', '--by', longest])).status).toBe(0);
    await h.sluice.submit({ tenant: 'north', id: 'q2', kind: 'later', input: {}, delayMs: 600_000 });
    const byUser = await cli(h.dbPath, ['ops', 'cancel', 'north', 'q2'], {
      SLUICE_OPERATOR: '',
      USER: 'bob',
    });
    expect(byUser).toMatchObject({ status: 0, stdout: 'north/q2: cancel cancelled; state cancelled\n' });
    const by = async (id: string) =>
      (await h!.sluice.get({ tenant: 'north', id }, { include: ['events'] }))?.events?.map((e) => e.by);
    expect([await by('q1'), await by('q2')]).toEqual([[longest], ['bob']]);
  });
});

describe('sluice ops reconcile --effect and --reference', () => {
  /** An operation parked in needs_reconciliation over its `charge`, and what its handler got back. */
  async function parked(): Promise<{ got: unknown[]; calls: () => number }> {
    h = await harness();
    const got: unknown[] = [];
    let calls = 0;
    h.sluice.define('charge', {
      input: z.object({}),
      run: async (_input: unknown, ctx: OperationContext) => {
        // The provider's retention is (absurdly) 1 ms: the retry cannot resend blindly, so the
        // operation waits for reconciliation. After it, the journal answers instead of the call.
        const answer = await ctx.effect('charge', {
          retentionMs: 1,
          call: async () => {
            calls++;
            throw new Ambiguous('timed out after sending');
          },
        });
        got.push(answer);
        return { answer, calls };
      },
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'north', id: 'u1', kind: 'charge', input: {} });
    expect((await h.sluice.wait({ tenant: 'north', id: 'u1' })).state).toBe('needs_reconciliation');
    return { got, calls: () => calls };
  }
  const requeue = [
    'ops',
    'reconcile',
    'north',
    'u1',
    '--resolution',
    'requeue',
    '--reason',
    'ch_9 at the provider',
  ];

  it('refuses a committed effect without the JSON answer, and other malformed ones, changing nothing', async () => {
    await parked();
    const refusals: Array<[string[], RegExp]> = [
      [
        ['--effect', 'charge=committed'],
        /^sluice: invalid-argument: --effect charge=committed: a committed effect needs the provider's answer as JSON, which a requeued handler gets back: charge=committed:<json> \(charge=committed:null if it gave none\)\n$/,
      ],
      [
        ['--effect', 'charge=committed:'],
        /^sluice: invalid-argument: --effect charge=committed: is not JSON/,
      ],
      [
        ['--effect', 'charge=absent:{}'],
        /^sluice: invalid-argument: --effect charge=absent:\{\}: an absent effect has no result/,
      ],
      [
        ['--effect', 'charge=absent', '--reference', 'charge=ch_9'],
        /^sluice: invalid-argument: --reference charge: only an effect named committed keeps a reference/,
      ],
      [
        ['--effect', 'charge=committed:{}', '--reference', `charge=${'r'.repeat(501)}`],
        /^sluice: invalid-argument: --reference charge: the reference must be 1–500 characters/,
      ],
      [
        ['--effect', 'charge=committed:{}', '--reference', 'charge='],
        /^sluice: invalid-argument: --reference charge: the reference must be 1–500 characters/,
      ],
      [
        ['--effect', 'charge=committed:{}', '--reference', 'charge=a', '--reference', 'charge=b'],
        /^sluice: invalid-argument: --reference charge is given twice/,
      ],
      [
        ['--effect', 'charge=committed:{}', '--reference', 'ch_9'],
        /^sluice: invalid-argument: --reference ch_9: expected name=text/,
      ],
    ];
    for (const [args, message] of refusals) {
      const refused = await cli(h!.dbPath, [...requeue, ...args], { SLUICE_OPERATOR: 'ops@test' });
      expect([args, refused.status, refused.stderr]).toEqual([args, 1, expect.stringMatching(message)]);
    }
    const op = await h!.sluice.get({ tenant: 'north', id: 'u1' }, { include: ['effects', 'events'] });
    expect([op?.state, op?.effects?.[0]?.state, op?.events]).toEqual(['needs_reconciliation', 'pending', []]);
  });

  it('keeps the JSON answer and the reference: a requeued handler gets the answer back', async () => {
    const { got, calls } = await parked();
    const sent = calls();
    const reconciled = await cli(
      h!.dbPath,
      [...requeue, '--effect', 'charge=committed:{"id":"ch_9"}', '--reference', 'charge=ch_9'],
      { SLUICE_OPERATOR: 'ops@test' },
    );
    expect([reconciled.status, reconciled.stderr]).toEqual([0, '']);
    const done = await h!.sluice.wait(
      { tenant: 'north', id: 'u1' },
      { until: (o) => o.state === 'succeeded' },
    );
    // The journal answered, with what the operator gave, and the provider was not called again.
    expect(got).toEqual([{ id: 'ch_9' }]);
    expect(done.result).toEqual({ answer: { id: 'ch_9' }, calls: sent });
    const op = await h!.sluice.get({ tenant: 'north', id: 'u1' }, { include: ['effects'] });
    expect(op?.effects?.map((e) => [e.name, e.state, e.result, e.reference])).toEqual([
      ['charge', 'committed', { id: 'ch_9' }, 'ch_9'],
    ]);
  });
});

describe('sluice ops errors carry their codes', () => {
  it('show of a missing operation: operation-not-found; an unknown resolution: invalid-argument', async () => {
    h = await harness();
    const missing = await cli(h.dbPath, ['ops', 'show', 'north', 'nope']);
    expect([missing.status, missing.stdout, missing.stderr]).toEqual([
      1,
      '',
      'sluice: operation-not-found: no operation nope for tenant north\n',
    ]);
    const bogus = await cli(
      h.dbPath,
      ['ops', 'reconcile', 'north', 'nope', '--resolution', 'bogus', '--reason', 'r'],
      { SLUICE_OPERATOR: 'ops@test' },
    );
    expect([bogus.status, bogus.stderr]).toEqual([
      1,
      'sluice: invalid-argument: --resolution must be requeue, succeeded or failed, not "bogus"\n',
    ]);
  });
});

describe('sluice ops redrive-dead', () => {
  it("lists, then redrives, every tenant's dead operations or those a filter names, oldest first", async () => {
    h = await harness();
    let down = true;
    h.sluice.define('job', {
      input: z.object({ odd: z.boolean() }),
      limits: { maxAttempts: 1 },
      run: (input) => {
        // Not JSON: refused, and dead at once with a code of its own (result-not-json).
        if (input.odd) return new Map() as unknown as string;
        if (down) throw new Error('the dependency is down');
        return 'done';
      },
    });
    const submitted = [
      ['north', 'n1', false],
      ['south', 's1', false],
      ['north', 'odd', true],
      ['north', 'n2', false],
    ] as const;
    for (const [tenant, id, odd] of submitted)
      await h.sluice.submit({ tenant, id, kind: 'job', input: { odd } });
    const worker = h.worker();
    worker.start();
    for (const [tenant, id] of submitted)
      expect((await h.sluice.wait({ tenant, id })).state).not.toBe('queued');
    await worker.stop();
    const stateOf = async (tenant: string, id: string) => (await h!.sluice.get({ tenant, id }))?.state;
    expect(await Promise.all(submitted.map(([t, i]) => stateOf(t, i)))).toEqual([
      'dead',
      'dead',
      'dead',
      'dead',
    ]);
    expect((await h.sluice.get({ tenant: 'north', id: 'odd' }))?.error?.code).toBe('result-not-json');

    // A dry run redrives nothing; the code filter leaves the refused result's out.
    const dry = await cli(h.dbPath, [
      'ops',
      'redrive-dead',
      '--reason',
      'the dependency is back',
      '--code',
      'attempts-exhausted',
      '--dry-run',
    ]);
    expect(dry.status).toBe(0);
    expect(
      dry.stdout
        .split('\n')
        .filter((l) => /^(north|south) /.test(l))
        .map((l) => l.split(/\s+/).slice(0, 2)),
    ).toEqual([
      ['north', 'n1'],
      ['south', 's1'],
      ['north', 'n2'],
    ]);
    expect(dry.stdout).toContain('would redrive 3\n');
    // The last attempt's error names the cause: the same three, by what killed them.
    const byCause = await cli(h.dbPath, [
      'ops',
      'redrive-dead',
      '--reason',
      'r',
      '--code',
      'unclassified-error',
      '--dry-run',
    ]);
    expect(byCause.stdout).toContain('would redrive 3\n');
    const none = await cli(h.dbPath, [
      'ops',
      'redrive-dead',
      '--reason',
      'r',
      '--code',
      'crash-loop',
      '--dry-run',
    ]);
    expect(none.stdout).toBe('(no dead operations match)\n\nwould redrive 0\n');
    expect(await stateOf('north', 'n1')).toBe('dead');

    // At most --limit, oldest first, and says more match.
    const bad = await cli(h.dbPath, ['ops', 'redrive-dead', '--reason', 'r', '--limit', '0']);
    expect([bad.status, bad.stderr]).toEqual([
      1,
      'sluice: invalid-argument: --limit must be a whole number from 1 to 10000, not 0\n',
    ]);
    const over = await cli(h.dbPath, ['ops', 'redrive-dead', '--reason', 'r', '--limit', '10001']);
    expect([over.status, over.stderr]).toEqual([
      1,
      'sluice: invalid-argument: --limit must be a whole number from 1 to 10000, not 10001\n',
    ]);
    const most = await cli(h.dbPath, [
      'ops',
      'redrive-dead',
      '--reason',
      'r',
      '--limit',
      '10000',
      '--dry-run',
    ]);
    expect([most.status, most.stdout.endsWith('would redrive 4\n')]).toEqual([0, true]);
    const first = await cli(
      h.dbPath,
      ['ops', 'redrive-dead', '--reason', 'the dependency is back', '--limit', '1'],
      {
        SLUICE_OPERATOR: 'alice',
      },
    );
    expect(first).toMatchObject({
      status: 0,
      stdout: 'north/n1: queued\n\nredrove 1 of 1; more match: run it again\n',
    });
    const rest = await cli(h.dbPath, [
      'ops',
      'redrive-dead',
      '--reason',
      'the dependency is back',
      '--tenant',
      'south',
    ]);
    expect(rest).toMatchObject({ status: 0, stdout: 'south/s1: queued\n\nredrove 1 of 1\n' });
    expect(await Promise.all(submitted.map(([t, i]) => stateOf(t, i)))).toEqual([
      'queued',
      'queued',
      'dead',
      'dead',
    ]);
    const events = await h.sluice.get({ tenant: 'north', id: 'n1' }, { include: ['events'] });
    expect(events?.events).toMatchObject([
      { action: 'redrive', by: 'alice', reason: 'the dependency is back' },
    ]);

    down = false;
    h.worker().start();
    for (const [tenant, id] of [
      ['north', 'n1'],
      ['south', 's1'],
    ])
      expect((await h.sluice.wait({ tenant: tenant!, id: id! })).state).toBe('succeeded');
  });
});
