/**
 * Randomized torture on PostgreSQL: 1,000 charge operations submitted in waves from the test
 * process into one PostgreSQL schema while 3 worker processes run them, and a chaos loop
 * SIGKILLs a random worker at random moments and restarts it, until every operation is terminal.
 * Half the incarnations are also armed to SIGKILL themselves at a random crash point (C0–C4) on a
 * random nth hit, so deaths also land inside the effect protocol's windows; one worker slot
 * recovers with `lookup`, the others by resending the key.
 *
 * Checked afterwards, as in the SQLite torture (test/process/torture.test.ts):
 * - lost: an accepted operation missing, not terminal, or not `succeeded` — none;
 * - unexpected: an operation, or a charge at the stub, the test never submitted — none;
 * - duplicate effects: more than one charge under an operation's key — none, and every
 *   operation's result and journal name its one charge.
 *
 * And what only many processes on one server can break — **no operation is ever claimed under
 * two live leases at once** — from three independent sources of evidence:
 * 1. A sampler in the test process reads every `running` operation's lease (epoch, owner,
 *    expiry, start) many times a second, each read one snapshot of the server, and checks that an
 *    epoch never has two owners (nor two start times), that an operation's epoch never goes back,
 *    and that every lease it saw belongs to the worker the attempt history names for that epoch.
 * 2. The attempt history: per operation, one row (one owner) per claim; each attempt's
 *    [start, end] ends before the next one starts; an attempt ended by the rescuer
 *    (`lease-expired`) ended after every expiry the sampler ever saw for that lease, i.e. it was
 *    taken away only once it had really expired.
 * 3. The workers' own reports: at most one worker had a `succeeded` completion accepted for an
 *    operation, and it is the owner of the one `succeeded` attempt.
 * The sampler must also have watched leases being taken over after a death (non-vacuous).
 *
 * A one-line summary is printed. `TORTURE_SEED` replays the random choices (not the OS's timing).
 */
import type pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { CRASH_POINTS } from '../../src/testing/index.js';
import { type ExpectedCharge, expectChargedOnce } from '../helpers/charged-once.js';
import { processRig, type Rig, workerOf } from '../helpers/process-rig.js';
import { chaos } from '../helpers/seeded.js';
import type { WorkerProcess } from '../helpers/worker-process.js';

/** `PG_TORTURE_OPS` makes a longer soak run (raise PG_TORTURE_GUARD_MS with it). */
const OPS = Number(process.env.PG_TORTURE_OPS ?? 1000);
const WORKERS = 3;
const TENANTS = ['north', 'south', 'east', 'west', 'central'];
/**
 * Failure guards. The run takes some 35–50 s alone, longer beside the rest of the suite, and its
 * length is the chaos's more than the engine's (a worker killed every ~1.2 s spends much of its
 * life starting), so the guard that catches a stuck run is one on progress: no operation
 * finished for STALL_MS. GUARD_MS only bounds the whole.
 */
const STALL_MS = 30_000;
const GUARD_MS = Number(process.env.PG_TORTURE_GUARD_MS ?? 150_000);
const seed = Number(process.env.TORTURE_SEED ?? Date.now() % 1_000_000);

const { random, between, pause } = chaos(seed);

/** What the sampler learned about one lease (one operation, one epoch). */
interface SeenLease {
  owner: string;
  startedAt: number;
  /** The latest expiry it saw: the lease was live at least until then, unless released. */
  maxExpiresAt: number;
  /** Samples in which the lease was live (expiry after the server's now). */
  liveSamples: number;
}

/**
 * Reads the leases of every running operation in one statement (one snapshot, the server's
 * clock), again and again until stopped, and records any contradiction as it goes.
 */
function leaseSampler(client: pg.Client, quoted: string) {
  const seen = new Map<string, Map<number, SeenLease>>();
  const lastEpoch = new Map<string, number>();
  const violations: string[] = [];
  let samples = 0;
  let observations = 0;
  let stopped = false;
  const sql = `WITH t AS (SELECT ${quoted}.now_ms(NULL) AS now)
    SELECT o.tenant, o.id, o.epoch::float8 AS epoch, o.lease_owner, o.lease_expires_at, o.started_at, t.now
      FROM t, ${quoted}.operations o WHERE o.state = 'running'`;
  const loop = (async () => {
    while (!stopped) {
      const { rows } = await client.query<{
        tenant: string;
        id: string;
        epoch: number;
        lease_owner: string | null;
        lease_expires_at: string | null;
        started_at: string | null;
        now: string;
      }>(sql);
      samples++;
      for (const r of rows) {
        observations++;
        const key = `${r.tenant}/${r.id}`;
        const now = Number(r.now);
        const expiresAt = Number(r.lease_expires_at);
        const startedAt = Number(r.started_at);
        if (r.lease_owner === null || r.lease_expires_at === null || r.started_at === null) {
          violations.push(`${key} epoch ${r.epoch}: running without a lease ${JSON.stringify(r)}`);
          continue;
        }
        const last = lastEpoch.get(key) ?? 0;
        if (r.epoch < last) violations.push(`${key}: epoch went back from ${last} to ${r.epoch}`);
        lastEpoch.set(key, Math.max(last, r.epoch));
        const byEpoch = seen.get(key) ?? new Map<number, SeenLease>();
        seen.set(key, byEpoch);
        const lease = byEpoch.get(r.epoch);
        if (!lease) {
          byEpoch.set(r.epoch, {
            owner: r.lease_owner,
            startedAt,
            maxExpiresAt: expiresAt,
            liveSamples: expiresAt > now ? 1 : 0,
          });
          continue;
        }
        if (lease.owner !== r.lease_owner)
          violations.push(`${key} epoch ${r.epoch}: owned by ${lease.owner} and by ${r.lease_owner}`);
        if (lease.startedAt !== startedAt)
          violations.push(`${key} epoch ${r.epoch}: started at ${lease.startedAt} and at ${startedAt}`);
        lease.maxExpiresAt = Math.max(lease.maxExpiresAt, expiresAt);
        if (expiresAt > now) lease.liveSamples++;
      }
      await pause(2, 8);
    }
  })().catch((error) => {
    violations.push(`the sampler failed: ${error}`);
  });
  return {
    seen,
    violations,
    get samples() {
      return samples;
    },
    get observations() {
      return observations;
    },
    async stop() {
      stopped = true;
      await loop;
    },
  };
}

describe(`PostgreSQL torture: random SIGKILLs of ${WORKERS} worker processes under ${OPS} charges`, () => {
  let rig: Rig;
  let sampling: pg.Client | undefined;
  afterAll(async () => {
    await sampling?.end().catch(() => {});
    await rig?.close();
  });

  it(
    'loses nothing, invents nothing, charges each operation once, never leases one twice at once',
    async () => {
      const started = performance.now();
      // The chaos kills workers whatever they run, so an operation may be hit several times by
      // bad luck: the attempt and poison (crash-loop) limits are lifted so that they cannot park
      // an operation (they have their own tests). The stub's latency widens the in-flight window.
      rig = await processRig({ store: 'postgres', provider: { latencyMs: 10 }, maxAttempts: 1000 });
      const pgInfo = rig.postgres!;
      const { sluice } = rig.h;
      sampling = await pgInfo.client();
      const sampler = leaseSampler(sampling, pgInfo.quoted);

      const submitted = new Map<string, ExpectedCharge>();
      let done = false;
      let kills = 0;
      let failpointKills = 0;
      const badExits: string[] = [];
      const current: Array<WorkerProcess | undefined> = [];
      const everyWorker: WorkerProcess[] = [];
      const killedByTest = new Set<WorkerProcess>();

      // One supervisor per slot: (re)starts the slot's worker whenever it dies, until the end.
      const supervise = async (slot: number) => {
        for (let incarnation = 1; !done; incarnation++) {
          const point = Object.keys(CRASH_POINTS)[between(0, 4)];
          const armed = random() < 0.5 ? `${point}=kill@${between(1, 40)}` : undefined;
          const w = rig.spawn(`W${slot}.${incarnation}`, {
            failpoints: armed,
            env: {
              LEASE_MS: '800',
              SLOTS: '4',
              POOL_SIZE: '3',
              RESCUE_MS: '100',
              MAX_LEASE_EXPIRIES: '1000',
              LOOKUP: slot === 1 ? '1' : '0',
            },
          });
          current[slot] = w;
          everyWorker.push(w);
          const exit = await w.exited;
          if (done && !killedByTest.has(w) && exit.code === 0) return; // the final SIGTERM
          if (exit.signal !== 'SIGKILL') badExits.push(`${w.options.id} ${JSON.stringify(exit)}\n${w.log}`);
          else if (!killedByTest.has(w)) failpointKills++;
        }
      };
      const supervisors = Array.from({ length: WORKERS }, (_, slot) => supervise(slot));

      // Waves of concurrent submits (they share one batched commit), at random intervals.
      let submitFailure: unknown;
      const submitter = (async () => {
        for (let n = 1; n <= OPS; ) {
          const wave: Promise<void>[] = [];
          for (let k = between(10, 40); k > 0 && n <= OPS; k--, n++) {
            const op = {
              tenant: TENANTS[n % TENANTS.length]!,
              id: `P${n}`,
              invoice: n,
              amount_cents: between(100, 99_999),
            };
            const { tenant, id, ...input } = op;
            wave.push(
              sluice.submit({ tenant, id, kind: 'charge', input }).then((res) => {
                if (!res.created) throw new Error(`${tenant}/${id} was not created`);
                submitted.set(`${tenant}/${id}`, op);
              }),
            );
          }
          await Promise.all(wave);
          await pause(30, 250);
        }
      })().catch((error) => {
        submitFailure = error;
      });

      // One read of the admission counters (kept in the same transactions as the states): two
      // reads could miss an operation moving from running back to queued between them.
      let live = { waiting: 0, running: 0 };
      const allTerminal = async () => {
        live = { waiting: 0, running: 0 };
        for (const q of await sluice.store.queueStats()) {
          live.waiting += q.waiting;
          live.running += q.running;
        }
        return submitted.size === OPS && live.waiting === 0 && live.running === 0;
      };
      const stuck = (why: string) =>
        new Error(
          `${why} (seed ${seed}): ${submitted.size} submitted, ${live.waiting} waiting, ${live.running} running; ` +
            `workers ${current.map((w) => `${w?.options.id}:${w?.alive ? 'alive' : 'dead'}`).join(' ')}`,
        );

      // Chaos: kill a random live worker at a random moment, until every operation is terminal.
      try {
        const guard = performance.now() + GUARD_MS;
        let lastProgress = performance.now();
        let leastLeft = Number.POSITIVE_INFINITY;
        while (!(await allTerminal())) {
          if (submitFailure) throw submitFailure;
          const left = OPS - submitted.size + live.waiting + live.running;
          if (left < leastLeft) [leastLeft, lastProgress] = [left, performance.now()];
          if (performance.now() - lastProgress > STALL_MS)
            throw stuck(`no operation finished in ${STALL_MS} ms`);
          if (performance.now() > guard) throw stuck(`not all terminal after ${GUARD_MS} ms`);
          await pause(100, 700);
          const w = current[between(0, WORKERS - 1)];
          if (w?.alive) {
            killedByTest.add(w);
            w.signal('SIGKILL');
            kills++;
          }
        }
      } finally {
        done = true; // no supervisor restarts anything from here on
        await sampler.stop();
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
      await expectChargedOnce(sluice, rig.provider.stub, submitted);

      // --- One live lease at a time. ---
      // 1. What the sampler saw, in itself.
      expect(sampler.violations).toEqual([]);

      // 2. The attempt history, against the operations and the sampler.
      const client = sampling;
      const { rows: attemptRows } = await client.query<{
        tenant: string;
        op_id: string;
        epoch: number;
        owner: string | null;
        started_at: string;
        ended_at: string;
        outcome: string;
      }>(
        `SELECT o.tenant, o.id AS op_id, a.epoch::float8 AS epoch, a.owner, a.started_at, a.ended_at, a.outcome
           FROM ${pgInfo.quoted}.attempts a JOIN ${pgInfo.quoted}.operations o ON o.seq = a.op_seq
          ORDER BY o.tenant, o.id, a.epoch`,
      );
      const { rows: epochRows } = await client.query<{
        tenant: string;
        id: string;
        epoch: number;
        attempt: number;
      }>(`SELECT tenant, id, epoch::float8 AS epoch, attempt FROM ${pgInfo.quoted}.operations`);
      const attemptsByOp = new Map<string, typeof attemptRows>();
      for (const a of attemptRows) {
        const key = `${a.tenant}/${a.op_id}`;
        attemptsByOp.set(key, [...(attemptsByOp.get(key) ?? []), a]);
      }
      const historyViolations: string[] = [];
      let redeliveries = 0;
      let redelivered = 0;
      let retries = 0;
      let takeoversSeen = 0;
      for (const { tenant, id, epoch, attempt } of epochRows) {
        const key = `${tenant}/${id}`;
        const attempts = attemptsByOp.get(key) ?? [];
        const epochs = attempts.map((a) => a.epoch);
        // One row per claim: every claim but a released one used an attempt, and the last claim's
        // epoch is the operation's. (Epochs grow by random steps, so their values say nothing of
        // how many claims there were.)
        const released = attempts.filter((a) => a.outcome === 'released').length;
        if (attempts.length !== attempt + released || epochs.at(-1) !== epoch)
          historyViolations.push(
            `${key}: epochs ${epochs.join(',')} for a final epoch ${epoch} and ${attempt} attempts`,
          );
        for (const seen of sampler.seen.get(key)?.keys() ?? [])
          if (!epochs.includes(seen))
            historyViolations.push(`${key}: epoch ${seen} sampled, not in the history`);
        const expired = attempts.filter((a) => a.outcome === 'lease-expired').length;
        redeliveries += expired;
        if (expired > 0) redelivered++;
        retries += attempts.filter((a) => a.outcome === 'retry').length;
        if (
          attempts.filter((a) => a.outcome === 'succeeded').length !== 1 ||
          attempts.at(-1)?.outcome !== 'succeeded'
        )
          historyViolations.push(`${key}: attempts ${attempts.map((a) => a.outcome).join(',')}`);
        const leases = sampler.seen.get(key);
        attempts.forEach((a, i) => {
          const start = Number(a.started_at);
          const end = Number(a.ended_at);
          if (a.owner === null) historyViolations.push(`${key} epoch ${a.epoch}: attempt without an owner`);
          if (end < start) historyViolations.push(`${key} epoch ${a.epoch}: ended before it started`);
          const next = attempts[i + 1];
          if (next && Number(next.started_at) < end)
            historyViolations.push(
              `${key}: epoch ${next.epoch} (${next.owner}) started at ${next.started_at}, ` +
                `before epoch ${a.epoch} (${a.owner}) ended at ${end}`,
            );
          const lease = leases?.get(a.epoch);
          if (!lease) return;
          if (lease.owner !== a.owner || lease.startedAt !== start)
            historyViolations.push(
              `${key} epoch ${a.epoch}: sampled as ${lease.owner}@${lease.startedAt}, recorded as ${a.owner}@${start}`,
            );
          if (a.outcome === 'lease-expired') {
            if (end <= lease.maxExpiresAt)
              historyViolations.push(
                `${key} epoch ${a.epoch}: taken from ${a.owner} at ${end}, but it was seen leased until ${lease.maxExpiresAt}`,
              );
            if (next && leases?.has(next.epoch) && leases.get(next.epoch)!.owner !== a.owner) takeoversSeen++;
          }
        });
      }
      expect(historyViolations).toEqual([]);

      // 3. The workers' own reports: one accepted success per operation, by the recorded owner.
      const successReportedBy = new Map<string, string[]>();
      for (const w of everyWorker) {
        for (const e of w.events) {
          const report = e.report as { outcome?: string; end?: string; accepted?: boolean } | undefined;
          if (e.event !== 'attempt' || report?.outcome !== 'written' || report.end !== 'succeeded') continue;
          if (!report.accepted) continue;
          const key = `${e.tenant}/${e.id}`;
          successReportedBy.set(key, [...(successReportedBy.get(key) ?? []), w.options.id]);
        }
      }
      const reportViolations: string[] = [];
      for (const [key, by] of successReportedBy) {
        const owner = attemptsByOp.get(key)?.find((a) => a.outcome === 'succeeded')?.owner;
        if (by.length !== 1 || by[0] !== workerOf(owner))
          reportViolations.push(`${key}: success accepted for ${by.join(',')}, recorded for ${owner}`);
      }
      expect(reportViolations).toEqual([]);
      // Nearly every success is reported (a worker killed right after completing cannot say so).
      expect(successReportedBy.size).toBeGreaterThan(OPS / 2);

      const calls = rig.provider.stub.calls;
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      console.log(
        `postgres torture: ops=${OPS} workers=${WORKERS} kills=${kills + failpointKills} (chaos ${kills}, at crash points ${failpointKills}) ` +
          `redeliveries=${redeliveries} (on ${redelivered} ops) retries=${retries} provider-calls=${calls} lookups=${rig.provider.stub.lookups} ` +
          `charges=${rig.provider.stub.ledger().length} double-charges=0 lost=0 unexpected=0 ` +
          `lease-samples=${sampler.samples} leases-seen=${[...sampler.seen.values()].reduce((n, m) => n + m.size, 0)} ` +
          `takeovers-seen=${takeoversSeen} double-leases=0 seed=${seed} in ${seconds}s`,
      );
      // A run without faults, or a sampler that saw nothing change hands, would prove nothing.
      expect(kills).toBeGreaterThanOrEqual(5);
      expect(redeliveries).toBeGreaterThan(0);
      expect(sampler.observations).toBeGreaterThan(OPS / 2);
      expect(takeoversSeen).toBeGreaterThan(0);
    },
    GUARD_MS + 30_000,
  );
});
