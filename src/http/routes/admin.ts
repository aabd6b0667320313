/**
 * @module http/routes/admin
 * Operator actions, for admin keys only: redrive a dead operation (or many, of any tenants, named
 * one by one), resolve one that waits in `needs_reconciliation`. Each is recorded with who (`by`,
 * by default the admin key's identity) and why (`reason`); the tenant is named by `?tenant=`
 * (or in each reference of a batch) because an admin key belongs to none.
 */
import type { FastifyInstance } from 'fastify';
import type { Sluice } from '../../sluice.js';
import type { ReconcileEffect } from '../../store/types.js';
import { principalOf } from '../route-config.js';
import {
  adminTenantQuerySchema,
  noQuerySchema,
  operationIdParamsSchema,
  operationSchema,
  reconcileBodySchema,
  redriveBodySchema,
  redriveManyBodySchema,
  redriveManyResponseSchema,
} from '../schemas.js';

/**
 * A batch redrive's body limit, whatever the kinds' inputs allow: 100 references at their
 * longest (a 128-character tenant, a 255-character id) and who and why fit well inside.
 */
const REDRIVE_MANY_BODY_BYTES = 64 * 1024;

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
    '/v1/redrives',
    {
      bodyLimit: REDRIVE_MANY_BODY_BYTES,
      schema: {
        summary: 'Redrive many dead operations (admin)',
        description:
          'Moves each named `dead` operation back to `queued` with a fresh attempt count, in order, each ' +
          'recorded with the same who and why: the dead letters an outage left, once its cause is fixed (list ' +
          'them with `GET /v1/operations?state=dead`). Each is answered in its place; one that is not `dead` or ' +
          'not there is refused without refusing the others. If the store fails part way, those before were ' +
          'redriven: send the same body again, and those answer `operation-state-invalid`.',
        operationId: 'redriveOperations',
        tags: ['admin'],
        querystring: noQuerySchema,
        body: redriveManyBodySchema,
        response: {
          200: { ...redriveManyResponseSchema, description: 'Each operation, redriven or refused.' },
        },
      },
      config: { auth: 'admin', problems: ['invalid-argument', 'store-unavailable'] },
    },
    async (request) => {
      const body = request.body as Who & { operations: Array<{ tenant: string; id: string }> };
      const results = await sluice.redriveMany(body.operations, {
        by: body.by ?? principalOf(request).id,
        reason: body.reason,
      });
      return {
        results: results.map((r) =>
          r.ok
            ? { tenant: r.tenant, id: r.id, ok: true, state: r.operation.state }
            : { tenant: r.tenant, id: r.id, ok: false, code: r.error.code, detail: r.error.message },
        ),
      };
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
