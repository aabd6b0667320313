/**
 * @module demo/payments
 * The payments demo that `npm start` runs: tenants `north` and `south`, three kinds, and the HTTP
 * provider stub as the paid provider — so anyone can replay the seed's failures by hand with curl
 * (see the README).
 *
 * - `charge {invoice, amount_cents}` — interactive; one journaled effect at the provider, with a
 *   lookup for recovery past the key's retention; North is limited to 2 running and 5 waiting,
 *   as in the seed.
 * - `refund {charge_operation_id, amount_cents, authorized_by}` — a separate, authorized
 *   operation: it refunds only a charge that succeeded, at most its amount (the provider also
 *   refuses more than the charge in total).
 * - `export {rows}` — bulk; writes `rows` lines to a temporary file through a subprocess, then
 *   keeps a summary (rows, bytes, SHA-256).
 *
 * The keys are for the demo only and are printed at start.
 */
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import type { SluiceConfig } from '../config/config.js';
import { Permanent } from '../core/errors/index.js';
import { ProviderClient } from '../testing/provider-client.js';
import type { Charge, Refund } from '../testing/provider-stub.js';

export const DEMO_KEYS = {
  north: 'north-demo-key',
  south: 'south-demo-key',
  admin: 'admin-demo-key',
} as const;

/** Writes N lines to a file: the subprocess the export kind runs (plain Node, no shell). */
const GENERATOR = `
const [rows, file] = process.argv.slice(1);
const out = require('node:fs').createWriteStream(file);
let i = 0;
(function write() {
  let ok = true;
  while (i < Number(rows) && ok) { i++; ok = out.write(i + ',row ' + i + '\\n'); }
  if (i < Number(rows)) out.once('drain', write); else out.end();
})();
`;

async function sha256(file: string): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

export function paymentsConfig(stubUrl: string): SluiceConfig {
  const provider = new ProviderClient(stubUrl);
  return {
    db: './data/sluice.db',
    http: { host: '127.0.0.1', port: 8080 },
    auth: { tenants: { north: [DEMO_KEYS.north], south: [DEMO_KEYS.south] }, admin: [DEMO_KEYS.admin] },
    classes: {
      interactive: { maxQueued: 10_000, tenant: { maxRunning: 4, maxWaiting: 100 } },
      bulk: { maxQueued: 10_000, tenant: { maxRunning: 2, maxWaiting: 20 } },
    },
    tenants: { north: { interactive: { maxRunning: 2, maxWaiting: 5 } } },
    providers: {
      stub: { perTenant: { limit: 10_000_000, windowMs: 3_600_000 }, rate: { limit: 50, windowMs: 1000 } },
    },
    worker: { slots: { interactive: 4, bulk: 2 }, tempRoot: './data/tmp' },
    setup(sluice) {
      sluice.define('charge', {
        input: z.object({
          invoice: z.number().int().nonnegative(),
          amount_cents: z.number().int().positive().max(1_000_000),
        }),
        class: 'interactive',
        limits: { attemptTimeoutMs: 10_000, deadlineMs: 600_000 },
        async run(input, ctx) {
          const charge = await ctx.effect<Charge>('charge', {
            provider: 'stub',
            cost: input.amount_cents,
            call: ({ key, signal }) => provider.charge({ tenant: ctx.tenant, ...input }, key, signal),
            lookup: ({ key, signal }) => provider.lookupCharge(key, signal),
            reference: (c) => c.id,
          });
          return { charge: charge.id, amount_cents: charge.amount_cents };
        },
      });
      sluice.define('refund', {
        input: z.object({
          charge_operation_id: z.string().min(1).max(255),
          amount_cents: z.number().int().positive(),
          authorized_by: z.string().min(1).max(200),
        }),
        class: 'interactive',
        limits: { attemptTimeoutMs: 10_000, deadlineMs: 600_000 },
        async run(input, ctx) {
          const charge = await sluice.get({ tenant: ctx.tenant, id: input.charge_operation_id });
          if (!charge)
            throw new Permanent(`no charge ${input.charge_operation_id}`, { code: 'refund-no-such-charge' });
          if (charge.kind !== 'charge' || charge.state !== 'succeeded') {
            throw new Permanent(`operation ${charge.id} is not a succeeded charge (${charge.state})`, {
              code: 'refund-charge-not-succeeded',
            });
          }
          const charged = charge.result as { charge: string; amount_cents: number };
          if (input.amount_cents > charged.amount_cents) {
            throw new Permanent(
              `refund of ${input.amount_cents} exceeds the charge of ${charged.amount_cents}`,
              {
                code: 'refund-too-large',
              },
            );
          }
          const refund = await ctx.effect<Refund>('refund', {
            provider: 'stub',
            call: ({ key, signal }) =>
              provider.refund({ charge: charged.charge, amount_cents: input.amount_cents }, key, signal),
            reference: (r) => r.id,
          });
          return {
            refund: refund.id,
            charge: charged.charge,
            amount_cents: refund.amount_cents,
            authorized_by: input.authorized_by,
          };
        },
      });
      sluice.define('export', {
        input: z.object({ rows: z.number().int().positive().max(1_000_000) }),
        class: 'bulk',
        limits: { attemptTimeoutMs: 120_000, deadlineMs: 3_600_000, maxTempBytes: 64 * 1024 * 1024 },
        async run(input, ctx) {
          const file = join(await ctx.tempDir(), 'export.csv');
          const done = await ctx.exec(process.execPath, ['-e', GENERATOR, String(input.rows), file]);
          if (done.code !== 0)
            throw new Error(`the export subprocess exited with ${done.code ?? done.signal}`);
          return { rows: input.rows, bytes: (await stat(file)).size, sha256: await sha256(file) };
        },
      });
    },
  };
}
