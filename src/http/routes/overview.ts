/**
 * @module http/routes/overview
 * What a key is (`GET /v1/me`, any key) and the queues of every tenant at once (`GET /v1/queues`,
 * admin keys): the two reads the dashboard needs beyond the operation routes, and a client's way
 * to check which tenant its key acts for without submitting anything.
 */
import type { FastifyInstance } from 'fastify';
import type { Sluice } from '../../sluice.js';
import { AWAITING_OPERATOR_CAP, type AwaitingOperatorStats } from '../../store/types.js';
import { principalOf } from '../route-config.js';
import { meResponseSchema, noQuerySchema, queuesResponseSchema } from '../schemas.js';

/**
 * The most (class, tenant) pairs one answer lists. A deployment with 10,000 tenants holding work
 * would otherwise answer some 700 kB a request; the busiest are the ones an operator looks for.
 */
export const QUEUES_SHOWN = 500;

/** `GET /v1/queues`'s answer. */
export interface QueuesOverview {
  classes: Array<{ class: string; waiting: number; running: number }>;
  queues: Array<{ class: string; tenant: string; waiting: number; running: number }>;
  queuesLeftOut: number;
  /** Every tenant's operations waiting for an operator, each state counted up to 10,000. */
  awaitingOperator: AwaitingOperatorStats;
}

/**
 * The store's queue counters, every class and the busiest (class, tenant) pairs, and what waits
 * for an operator: three reads.
 */
export async function queuesOverview(sluice: Sluice): Promise<QueuesOverview> {
  const [queues, classes, awaitingOperator] = await Promise.all([
    sluice.store.queueStats({ holdingWork: true }),
    sluice.store.classStats(),
    sluice.store.awaitingOperatorStats({ cap: AWAITING_OPERATOR_CAP }),
  ]);
  // The class row counts what waits; what runs is counted per (class, tenant) only.
  const running = new Map<string, number>();
  for (const q of queues) running.set(q.class, (running.get(q.class) ?? 0) + q.running);
  const names = new Set([...classes.map((c) => c.class), ...running.keys()]);
  const waiting = new Map(classes.map((c) => [c.class, c.waiting]));
  // The store answers by class then tenant, and the sort is stable: ties keep that order.
  const busiest = [...queues].sort((a, b) => b.waiting - a.waiting || b.running - a.running);
  return {
    classes: [...names]
      .sort()
      .map((c) => ({ class: c, waiting: waiting.get(c) ?? 0, running: running.get(c) ?? 0 })),
    queues: busiest
      .slice(0, QUEUES_SHOWN)
      .map((q) => ({ class: q.class, tenant: q.tenant, waiting: q.waiting, running: q.running })),
    queuesLeftOut: Math.max(0, busiest.length - QUEUES_SHOWN),
    awaitingOperator,
  };
}

/** Registers `GET /v1/me` (any key) and `GET /v1/queues` (admin keys). */
export function overviewRoutes(app: FastifyInstance, deps: { sluice: Sluice }): void {
  app.get(
    '/v1/me',
    {
      schema: {
        summary: 'The key presented',
        description:
          "Whether the key is a tenant's (and which tenant it acts for) or an admin key. Reads nothing from the store.",
        operationId: 'getMe',
        tags: ['service'],
        querystring: noQuerySchema,
        response: { 200: { ...meResponseSchema, description: 'The key.' } },
      },
      config: { auth: 'key' },
    },
    async (request) => {
      const principal = principalOf(request);
      return principal.kind === 'tenant'
        ? { role: 'tenant', tenant: principal.tenant }
        : { role: 'admin', tenant: null };
    },
  );

  app.get(
    '/v1/queues',
    {
      schema: {
        summary: 'Every queue (admin)',
        description:
          "The store's queue counters across every tenant and process: each class's waiting and running " +
          'operations, the busiest (class, tenant) pairs holding work, and how many operations wait for an operator.',
        operationId: 'getQueues',
        tags: ['admin'],
        querystring: noQuerySchema,
        response: { 200: { ...queuesResponseSchema, description: 'The queues.' } },
      },
      config: { auth: 'admin', problems: ['store-unavailable'] },
    },
    async () => queuesOverview(deps.sluice),
  );
}
