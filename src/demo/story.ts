/**
 * @module demo/story
 * `sluice demo story`: the seed's story of operation O7, scripted and printed step by step against a
 * real SQLite file and the HTTP provider stub on loopback. Time is simulated (a fake clock
 * shared by the store and the provider) so "24 hours later" takes no time.
 */
import { once } from 'node:events';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { z } from 'zod';
import { openStore } from '../cli/open-store.js';
import { isSluiceError } from '../core/errors/index.js';
import { Sluice } from '../sluice.js';
import { sqliteStore } from '../store/sqlite/index.js';
import { FakeClock } from '../testing/fake-clock.js';
import { failpoints, SimulatedCrash } from '../testing/index.js';
import { ProviderClient } from '../testing/provider-client.js';
import { startProviderServer } from '../testing/provider-server.js';
import type { Charge } from '../testing/provider-stub.js';

export async function runStory(dir: string): Promise<void> {
  const path = join(dir, 'demo.db');
  for (const suffix of ['', '-wal', '-shm']) rmSync(path + suffix, { force: true });
  (await openStore(path)).close();
  const clock = new FakeClock('2026-03-02T12:00:00Z');
  const server = await startProviderServer({ clock });
  const provider = new ProviderClient(server.url);
  const sluice = new Sluice({
    store: sqliteStore({ path, clock }),
    logger: pino({ level: 'silent' }),
    random: () => 0.5,
  });
  const time = () => new Date(clock.now()).toISOString().slice(11, 19);
  const say = (who: string, what: string) => console.log(`[${time()}] ${who.padEnd(9)} ${what}`);
  const ledger = async () =>
    (await (await fetch(`${server.url}/ledger`)).json()) as {
      calls: number;
      lookups: number;
      charges: Charge[];
    };

  try {
    await sluice.migrate();
    console.log(`Sluice demo: the seed's operation O7\n  store    ${path} (SQLite, WAL, synchronous=FULL)`);
    console.log(`  provider ${server.url} (same key + same input → same charge for 24 h)\n`);
    sluice.define('charge', {
      input: z.object({ invoice: z.number().int(), amount_cents: z.number().int().positive() }),
      limits: { deadlineMs: null, backoff: { baseMs: 200, capMs: 10_000 } },
      async run(input, ctx) {
        const charge = await ctx.effect<Charge>('charge', {
          call: ({ key, signal }) => provider.charge({ tenant: ctx.tenant, ...input }, key, signal),
          lookup: ctx.id === 'O8' ? ({ key, signal }) => provider.lookupCharge(key, signal) : undefined,
          reference: (c) => c.id,
        });
        return { charge: charge.id };
      },
    });
    const workerOptions = {
      leaseMs: 30_000,
      pollIntervalMs: 10,
      rescueIntervalMs: false,
      purgeIntervalMs: false,
    } as const;
    const w1 = sluice.worker({ ...workerOptions, id: 'W1' });
    const O7 = { tenant: 'North', id: 'O7' };

    const accepted = await sluice.submit({
      ...O7,
      kind: 'charge',
      input: { invoice: 7, amount_cents: 5000 },
    });
    say(
      'client',
      `submits O7 for North: invoice 7, 5000 cents → ${accepted.operation.state}, digest ${accepted.operation.digest.slice(0, 12)}…`,
    );

    failpoints.enable('effect.after-call', {
      action: () => {
        say('W1', `takes O7, sends its effect key → the provider commits a charge`);
        clock.set('2026-03-02T12:01:00Z');
        throw new SimulatedCrash('W1 crashes before saving the charge');
      },
    });
    w1.start();
    await once(w1, 'attempt');
    await w1.stop();
    failpoints.reset();
    let l = await ledger();
    const key = (await sluice.get(O7, { include: ['effects'] }))?.effects?.[0]?.key;
    say(
      'W1',
      `crashes before saving ${l.charges[0]?.id} (crash point C2); the journal says: pending, key ${key}`,
    );

    const dup = await sluice.submit({ ...O7, kind: 'charge', input: { invoice: 7, amount_cents: 5000 } });
    say(
      'client',
      `its connection timed out; it retries O7 → the same operation (created: ${dup.created}), ${dup.operation.state}`,
    );
    try {
      await sluice.submit({ ...O7, kind: 'charge', input: { invoice: 7, amount_cents: 9000 } });
    } catch (error) {
      say('client', `sends O7 with 9000 cents → refused: ${isSluiceError(error) ? error.code : error}`);
    }

    clock.set('2026-03-02T12:02:00Z');
    await sluice.rescueExpiredLeases();
    say('queue', "W1's lease expired: O7 is redelivered (at-least-once)");
    const w2 = sluice.worker({ ...workerOptions, id: 'W2' });
    w2.start();
    let op = await sluice.wait(O7);
    l = await ledger();
    say(
      'W2',
      `sends the same key → the provider returns ${(op.result as { charge: string }).charge}; O7 ${op.state}`,
    );
    say('provider', `calls ${l.calls}, charges ${l.charges.length}: the redelivery did not charge twice\n`);
    await w2.stop();

    // The same crash, but the redelivery comes after the provider forgot the keys.
    clock.set('2026-03-02T13:00:00Z');
    const w3 = sluice.worker({ ...workerOptions, id: 'W3' });
    failpoints.enable('effect.after-call', { action: 'crash', times: 2 });
    w3.start();
    const crashes = new Promise<void>((resolve) => {
      let n = 0;
      w3.on('attempt', () => ++n === 2 && resolve());
    });
    for (const id of ['O8', 'O9']) {
      await sluice.submit({
        tenant: 'North',
        id,
        kind: 'charge',
        input: { invoice: Number(id.slice(1)), amount_cents: 1200 },
      });
    }
    await crashes;
    await w3.stop();
    failpoints.reset();
    l = await ledger();
    say(
      'W3',
      `charges O8 and O9 (${l.charges
        .slice(1)
        .map((c) => c.id)
        .join(', ')}), then crashes before saving either`,
    );
    clock.set('2026-03-03T13:05:00Z');
    await sluice.rescueExpiredLeases();
    say('queue', 'redelivers O8 and O9 — 24 h later: the provider no longer honours their keys');
    const w4 = sluice.worker({ ...workerOptions, id: 'W4' });
    w4.start();
    op = await sluice.wait({ tenant: 'North', id: 'O9' });
    say('W4', `O9 has no lookup: a blind retry could charge again → ${op.state}, no call`);
    op = await sluice.wait({ tenant: 'North', id: 'O8' });
    say(
      'W4',
      `O8 asks the provider by key (lookup) → finds ${(op.result as { charge: string }).charge} → ${op.state}`,
    );
    l = await ledger();
    say(
      'provider',
      `calls ${l.calls}, lookups ${l.lookups}, charges ${l.charges.length}: one charge per operation\n`,
    );

    const queued = await sluice.submit({
      tenant: 'North',
      id: 'O10',
      kind: 'charge',
      input: { invoice: 10, amount_cents: 700 },
      delayMs: 60_000,
    });
    const cancel = await sluice.cancel({ tenant: 'North', id: 'O10' });
    say(
      'client',
      `cancels O10 while ${queued.operation.state} → ${cancel.cancel}: it never runs, nothing is charged`,
    );
    const late = await sluice.cancel(O7);
    say(
      'client',
      `cancels O7 → ${late.cancel}: the charge exists; undoing it is a separate, authorized refund`,
    );

    await w4.stop();
    console.log(
      `\nInspect it: npx sluice ops list --db ${path}   ·   npx sluice ops show North O7 --db ${path}`,
    );
  } finally {
    failpoints.reset();
    await sluice.close();
    await server.close();
  }
}
