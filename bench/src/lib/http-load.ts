/**
 * @module bench/lib/http-load
 * autocannon, as the http-submit case drives it: a fixed number of requests over a fixed number
 * of keep-alive connections (one request in flight on each, no pipelining), every request built
 * by a function (its own `Idempotency-Key` and body) in autocannon's per-request `setupRequest`
 * hook. Every answer's status and latency is kept here from autocannon's `response` event, with
 * the sub-millisecond precision its own histogram rounds away. autocannon ships no types: the
 * few members used are declared below.
 *
 * autocannon notices that the last request was answered only at its next sampling tick, once a
 * second by default, and resolves then: a run of 5,000 requests that took 1.2 s resolved after
 * 2.0 s, and every rate timed around it was whole seconds long. It samples every 10 ms here, so
 * the time around a run ends within about 10 ms of its last answer.
 */
import { createRequire } from 'node:module';

interface RawRequest {
  method?: string;
  path?: string;
  headers?: Record<string, string>;
  body?: string;
}

interface AutocannonOptions {
  url: string;
  connections: number;
  amount: number;
  timeout: number;
  /** Milliseconds between autocannon's samples; it checks for the end of the run at each. */
  sampleInt: number;
  requests: Array<{ setupRequest: (request: RawRequest) => RawRequest }>;
}

interface AutocannonResult {
  /** Requests with no answer: connection errors and timeouts. */
  errors: number;
}

interface Instance extends PromiseLike<AutocannonResult> {
  on(
    event: 'response',
    listener: (client: unknown, statusCode: number, resBytes: number, responseTimeMs: number) => void,
  ): this;
}

const autocannon = createRequire(import.meta.url)('autocannon') as (options: AutocannonOptions) => Instance;

export interface LoadResult {
  seconds: number;
  /** Answers by HTTP status. */
  statuses: Map<number, number>;
  /** Every answered request's latency, in milliseconds, in answer order. */
  latenciesMs: number[];
  /** Requests that got no answer (connection errors, timeouts). */
  errors: number;
}

const SAMPLE_MS = 10;

export async function sendMany(o: {
  url: string;
  connections: number;
  amount: number;
  request: (i: number) => Required<RawRequest>;
}): Promise<LoadResult> {
  let next = 0;
  const statuses = new Map<number, number>();
  const latenciesMs: number[] = [];
  const t0 = performance.now();
  const instance = autocannon({
    url: o.url,
    connections: o.connections,
    amount: o.amount,
    timeout: 30,
    sampleInt: SAMPLE_MS,
    requests: [{ setupRequest: (request) => ({ ...request, ...o.request(next++) }) }],
  });
  instance.on('response', (_client, status, _bytes, ms) => {
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
    latenciesMs.push(ms);
  });
  const result = await instance;
  return {
    seconds: (performance.now() - t0) / 1000,
    statuses,
    latenciesMs,
    errors: result.errors,
  };
}

/** Nearest-rank percentile (`p` in 0–100) of unsorted values. */
export function percentile(values: number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}
