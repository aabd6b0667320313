/**
 * @module http/routes/admin
 * Operator actions, for admin keys only: redrive a dead operation, resolve one that waits in
 * `needs_reconciliation`. Both are recorded with who (`by`, by default the admin key's identity)
 * and why (`reason`); the tenant is named by `?tenant=` because an admin key belongs to none.
 */
import type { FastifyInstance } from 'fastify';
import type { Sluice } from '../../sluice.js';
import type { ReconcileEffect } from '../../store/types.js';
import { principalOf } from '../route-config.js';
import {
  adminTenantQuerySchema,
  operationIdParamsSchema,
  operationSchema,
  reconcileBodySchema,
  redriveBodySchema,
} from '../schemas.js';

interface Who {
  by?: string;
  reason: string;
}

export function adminRoutes(app: FastifyInstance, deps: { sluice: Sluice }): void {
  const { sluice } = deps;
  const problems = [
    'operation-not-found',
    'operation-state-invalid',
    'invalid-argument',
    'store-unavailable',
  ];

  app.post(
    '/v1/operations/:id/redrive',
    {
      schema: {
        summary: 'Redrive a dead operation (admin)',
        description: 'Moves a `dead` operation back to `queued` with a fresh attempt count; recorded.',
        operationId: 'redriveOperation',
        tags: ['admin'],
        params: operationIdParamsSchema,
        querystring: adminTenantQuerySchema,
        body: redriveBodySchema,
        response: { 200: { ...operationSchema, description: 'The operation, queued again.' } },
      },
      config: { auth: 'admin', problems },
    },
    async (request) => {
      const { tenant } = request.query as { tenant: string };
      const { id } = request.params as { id: string };
      const body = request.body as Who;
      return sluice.redrive({ tenant, id }, { by: body.by ?? principalOf(request).id, reason: body.reason });
    },
  );

  app.post(
    '/v1/operations/:id/reconcile',
    {
      schema: {
        summary: 'Resolve an operation that needs reconciliation (admin)',
        description:
          'Records what was established at the provider for each effect (`committed` with its result, or ' +
          '`absent`), then requeues the operation or ends it `succeeded` / `failed`; recorded.',
        operationId: 'reconcileOperation',
        tags: ['admin'],
        params: operationIdParamsSchema,
        querystring: adminTenantQuerySchema,
        body: reconcileBodySchema,
        response: { 200: { ...operationSchema, description: 'The operation after the resolution.' } },
      },
      config: { auth: 'admin', problems: [...problems, 'input-not-json'] },
    },
    async (request) => {
      const { tenant } = request.query as { tenant: string };
      const { id } = request.params as { id: string };
      const body = request.body as Who & {
        resolution: 'requeue' | 'succeeded' | 'failed';
        effects?: ReconcileEffect[];
        result?: unknown;
      };
      return sluice.reconcile(
        { tenant, id },
        {
          by: body.by ?? principalOf(request).id,
          reason: body.reason,
          resolution: body.resolution,
          effects: body.effects,
          result: body.result,
        },
      );
    },
  );
}
