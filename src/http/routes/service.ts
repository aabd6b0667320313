/**
 * @module http/routes/service
 * The routes that describe the service rather than operations, all public: `/healthz` (the
 * process answers), `/readyz` (the store answers and the server accepts work), `/metrics`
 * (Prometheus) and `/openapi.json`.
 */
import type { FastifyInstance } from 'fastify';
import type { Metrics } from '../../observability/metrics.js';
import type { Sluice } from '../../sluice.js';
import { openApiDocument, type RouteRecord } from '../openapi.js';
import { ApiError } from '../problem.js';
import { statusSchema } from '../schemas.js';

/** How long `/readyz` waits for the store before calling it not ready. */
const READY_TIMEOUT_MS = 2000;

async function storeAnswers(sluice: Sluice): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  try {
    // A real read (the class counters are a handful of rows): `now()` alone may not touch the database.
    return await Promise.race([
      sluice.store.classStats().then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), READY_TIMEOUT_MS);
      }),
    ]);
  } catch {
    return false;
  } finally {
    clearTimeout(timer);
  }
}

export function serviceRoutes(
  app: FastifyInstance,
  deps: {
    sluice: Sluice;
    metrics: Metrics;
    accepting: () => boolean;
    routes: RouteRecord[];
    metricsAuth: 'none' | 'admin';
  },
): void {
  const tags = ['service'];
  app.get(
    '/healthz',
    {
      schema: {
        summary: 'Liveness',
        description: 'The process answers. Nothing else is checked.',
        operationId: 'healthz',
        tags,
        response: { 200: { ...statusSchema, description: '`{"status":"ok"}`' } },
      },
      config: { auth: 'none' },
    },
    async () => ({ status: 'ok' }),
  );

  app.get(
    '/readyz',
    {
      schema: {
        summary: 'Readiness',
        description: 'Ready when the store answers a read and the server is not shutting down.',
        operationId: 'readyz',
        tags,
        response: { 200: { ...statusSchema, description: '`{"status":"ready"}`' } },
      },
      config: { auth: 'none', problems: ['not-ready', 'shutting-down'] },
    },
    async () => {
      if (!deps.accepting()) throw new ApiError('shutting-down', 'the server is shutting down');
      if (!(await storeAnswers(deps.sluice))) {
        throw new ApiError(
          'not-ready',
          `the store did not answer a read (within ${READY_TIMEOUT_MS} ms, without an error)`,
        );
      }
      return { status: 'ready' };
    },
  );

  app.get(
    '/metrics',
    {
      schema: {
        summary: 'Prometheus metrics',
        description: 'The text exposition format; every family is prefixed `sluice_`.',
        operationId: 'metrics',
        tags,
        response: {
          200: {
            description: 'Metrics.',
            content: { 'text/plain': { schema: { type: 'string' } } },
          },
        },
      },
      config: { auth: deps.metricsAuth },
    },
    async (_request, reply) => {
      const text = await deps.metrics.scrape();
      return reply.type(deps.metrics.contentType).send(text);
    },
  );

  let document: string | undefined;
  app.get(
    '/openapi.json',
    {
      schema: {
        summary: 'This API, as OpenAPI 3.1',
        description: 'Generated from the route schemas and the kinds defined when first requested.',
        operationId: 'openapi',
        tags,
        response: {
          200: {
            description: 'The OpenAPI document.',
            content: { 'application/json': { schema: { type: 'object' } } },
          },
        },
      },
      config: { auth: 'none' },
    },
    async (_request, reply) => {
      document ??= JSON.stringify(
        openApiDocument({ routes: deps.routes, kinds: deps.sluice.definedKinds() }),
      );
      return reply.type('application/json; charset=utf-8').send(document);
    },
  );
}
