/**
 * Randomized torture: 300 charge operations submitted in waves from the test process onto one
 * SQLite file while 3 worker processes run them, and a chaos loop SIGKILLs a random worker at
 * random moments and restarts it, until every operation is terminal. Half the incarnations are
 * also armed to SIGKILL themselves at a random crash point (C0–C4) on a random nth hit, so deaths
 * land exactly inside the effect protocol's windows as well as anywhere else; one worker slot
 * recovers with `lookup`, the others by resending the key.
 *
 * Then the history is checked the way Jepsen's total-queue checker does:
 * - lost: an accepted operation missing, or not terminal, or not `succeeded` — must be none;
 * - unexpected: an operation, or a charge at the stub, the test never submitted — must be none;
 * - duplicate deliveries (attempts ended `lease-expired`): counted and reported, they are allowed;
 * - duplicate effects: more than one charge under an operation's key — must be zero, and every
 *   operation's result and journal name its one charge.
 * A one-line summary is printed. The random choices come from a seed (printed; `TORTURE_SEED`
 * replays them — the OS's timing, of course, does not replay).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { isTerminal, type Operation } from '../../src/index.js';
import { CRASH_POINTS } from '../../src/testing/index.js';
import { chargeKey, processRig, type Rig } from '../helpers/process-rig.js';
import type { WorkerProcess } from '../helpers/worker-process.js';

/** `TORTURE_OPS` makes a longer soak run (raise GUARD_MS with it). */
const OPS = Number(process.env.TORTURE_OPS ?? 300);
const WORKERS = 3;
const TENANTS = ['north', 'south', 'east', 'west'];
/** A failure guard: the run takes a few seconds; this only bounds a broken one. */
const GUARD_MS = Number(process.env.TORTURE_GUARD_MS ?? 50_000);
const seed = Number(process.env.TORTURE_SEED ?? Date.now() % 1_000_000);

/** mulberry32: a small seeded PRNG, so a run's random choices can be replayed. */
function prng(s: number): () => number {
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}
const random = prng(seed);
const between = (lo: number, hi: number) => lo + Math.floor(random() * (hi - lo + 1));
/** Chaos pacing: WHEN the next fault or wave happens. Never used to wait for an outcome. */
const pause = (lo: number, hi: number) => new Promise((r) => setTimeout(r, between(lo, hi)));

describe(`torture: random SIGKILLs of ${WORKERS} worker processes under ${OPS} charges`, () => {
  let rig: Rig;
  afterAll(async () => rig?.close());

  it(
    'loses nothing, invents nothing, and charges each operation exactly once',
    async () => {
      const started = performance.now();
      // The chaos kills workers whatever they run, so an operation may be hit several times by
      // bad luck: the attempt and poison (crash-loop) limits are lifted here so that they cannot
      // park an operation; they have their own tests. The stub's latency widens the in-flight window.
      rig = await processRig({ provider: { latencyMs: 10 }, maxAttempts: 1000 });
      const { sluice } = rig.h;
      const submitted = new Map<
        string,
        { tenant: string; id: string; invoice: number; amount_cents: number }
      >();
      let done = false;
      let kills = 0;
      let failpointKills = 0;
      const badExits: string[] = [];
      const current: Array<WorkerProcess | undefined> = [];
      const killedByTest = new Set<WorkerProcess>();

      // One supervisor per slot: (re)starts the slot's worker whenever it dies, until the end.
      const supervise = async (slot: number) => {
        for (let incarnation = 1; !done; incarnation++) {
          const point = Object.keys(CRASH_POINTS)[between(0, 4)];
          const armed = random() < 0.5 ? `${point}=kill@${between(1, 25)}` : undefined;
          const w = rig.spawn(`W${slot}.${incarnation}`, {
            failpoints: armed,
            env: { LEASE_MS: '600', SLOTS: '4', MAX_LEASE_EXPIRIES: '1000', LOOKUP: slot === 1 ? '1' : '0' },
          });
          current[slot] = w;
          const exit = await w.exited;
          if (done && !killedByTest.has(w) && exit.code === 0) return; // the final SIGTERM
          if (exit.signal !== 'SIGKILL') badExits.push(`${w.options.id} ${JSON.stringify(exit)}\n${w.log}`);
          else if (!killedByTest.has(w)) failpointKills++;
        }
      };
      const supervisors = Array.from({ length: WORKERS }, (_, slot) => supervise(slot));

      let submitFailure: unknown;
      const submitter = (async () => {
        for (let n = 1; n <= OPS; n++) {
          const op = {
            tenant: TENANTS[n % TENANTS.length]!,
            id: `T${n}`,
            invoice: n,
            amount_cents: between(100, 99_999),
          };
          const { tenant, id, ...input } = op;
          const res = await sluice.submit({ tenant, id, kind: 'charge', input });
          if (!res.created) throw new Error(`${tenant}/${id} was not created`);
          submitted.set(`${tenant}/${id}`, op);
          if (n % 12 === 0) await pause(50, 400);
        }
      })().catch((error) => {
        submitFailure = error;
      });

      const allTerminal = async () =>
        submitted.size === OPS &&
        // One read of the admission counters (kept in the same transactions as the states): two
        // reads could miss an operation moving from running back to queued between them.
        (await sluice.store.queueStats()).every((q) => q.waiting === 0 && q.running === 0);

      // Chaos: kill a random live worker at a random moment, until every operation is terminal.
      try {
        const guard = performance.now() + GUARD_MS;
        while (!(await allTerminal())) {
          if (submitFailure) throw submitFailure;
          if (performance.now() > guard)
            throw new Error(`not all terminal after ${GUARD_MS} ms (seed ${seed})`);
          await pause(100, 600);
          const w = current[between(0, WORKERS - 1)];
          if (w?.alive) {
            killedByTest.add(w);
            w.signal('SIGKILL');
            kills++;
          }
        }
      } finally {
        done = true; // no supervisor restarts anything from here on
      }
      await submitter;
      for (const w of current) {
        if (!w?.alive) continue;
        await w.ready().catch(() => undefined);
        w.signal('SIGTERM');
      }
      await Promise.all(supervisors);
      expect(badExits).toEqual([]);

      // --- The history, checked like a total queue. ---
      const stored = new Map<string, Operation>();
      for (let cursor: string | undefined; ; ) {
        const page = await sluice.list({ limit: 500, cursor });
        for (const op of page.operations) stored.set(`${op.tenant}/${op.id}`, op);
        if (!page.nextCursor) break;
        cursor = page.nextCursor;
      }
      const lost = [...submitted.keys()].filter((k) => !stored.has(k));
      const unexpected = [...stored.keys()].filter((k) => !submitted.has(k));
      const notSucceeded = [...stored.values()].filter((o) => o.state !== 'succeeded');
      expect(lost).toEqual([]);
      expect(unexpected).toEqual([]);
      expect(notSucceeded.map((o) => [o.tenant, o.id, o.state, o.error])).toEqual([]);
      expect([...stored.values()].every((o) => isTerminal(o.state))).toBe(true);

      const ledger = rig.provider.stub.ledger();
      const byKey = new Map<string, typeof ledger>();
      for (const c of ledger) byKey.set(c.key, [...(byKey.get(c.key) ?? []), c]);
      const expectedKeys = new Map([...submitted.values()].map((s) => [chargeKey(s.tenant, s.id), s]));
      expect([...byKey.keys()].filter((k) => !expectedKeys.has(k))).toEqual([]); // unexpected charges
      expect(rig.provider.stub.doubleCharges()).toEqual([]);

      let redeliveries = 0;
      let redelivered = 0;
      let retries = 0;
      const wrong: string[] = [];
      for (const s of submitted.values()) {
        const op = (await sluice.get(s, { include: ['attempts', 'effects'] }))!;
        const charges = byKey.get(chargeKey(s.tenant, s.id)) ?? [];
        const outcomes = op.attempts?.map((a) => a.outcome) ?? [];
        const expired = outcomes.filter((o) => o === 'lease-expired').length;
        redeliveries += expired;
        if (expired > 0) redelivered++;
        retries += outcomes.filter((o) => o === 'retry').length;
        const charge = charges[0];
        const ok =
          charges.length === 1 &&
          charge!.params.tenant === s.tenant &&
          charge!.params.invoice === s.invoice &&
          charge!.amount_cents === s.amount_cents &&
          (op.result as { charge?: string }).charge === charge!.id &&
          outcomes.filter((o) => o === 'succeeded').length === 1 &&
          outcomes.at(-1) === 'succeeded' &&
          op.effects?.length === 1 &&
          op.effects[0]!.state === 'committed' &&
          op.effects[0]!.reference === charge!.id;
        if (!ok) wrong.push(`${s.tenant}/${s.id}: ${charges.length} charges, attempts ${outcomes.join(',')}`);
      }
      expect(wrong).toEqual([]);
      expect(ledger).toHaveLength(OPS);

      const calls = rig.provider.stub.calls;
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      console.log(
        `torture: ops=${OPS} workers=${WORKERS} kills=${kills + failpointKills} (chaos ${kills}, at crash points ${failpointKills}) ` +
          `redeliveries=${redeliveries} (on ${redelivered} ops) retries=${retries} provider-calls=${calls} lookups=${rig.provider.stub.lookups} ` +
          `charges=${ledger.length} double-charges=${rig.provider.stub.doubleCharges().length} ` +
          `lost=${lost.length} unexpected=${unexpected.length} seed=${seed} in ${seconds}s`,
      );
      // A run without faults would prove nothing.
      expect(kills).toBeGreaterThanOrEqual(5);
      expect(redeliveries).toBeGreaterThan(0);
    },
    GUARD_MS + 40_000,
  );
});
