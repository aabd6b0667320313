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
import { CRASH_POINTS } from '../../src/testing/index.js';
import { type ExpectedCharge, expectChargedOnce } from '../helpers/charged-once.js';
import { processRig, type Rig } from '../helpers/process-rig.js';
import { chaos } from '../helpers/seeded.js';
import type { WorkerProcess } from '../helpers/worker-process.js';

/** `TORTURE_OPS` makes a longer soak run (raise GUARD_MS with it). */
const OPS = Number(process.env.TORTURE_OPS ?? 300);
const WORKERS = 3;
const TENANTS = ['north', 'south', 'east', 'west'];
/** A failure guard: the run takes a few seconds; this only bounds a broken one. */
const GUARD_MS = Number(process.env.TORTURE_GUARD_MS ?? 50_000);
const seed = Number(process.env.TORTURE_SEED ?? Date.now() % 1_000_000);

const { random, between, pause } = chaos(seed);

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
      const submitted = new Map<string, ExpectedCharge>();
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
      const { outcomes } = await expectChargedOnce(sluice, rig.provider.stub, submitted);
      let redeliveries = 0;
      let redelivered = 0;
      let retries = 0;
      for (const ended of outcomes.values()) {
        const expired = ended.filter((o) => o === 'lease-expired').length;
        redeliveries += expired;
        if (expired > 0) redelivered++;
        retries += ended.filter((o) => o === 'retry').length;
      }

      const calls = rig.provider.stub.calls;
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      console.log(
        `torture: ops=${OPS} workers=${WORKERS} kills=${kills + failpointKills} (chaos ${kills}, at crash points ${failpointKills}) ` +
          `redeliveries=${redeliveries} (on ${redelivered} ops) retries=${retries} provider-calls=${calls} lookups=${rig.provider.stub.lookups} ` +
          `charges=${rig.provider.stub.ledger().length} double-charges=0 lost=0 unexpected=0 seed=${seed} in ${seconds}s`,
      );
      // A run without faults would prove nothing.
      expect(kills).toBeGreaterThanOrEqual(5);
      expect(redeliveries).toBeGreaterThan(0);
    },
    GUARD_MS + 40_000,
  );
});
