/**
 * @module bench/cases/admission-caps
 * Submit throughput with admission caps configured against none, in one case run.
 *
 * `submitters` concurrent callers of `sluice.submit` (16 by default), the operations spread round
 * robin over several tenants (8, or `--tenants` when that is more than 1), into two engines on
 * stores of their own:
 *
 * - caps on: every tenant has `maxRunning` and `maxWaiting` in the class (the class's default
 *   for tenants and a per-tenant override, so the most specific layer is the one resolved), and
 *   the class a `maxQueued`, all set high enough that nothing is refused — a refusal fails the
 *   run. The store then counts and checks them in every submit's transaction.
 * - caps off: `maxQueued`, `maxRunning` and `maxWaiting` all `null` (no cap: the engine's
 *   defaults are caps too, 100,000 queued per class and 10,000 waiting per tenant).
 *
 * Both are warmed up, then timed in the order off, on, on, off, the same number of operations
 * each time, so a drift of the shared machine or the tables' growth weighs on both alike.
 */
import type { SluiceOptions } from 'sluice';
import { CostWindow } from '../lib/cost-window.js';
import { openSluice } from '../lib/engine.js';
import { databaseOf, PgObserver } from '../lib/pg-admin.js';
import { submitRange, tenantName } from '../lib/submitters.js';
import { storeOf, targetFor } from '../lib/targets.js';
import type { CaseResult, CaseSpec } from './types.js';

const CLASS = 'default';

type AdmissionConfig = Pick<SluiceOptions, 'classes' | 'tenants'>;

const capsTenants = (spec: Pick<CaseSpec, 'tenants'>) => (spec.tenants > 1 ? spec.tenants : 8);

function capsOn(tenants: number, total: number): AdmissionConfig {
  const perTenant = Math.ceil(total / tenants);
  return {
    classes: { [CLASS]: { maxQueued: 2 * total, tenant: { maxRunning: 8, maxWaiting: 2 * perTenant } } },
    tenants: Object.fromEntries(
      Array.from({ length: tenants }, (_, i) => [
        tenantName(i, tenants),
        { [CLASS]: { maxRunning: 4, maxWaiting: 2 * perTenant + i } },
      ]),
    ),
  };
}

const CAPS_OFF: AdmissionConfig = {
  classes: { [CLASS]: { maxQueued: null, tenant: { maxRunning: null, maxWaiting: null } } },
};

export async function admissionCaps(spec: CaseSpec): Promise<CaseResult> {
  const store = storeOf(spec);
  const perPhase = spec.ops ?? (spec.quick ? 1000 : 5000);
  const warm = spec.quick ? 200 : 1000;
  const tenants = capsTenants(spec);
  const callers = spec.submitters;
  const observer =
    store === 'pg' ? await PgObserver.open(spec.serverUrl, databaseOf(spec.databaseUrl)) : undefined;
  const total = warm + 2 * perPhase;
  const on = openSluice(targetFor(spec, 'on'), undefined, capsOn(tenants, total));
  const off = openSluice(targetFor(spec, 'off'), undefined, CAPS_OFF);
  try {
    for (const e of [on, off]) {
      await e.sluice.migrate();
      await submitRange(e.sluice, { prefix: 'o', from: 0, count: warm, tenants, callers });
    }
    const windows = {
      on: new CostWindow({ observer, counts: () => on.counts }),
      off: new CostWindow({ observer, counts: () => off.counts }),
    };
    const latencies = { on: [] as number[], off: [] as number[] };
    const from = { on: warm, off: warm };
    for (const caps of ['off', 'on', 'on', 'off'] as const) {
      const e = caps === 'on' ? on : off;
      await windows[caps].start();
      await submitRange(e.sluice, {
        prefix: 'o',
        from: from[caps],
        count: perPhase,
        tenants,
        callers,
        latenciesMs: latencies[caps],
      });
      await windows[caps].stop();
      from[caps] += perPhase;
    }
    const n = 2 * perPhase;
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    return {
      figures: { capsOn: n / windows.on.seconds, capsOff: n / windows.off.seconds },
      perOp: { ...windows.on.perOp(n, 'capsOn'), ...windows.off.perOp(n, 'capsOff') },
      info: {
        n,
        tenants,
        submitters: callers,
        capsOnMeanMs: mean(latencies.on),
        capsOffMeanMs: mean(latencies.off),
        capsOnSeconds: windows.on.seconds,
        capsOffSeconds: windows.off.seconds,
      },
    };
  } finally {
    await on.sluice.close();
    await off.sluice.close();
    await observer?.close();
  }
}
