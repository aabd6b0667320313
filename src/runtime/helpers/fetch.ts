/**
 * @module runtime/helpers/fetch
 * `ctx.fetch`: the global `fetch` under the attempt's deadline and cancellation.
 *
 * The request's signal is the attempt scope's bound signal (attempt signal, time left, end of the
 * attempt) combined with the caller's own (`init.signal`, or the signal of a `Request` passed
 * as input). When it fires, undici aborts the request: a request still waiting for its response
 * has its connection destroyed (HTTP/1.1 cannot cancel one request and keep the socket), and a
 * response body still being read stops with the same reason. The promise rejects with the typed
 * reason (`AttemptTimeout`, `DeadlineExceeded`, `CancelRequested`…, or the caller's own), not
 * undici's `AbortError`.
 */
import type { AttemptScope } from './scope.js';

export async function boundFetch(
  scope: AttemptScope,
  input: string | URL | Request,
  init?: RequestInit,
): Promise<Response> {
  const bound = scope.bind(init?.signal, input instanceof Request ? input.signal : undefined);
  if (bound.signal.aborted) throw bound.reason();
  try {
    return await fetch(input, { ...init, signal: bound.signal });
  } catch (error) {
    if (bound.signal.aborted) throw bound.reason();
    throw error;
  }
}
