/**
 * Admission caps under load, across real processes, on both stores (issue 4): 3 worker processes
 * share one store and run 400 operations of 5 tenants in two workload classes (`charge` in
 * `interactive`, with a provider call; `export` in `bulk`), each attempt working a few tens of
 * milliseconds so that attempts overlap. Mid-run one worker is SIGKILLed and replaced.
 *
 * A sampler in the test process reads every running operation from the store again and again
 * (one statement per sample: one snapshot) and checks each sample:
 * - per (class, tenant): running ≤ the tenant's `maxRunning` in that class, as resolved from the
 *   configuration below (per-class override, `'*'`, the class default; East is uncapped);
 * - per (class, worker): leases held ≤ that worker's slots for the class;
 * - per class: running ≤ slots × the processes holding leases in the sample. That is 3 live
 *   workers, plus the killed one while its leases are not yet rescued: a dead worker's leases
 *   keep counting as running (and against its tenants' caps) until they expire, which is correct
 *   — the replacement must not exceed a tenant's cap meanwhile, and the sampler checks it does not.
 * It must also have seen the limits reached (otherwise it proves nothing): in each class a tenant
 * with a cap of 2 or more at its cap, and the class at exactly slots × 3 in a sample where only
 * the 3 live workers held leases; and the killed worker's leases counted next to its
 * replacement's.
 *
 * Afterwards every operation succeeded, each charge once. One summary line per store.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { isTerminal, type Operation } from '../../src/index.js';
import type { Store } from '../../src/store/store.js';
import type { OperationRow } from '../../src/store/types.js';
import { chargeKey, processRig, type Rig, workerOf } from '../helpers/process-rig.js';
import type { WorkerConfig, WorkerProcess } from '../helpers/worker-process.js';

const WORKERS = 3;
const PER_TENANT_AND_KIND = 40;
const TENANTS = ['North', 'South', 'Bulk', 'East', 'West'] as const;
/** A failure guard: the run takes a few seconds; this only bounds a broken one. */
const GUARD_MS = 45_000;

const SLOTS = { interactive: 3, bulk: 2 } as const;
type Cls = keyof typeof SLOTS;
const CONFIG: WorkerConfig = {
  classes: {
    interactive: { tenant: { maxRunning: 3 } },
    bulk: { tenant: { maxRunning: 2 } },
  },
  tenants: {
    North: { interactive: { maxRunning: 2 }, bulk: { maxRunning: 1 } },
    Bulk: { '*': { maxRunning: 1 } },
    East: { '*': { maxRunning: null } },
    West: { bulk: { maxRunning: 3 } },
    // South: the class defaults.
  },
  slots: SLOTS,
  charge: { class: 'interactive', workMs: 25 },
  export: { class: 'bulk', workMs: 40 },
};
/** The caps the configuration above must resolve to, written out by hand (null: no cap). */
const CAPS: Record<Cls, Record<(typeof TENANTS)[number], number | null>> = {
  interactive: { North: 2, South: 3, Bulk: 1, East: null, West: 3 },
  bulk: { North: 1, South: 2, Bulk: 1, East: null, West: 3 },
};
const KIND_CLASS: Record<string, Cls> = { charge: 'interactive', export: 'bulk' };

/** Sample pacing only: WHEN the next read happens. Never used to wait for an outcome. */
const pause = (lo: number, hi: number) =>
  new Promise((r) => setTimeout(r, lo + Math.floor(Math.random() * (hi - lo + 1))));

const inc = <K>(m: Map<K, number>, k: K) => m.set(k, (m.get(k) ?? 0) + 1);
const raise = <K>(m: Map<K, number>, k: K, v: number) => m.set(k, Math.max(m.get(k) ?? 0, v));

/**
 * Reads the running operations in one statement per sample until stopped, and checks the caps in
 * every sample. `deadOwners()` names the workers killed so far (their leases still count).
 */
function runningSampler(store: Store, deadOwners: () => ReadonlySet<string>) {
  const violations: string[] = [];
  const maxByTenant = new Map<string, number>(); // `${class}/${tenant}`
  const maxByOwner = new Map<string, number>(); // `${class}/${owner}`
  const maxByClass = new Map<string, number>();
  /** The same, over the samples where only live workers held leases (3 processes). */
  const maxByClassLive = new Map<string, number>();
  let samples = 0;
  let rowsSeen = 0;
  let samplesWithDeadLeases = 0;
  let maxOwners = 0;
  let stopped = false;
  const check = (rows: OperationRow[]) => {
    samples++;
    rowsSeen += rows.length;
    const byTenant = new Map<string, number>();
    const byOwner = new Map<string, number>();
    const byClass = new Map<string, number>();
    const owners = new Set<string>();
    for (const r of rows) {
      if (KIND_CLASS[r.kind] !== r.class)
        violations.push(`${r.tenant}/${r.id}: kind ${r.kind} in class ${r.class}`);
      if (r.leaseOwner === null) {
        violations.push(`${r.tenant}/${r.id}: running without a lease owner`);
        continue;
      }
      owners.add(r.leaseOwner);
      inc(byTenant, `${r.class}/${r.tenant}`);
      inc(byOwner, `${r.class}/${r.leaseOwner}`);
      inc(byClass, r.class);
    }
    const dead = deadOwners();
    const withDead = [...owners].some((o) => dead.has(workerOf(o) ?? o));
    if (withDead) samplesWithDeadLeases++;
    maxOwners = Math.max(maxOwners, owners.size);
    for (const [key, n] of byTenant) {
      raise(maxByTenant, key, n);
      const [cls, tenant] = key.split('/') as [Cls, (typeof TENANTS)[number]];
      const cap = CAPS[cls]?.[tenant];
      if (cap === undefined) violations.push(`sample ${samples}: unexpected ${key}`);
      else if (cap !== null && n > cap)
        violations.push(`sample ${samples}: ${key} has ${n} running, its maxRunning is ${cap}`);
    }
    for (const [key, n] of byOwner) {
      raise(maxByOwner, key, n);
      const cls = key.slice(0, key.indexOf('/')) as Cls;
      if (n > SLOTS[cls])
        violations.push(`sample ${samples}: ${key} holds ${n} leases, its slots are ${SLOTS[cls]}`);
    }
    for (const [cls, n] of byClass) {
      raise(maxByClass, cls, n);
      if (!withDead) raise(maxByClassLive, cls, n);
      const bound = SLOTS[cls as Cls] * owners.size;
      if (n > bound)
        violations.push(
          `sample ${samples}: class ${cls} has ${n} running with ${owners.size} lease holders (bound ${bound})`,
        );
    }
    if (owners.size > WORKERS + dead.size)
      violations.push(
        `sample ${samples}: ${owners.size} lease holders, more than the processes ever started`,
      );
  };
  const loop = (async () => {
    while (!stopped) {
      const rows = await store.operationList({ state: 'running', limit: 500 });
      if (rows.length >= 500) violations.push(`sample ${samples + 1}: 500 running rows or more`);
      check(rows);
      await pause(1, 4);
    }
  })().catch((error) => {
    violations.push(`the sampler failed: ${error}`);
  });
  return {
    violations,
    maxByTenant,
    maxByOwner,
    maxByClass,
    maxByClassLive,
    get samples() {
      return samples;
    },
    get rowsSeen() {
      return rowsSeen;
    },
    get samplesWithDeadLeases() {
      return samplesWithDeadLeases;
    },
    get maxOwners() {
      return maxOwners;
    },
    async stop() {
      stopped = true;
      await loop;
    },
  };
}

/** Operations not terminal: waiting or running, from the store's counters (one statement). */
async function outstanding(store: Store): Promise<number> {
  return (await store.queueStats()).reduce((n, q) => n + q.waiting + q.running, 0);
}

describe.each(['sqlite', 'postgres'] as const)('admission caps across %s worker processes', (storeKind) => {
  let rig: Rig | undefined;
  afterAll(async () => rig?.close());

  it(
    'never runs more than a tenant’s maxRunning or a class’s slots, whatever the number of processes',
    async () => {
      const started = performance.now();
      rig = await processRig({ store: storeKind, config: CONFIG, provider: { latencyMs: 5 } });
      const { sluice, store } = rig.h;
      const dead = new Set<string>();
      const workerEnv = { LEASE_MS: '800', RESCUE_MS: '100', POLL_MS: '20', POOL_SIZE: '3' };
      const workers: WorkerProcess[] = await Promise.all(
        Array.from({ length: WORKERS }, (_, i) => rig!.start(`W${i + 1}`, { env: workerEnv })),
      );
      const sampler = runningSampler(store, () => dead);

      // Every tenant submits charges and exports, interleaved, in concurrent waves.
      const submitted: Array<{ tenant: string; id: string; kind: string }> = [];
      for (let n = 0; n < PER_TENANT_AND_KIND; n += 10) {
        const wave: Promise<unknown>[] = [];
        for (let k = n; k < n + 10; k++) {
          for (const tenant of TENANTS) {
            const charge = { tenant, id: `C${k}`, kind: 'charge' };
            const exp = { tenant, id: `E${k}`, kind: 'export' };
            submitted.push(charge, exp);
            wave.push(sluice.submit({ ...charge, input: { invoice: k, amount_cents: 100 + k } }));
            wave.push(sluice.submit({ ...exp, input: { n: k } }));
          }
        }
        await Promise.all(wave);
      }
      const OPS = submitted.length;

      let kills = 0;
      try {
        // Mid-run, once the victim has finished 30 attempts of its own (it holds leases: the
        // backlog keeps its slots busy), SIGKILL it and start a replacement under a new name.
        const victim = workers[1]!;
        const successes = () =>
          victim.events.filter(
            (e) => e.event === 'attempt' && (e.report as { end?: string } | undefined)?.end === 'succeeded',
          ).length;
        await victim.until(() => (successes() >= 30 ? true : undefined), '30 successes');
        dead.add(victim.options.id);
        victim.signal('SIGKILL');
        kills++;
        await victim.exit();
        workers[1] = await rig.start('W2b', { env: workerEnv });

        const guard = performance.now() + GUARD_MS;
        while ((await outstanding(store)) > 0) {
          if (performance.now() > guard) throw new Error(`not all terminal after ${GUARD_MS} ms`);
          for (const w of workers) if (!w.alive) throw new Error(`worker ${w.options.id} died\n${w.log}`);
          await pause(20, 20);
        }
      } finally {
        await sampler.stop();
      }
      for (const w of workers) w.signal('SIGTERM');
      for (const w of workers) expect(await w.exit()).toEqual({ code: 0, signal: null });

      // Every operation ran to success; each charge once.
      const stored: Operation[] = [];
      for (let cursor: string | undefined; ; ) {
        const page = await sluice.list({ limit: 500, cursor });
        stored.push(...page.operations);
        if (!page.nextCursor) break;
        cursor = page.nextCursor;
      }
      expect(stored).toHaveLength(OPS);
      expect(
        stored.filter((o) => o.state !== 'succeeded').map((o) => [o.tenant, o.id, o.state, o.error]),
      ).toEqual([]);
      expect(stored.every((o) => isTerminal(o.state))).toBe(true);
      const chargeOps = submitted.filter((s) => s.kind === 'charge');
      expect(rig.provider.stub.doubleCharges()).toEqual([]);
      expect(new Set(rig.provider.stub.ledger().map((c) => c.key))).toEqual(
        new Set(chargeOps.map((s) => chargeKey(s.tenant, s.id))),
      );

      // The invariants, in every sample.
      expect(sampler.violations).toEqual([]);

      const cell = (cls: Cls, tenant: string) =>
        `${tenant} ${sampler.maxByTenant.get(`${cls}/${tenant}`) ?? 0}/${CAPS[cls][tenant as (typeof TENANTS)[number]] ?? '–'}`;
      const perClass = (Object.keys(SLOTS) as Cls[])
        .map(
          (cls) =>
            `${cls}[${TENANTS.map((t) => cell(cls, t)).join(' ')}; class ${sampler.maxByClassLive.get(cls) ?? 0}/${SLOTS[cls] * WORKERS} ` +
            `(${sampler.maxByClass.get(cls) ?? 0} with a dead worker's leases)]`,
        )
        .join(' ');
      const reached = (cls: Cls) =>
        TENANTS.filter((t) => {
          const cap = CAPS[cls][t];
          return cap !== null && cap >= 2 && sampler.maxByTenant.get(`${cls}/${t}`) === cap;
        });
      const seconds = ((performance.now() - started) / 1000).toFixed(1);
      console.log(
        `admission invariants (${storeKind}): ops=${OPS} workers=${WORKERS} kills=${kills} samples=${sampler.samples} ` +
          `running-rows-seen=${sampler.rowsSeen} max running (observed/cap): ${perClass} ` +
          `max-lease-holders=${sampler.maxOwners} samples-with-dead-leases=${sampler.samplesWithDeadLeases} ` +
          `caps≥2-reached=interactive:${reached('interactive').join(',') || 'none'} bulk:${reached('bulk').join(',') || 'none'} ` +
          `violations=${sampler.violations.length} in ${seconds}s`,
      );

      // Non-vacuous: the caps and the slots were reached, and the dead worker's leases were counted.
      for (const cls of Object.keys(SLOTS) as Cls[]) {
        expect(reached(cls).length, `a cap ≥ 2 reached in ${cls}`).toBeGreaterThan(0);
        expect(sampler.maxByClassLive.get(cls), `class ${cls} at its slots`).toBe(SLOTS[cls] * WORKERS);
      }
      expect(sampler.samplesWithDeadLeases).toBeGreaterThan(0);
      expect(sampler.samples).toBeGreaterThan(100);
    },
    GUARD_MS + 30_000,
  );
});
