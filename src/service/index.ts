/**
 * @module sluice/service
 * The HTTP service: `startService` (what `sluice serve` runs), `buildServer` to embed the API in
 * a program of one's own, and its Prometheus metrics. An entry point of its own so that a program
 * that only runs the engine (`sluice`) never loads fastify and prom-client: they are most of what
 * a process reads at start-up, and a worker restarted after a crash starts that much sooner.
 */
export { type AuthConfig, hashApiKey, type Principal } from '../http/auth.js';
export type { FieldError, Problem } from '../http/problem.js';
export { buildServer, type ServerOptions } from '../http/server.js';
export {
  createMetrics,
  type HttpObservation,
  type Metrics,
  type MetricsOptions,
  type MetricsSource,
} from '../observability/metrics.js';
export { type Role, type Service, type ServiceOptions, startService } from './service.js';
