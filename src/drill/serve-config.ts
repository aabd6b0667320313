/**
 * @module drill/serve-config
 * The configuration every process of the drill's deployment runs (`sluice serve --config
 * dist/drill/serve-config.js`), and the numbers the drill checks it against: one module, so the
 * caps the invariants use are the caps the processes enforce.
 *
 * Two tenants and two workload classes:
 * - `north` submits interactive `charge`s at a steady rate: a paid effect at the provider stub,
 *   journaled, with a lookup for recovery. Its caps are the seed's: 2 running, 5 waiting.
 * - `bulk` floods expensive `export`s (class `bulk`): a subprocess writes a temporary file at a
 *   bounded pace through `ctx.exec` and holds it a while, so temporary storage and bulk slots move;
 *   some exports are oversized and stopped by `maxTempBytes`. It also makes large `charge`s that
 *   run into its provider spend budget, and walks away from some of them (cancels).
 *
 * Read from the environment (set by drill/deployment.ts): `DRILL_STUB_URL` (the provider stub),
 * `DRILL_TEMP_ROOT` (handlers' temporary folders, which the sampler measures), `DRILL_PG_SCHEMA`
 * (the run's own PostgreSQL schema), and the test-only `SLUICE_DRILL_BREAK`:
 * - `fresh-effect-key`: the charge handler ignores the journaled key and sends a fresh
 *   idempotency key with every request — the classic bug the drill must catch as double charges;
 * - `engine-effect-key`: the engine's `effectKey` returns a fresh key per call. The journal keeps
 *   the first key of each effect and every resend uses it, so this one is expected NOT to cause
 *   a double charge (a drill run with it shows the journal's protection).
 */
import { randomUUID } from 'node:crypto';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { Admission, type AdmissionConfig } from '../admission/limits.js';
import type { SluiceConfig } from '../config/config.js';
import { deriveEffectKey } from '../effects/effect-key.js';
import { ProviderClient } from '../testing/provider-client.js';
import type { Charge } from '../testing/provider-stub.js';

export const DRILL_TENANTS = { north: 'north', bulk: 'bulk' } as const;

/** API keys of the drill's private deployment (loopback only, thrown away with it). */
export const DRILL_KEYS = {
  north: 'drill-north-key',
  bulk: 'drill-bulk-key',
  admin: 'drill-admin-key',
} as const;

export type DrillBreak = 'fresh-effect-key' | 'engine-effect-key';
export const DRILL_BREAKS: readonly DrillBreak[] = ['fresh-effect-key', 'engine-effect-key'];

/** Worker slots per class in every worker process. */
export const DRILL_SLOTS = { interactive: 3, bulk: 1 } as const;

/** The admission caps every process enforces: written once, read by the invariants below. */
export const DRILL_ADMISSION = {
  classes: {
    interactive: { maxQueued: 1000, tenant: { maxRunning: 2, maxWaiting: 10 } },
    bulk: { maxQueued: 1000, tenant: { maxRunning: 2, maxWaiting: 10 } },
  },
  tenants: {
    north: { interactive: { maxRunning: 2, maxWaiting: 5 } },
    bulk: { interactive: { maxRunning: 1, maxWaiting: 4 }, bulk: { maxRunning: 3, maxWaiting: 6 } },
  },
} as const satisfies AdmissionConfig;

/**
 * class → tenant → maxRunning, resolved from `DRILL_ADMISSION` by the resolver admission itself
 * uses, so a cap changed there is the cap the running-caps check holds the deployment to.
 */
export const DRILL_MAX_RUNNING: Record<string, Record<string, number>> = resolveMaxRunning();

function resolveMaxRunning(): Record<string, Record<string, number>> {
  const admission = new Admission(DRILL_ADMISSION);
  const out: Record<string, Record<string, number>> = {};
  for (const cls of Object.keys(DRILL_ADMISSION.classes)) {
    out[cls] = {};
    for (const tenant of Object.values(DRILL_TENANTS)) {
      const cap = admission.tenantLimits(cls, tenant).maxRunning;
      if (cap === null) throw new Error(`the drill needs a running cap for ${tenant} in ${cls}`);
      out[cls][tenant] = cap;
    }
  }
  return out;
}

/** The provider spend budget the drill's charges draw on (cents, fixed windows). */
export const DRILL_SPEND = {
  provider: 'stub',
  windowMs: 2000,
  /** Per tenant per window, except the overrides below. */
  perTenant: 5_000_000,
  tenants: { bulk: 10_000 } as Record<string, number>,
  /** All tenants together per window. */
  global: 6_000_000,
} as const;

/**
 * The retry budget: retries at most `floor + ratio × first attempts` over a sliding window, kept
 * short (10 s) and tight enough that the stalled provider runs into it, and long enough that the
 * budget refills within the recovery phase.
 */
export const DRILL_RETRY_BUDGET = {
  ratio: 0.1,
  floor: 3,
  windowMs: 10_000,
  bucketMs: 1000,
  deferMaxMs: 1000,
} as const;

/** The charge kind's limits: a stalled provider times an attempt out after `attemptTimeoutMs`. */
export const DRILL_CHARGE_LIMITS = {
  attemptTimeoutMs: 1500,
  deadlineMs: 300_000,
  maxAttempts: 12,
  backoff: { baseMs: 200, capMs: 2000 },
} as const;

/** The export kind's limits; the export writes at `EXPORT_BYTES_PER_SEC`. */
export const DRILL_EXPORT_LIMITS = {
  attemptTimeoutMs: 20_000,
  deadlineMs: 300_000,
  maxTempBytes: 8 * 1024 * 1024,
} as const;
export const EXPORT_BYTES_PER_SEC = 4 * 1024 * 1024;

/** Leases and the worker's pacing: short, so a killed worker's leases come back within seconds. */
export const DRILL_WORKER = { leaseMs: 2000, rescueIntervalMs: 250 } as const;
export const DRILL_PG_POOL_SIZE = 4;

/**
 * Writes `bytes` bytes to a file at a bounded pace, then holds it `holdMs` before exiting: the
 * subprocess the export kind runs (plain Node, no shell). Slow on purpose, so the temp-bytes
 * check of the engine sees an oversized export before it is finished.
 */
const GENERATOR = `
const fs = require('node:fs');
const [bytes, file, rate, hold] = process.argv.slice(1);
const total = Number(bytes), perSec = Number(rate);
const fd = fs.openSync(file, 'w');
const chunk = Buffer.alloc(65536, 120);
const start = Date.now();
let written = 0;
(function step() {
  const allowed = ((Date.now() - start) / 1000) * perSec + chunk.length;
  while (written < total && written < allowed) {
    const n = Math.min(chunk.length, total - written);
    fs.writeSync(fd, chunk, 0, n);
    written += n;
  }
  if (written < total) return setTimeout(step, 20);
  fs.closeSync(fd);
  setTimeout(() => process.exit(0), Number(hold));
})();
`;

export interface DrillServeEnv {
  DRILL_STUB_URL?: string;
  DRILL_TEMP_ROOT?: string;
  DRILL_PG_SCHEMA?: string;
  SLUICE_DRILL_BREAK?: string;
}

/** The drill's service configuration. Throws when the environment lacks what it needs. */
export function drillServeConfig(env: DrillServeEnv = process.env): SluiceConfig {
  const stubUrl = env.DRILL_STUB_URL;
  const tempRoot = env.DRILL_TEMP_ROOT;
  if (!stubUrl || !tempRoot) throw new Error('the drill config needs DRILL_STUB_URL and DRILL_TEMP_ROOT');
  const broken = env.SLUICE_DRILL_BREAK || undefined;
  if (broken !== undefined && !(DRILL_BREAKS as readonly string[]).includes(broken))
    throw new Error(`SLUICE_DRILL_BREAK must be one of ${DRILL_BREAKS.join(', ')}`);
  const provider = new ProviderClient(stubUrl);
  return {
    migrate: 'auto',
    postgres: { schema: env.DRILL_PG_SCHEMA || undefined, poolSize: DRILL_PG_POOL_SIZE },
    auth: {
      tenants: { north: [DRILL_KEYS.north], bulk: [DRILL_KEYS.bulk] },
      admin: [DRILL_KEYS.admin],
    },
    classes: structuredClone(DRILL_ADMISSION.classes),
    tenants: structuredClone(DRILL_ADMISSION.tenants),
    providers: {
      [DRILL_SPEND.provider]: {
        perTenant: {
          limit: DRILL_SPEND.perTenant,
          windowMs: DRILL_SPEND.windowMs,
          tenants: DRILL_SPEND.tenants,
        },
        global: { limit: DRILL_SPEND.global, windowMs: DRILL_SPEND.windowMs },
        rate: { limit: 200, windowMs: 1000 },
        onExhausted: 'fail',
      },
    },
    retryBudget: { ...DRILL_RETRY_BUDGET },
    worker: { ...DRILL_WORKER, slots: { ...DRILL_SLOTS }, tempRoot },
    shutdownGraceMs: 2000,
    // Test-only: a key function that is fresh per call (see the module header).
    ...(broken === 'engine-effect-key'
      ? { effectKey: (t: string, id: string, e: string) => `${deriveEffectKey(t, id, e)}.${randomUUID()}` }
      : {}),
    kinds: {
      charge: {
        input: z.object({
          invoice: z.number().int().nonnegative(),
          amount_cents: z.number().int().positive().max(1_000_000),
        }),
        class: 'interactive',
        limits: DRILL_CHARGE_LIMITS,
        async run(input: { invoice: number; amount_cents: number }, ctx) {
          const charge = await ctx.effect<Charge>('charge', {
            provider: DRILL_SPEND.provider,
            cost: input.amount_cents,
            call: ({ key, signal }) =>
              provider.charge(
                { tenant: ctx.tenant, ...input },
                broken === 'fresh-effect-key' ? `${key}.${randomUUID()}` : key,
                signal,
              ),
            lookup: ({ key, signal }) => provider.lookupCharge(key, signal),
            reference: (c) => c.id,
          });
          return { charge: charge.id, amount_cents: charge.amount_cents };
        },
      },
      export: {
        input: z.object({
          bytes: z
            .number()
            .int()
            .positive()
            .max(64 * 1024 * 1024),
          holdMs: z.number().int().nonnegative().max(10_000),
        }),
        class: 'bulk',
        limits: DRILL_EXPORT_LIMITS,
        async run(input: { bytes: number; holdMs: number }, ctx) {
          const file = join(await ctx.tempDir(), 'export.bin');
          const done = await ctx.exec(process.execPath, [
            '-e',
            GENERATOR,
            String(input.bytes),
            file,
            String(EXPORT_BYTES_PER_SEC),
            String(input.holdMs),
          ]);
          if (done.code !== 0)
            throw new Error(`the export subprocess exited with ${done.code ?? done.signal}`);
          return { bytes: (await stat(file)).size };
        },
      },
    },
  };
}

/** `sluice serve --config dist/drill/serve-config.js` calls this. */
export default function config(): SluiceConfig {
  return drillServeConfig(process.env);
}
