/**
 * @module http/routes/tenants
 * A tenant's usage: its running and waiting operations per workload class (the store's queue
 * counters, the same numbers admission decides on, across all processes) and its spend per paid
 * provider in the current budget window. A tenant key reads only its own tenant (another one is
 * 404, as if it did not exist); an admin key reads any.
 */
import type { FastifyInstance } from 'fastify';
import { spendKeyParts } from '../../admission/budgets.js';
import type { Sluice } from '../../sluice.js';
import { ApiError } from '../problem.js';
import { principalOf } from '../route-config.js';
import { noQuerySchema, usageParamsSchema, usageResponseSchema } from '../schemas.js';

/** Spend budget keys are `spend:<provider>:tenant:<tenant>` (admission/budgets.ts). */
const SPEND_PREFIX = 'spend:';

export interface TenantUsage {
  tenant: string;
  classes: Array<{ class: string; running: number; waiting: number }>;
  budgets: Array<{
    provider: string;
    windowStart: string;
    windowEnd: string | null;
    reserved: number;
    committed: number;
  }>;
}

export async function tenantUsage(sluice: Sluice, tenant: string): Promise<TenantUsage> {
  const store = sluice.store;
  const [stats, now] = await Promise.all([store.queueStats({ tenant }), store.now()]);
  const usage = await store.budgetUsage({ prefix: SPEND_PREFIX, since: now, tenant });
  return {
    tenant,
    classes: stats.map((s) => ({ class: s.class, running: s.running, waiting: s.waiting })),
    // The store reads the tenant's keys by the tenant they name; parsed again here, so that a
    // tenant `x:tenant:north`, whose keys end as north's would, is never read as north.
    budgets: usage.flatMap((u) => {
      const parts = spendKeyParts(u.key);
      if (parts?.tenant !== tenant) return [];
      return [
        {
          provider: parts.provider,
          windowStart: new Date(u.windowStart).toISOString(),
          windowEnd: u.windowMs === null ? null : new Date(u.windowStart + u.windowMs).toISOString(),
          reserved: u.reserved,
          committed: u.committed,
        },
      ];
    }),
  };
}

export function tenantRoutes(app: FastifyInstance, deps: { sluice: Sluice }): void {
  app.get(
    '/v1/tenants/:tenant/usage',
    {
      schema: {
        summary: "A tenant's usage",
        description:
          'Running and waiting operations per workload class, and spend per paid provider in the current ' +
          'window. A tenant key may read only its own tenant; an admin key, any.',
        operationId: 'getTenantUsage',
        tags: ['tenants'],
        params: usageParamsSchema,
        querystring: noQuerySchema,
        response: { 200: { ...usageResponseSchema, description: 'The usage.' } },
      },
      config: { auth: 'any', problems: ['not-found', 'store-unavailable'] },
    },
    async (request) => {
      const { tenant } = request.params as { tenant: string };
      const principal = principalOf(request);
      if (principal.kind === 'tenant' && principal.tenant !== tenant) {
        throw new ApiError('not-found', `no tenant ${tenant} for this key`);
      }
      return tenantUsage(deps.sluice, tenant);
    },
  );
}
