/**
 * The HTTP test rig: a Sluice on a fresh SQLite file (test/helpers/engine.ts), the API server
 * built on it with known keys and kinds, a loopback listener on demand, a `fetch` helper, a
 * snapshot of everything a rejected request must leave alone, and the server's log lines.
 *
 * Kinds: `charge` (the seed's, one journaled effect at an in-process provider stub, class
 * `default`, input ≤ 1,000 bytes) and `note` (class `bulk`, `{text}`, input ≤ 2,000 bytes), so
 * the default body limit is 2,000 + 4,096 = 6,096 bytes.
 */
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { z } from 'zod';
import { hashApiKey } from '../../src/http/auth.js';
import { buildServer, type ServerOptions } from '../../src/http/server.js';
import type { Sluice, SluiceOptions, Store } from '../../src/index.js';
import { ProviderStub } from '../../src/testing/index.js';
import { defineCharge } from '../helpers/charge-kind.js';
import { type Harness, harness } from '../helpers/engine.js';

export const KEYS = {
  north: 'north-secret-key-1',
  north2: 'north-secret-key-2',
  south: 'south-secret-key-1',
  admin: 'admin-secret-key-1',
} as const;

/** South's key is configured by its hash, North's in plaintext: both forms are exercised. */
export const AUTH: ServerOptions['auth'] = {
  tenants: { north: [KEYS.north, KEYS.north2], south: [hashApiKey(KEYS.south)] },
  admin: [KEYS.admin],
};

export const CHARGE_MAX_INPUT = 1000;
export const NOTE_MAX_INPUT = 2000;
export const BODY_LIMIT = NOTE_MAX_INPUT + 4096;

export interface RigOptions {
  sluice?: Partial<SluiceOptions>;
  server?: Partial<ServerOptions>;
  store?: Store;
  /** Define more kinds (before the server is built). */
  define?: (sluice: Sluice, provider: ProviderStub) => void;
}

export interface Answer {
  status: number;
  headers: Headers;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body in tests
  json: any;
}

export interface Snapshot {
  operations: unknown;
  queues: unknown;
  classes: unknown;
}

export interface Rig {
  h: Harness;
  app: FastifyInstance;
  provider: ProviderStub;
  logs: string[];
  /** Starts a real listener on 127.0.0.1 (once) and returns its base URL. */
  listen(): Promise<string>;
  /** A request over the loopback listener. `body` objects are sent as JSON. */
  call(
    method: string,
    path: string,
    options?: {
      key?: string | null;
      headers?: Record<string, string>;
      body?: unknown;
      raw?: RequestInit['body'];
    },
  ): Promise<Answer>;
  /** Everything a refused request must leave unchanged. */
  snapshot(): Promise<Snapshot>;
  /** Idempotent. */
  close(): Promise<void>;
}

export async function rig(options: RigOptions = {}): Promise<Rig> {
  const h = await harness({ store: options.store, sluice: options.sluice });
  const provider = new ProviderStub();
  defineCharge(h.sluice, provider, { limits: { maxInputBytes: CHARGE_MAX_INPUT } });
  h.sluice.define('note', {
    input: z.object({ text: z.string() }),
    class: 'bulk',
    limits: { maxInputBytes: NOTE_MAX_INPUT },
    run: async (input) => ({ length: input.text.length }),
  });
  options.define?.(h.sluice, provider);
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      logs.push(String(chunk));
      done();
    },
  });
  const logger = pino({ level: 'info' }, sink);
  const app = await buildServer({ sluice: h.sluice, auth: AUTH, logger, ...options.server });
  let base: string | undefined;
  let closed: Promise<void> | undefined;

  const listen = async () => {
    if (!base) {
      await app.listen({ port: 0, host: '127.0.0.1' });
      const address = app.server.address();
      if (!address || typeof address === 'string') throw new Error('no address');
      base = `http://127.0.0.1:${address.port}`;
    }
    return base;
  };

  return {
    h,
    app,
    provider,
    logs,
    listen,
    async call(method, path, o = {}) {
      const url = (await listen()) + path;
      const headers: Record<string, string> = { ...o.headers };
      const key = o.key === undefined ? KEYS.north : o.key;
      if (key !== null) headers.authorization = `Bearer ${key}`;
      let body: RequestInit['body'] = o.raw;
      if (o.body !== undefined) {
        body = JSON.stringify(o.body);
        headers['content-type'] ??= 'application/json';
      }
      const res = await fetch(url, { method, headers, body });
      const text = await res.text();
      let json: unknown;
      try {
        json = text ? JSON.parse(text) : undefined;
      } catch {
        json = undefined;
      }
      return { status: res.status, headers: res.headers, text, json };
    },
    async snapshot() {
      return {
        operations: await h.store.operationList({ limit: 100_000 }),
        queues: await h.store.queueStats(),
        classes: await h.store.classStats(),
      };
    },
    close() {
      closed ??= (async () => {
        await app.close();
        await h.close();
      })();
      return closed;
    },
  };
}

/** A submit body whose serialized form is exactly `bytes` long (padded with trailing spaces). */
export function bodyOfLength(value: unknown, bytes: number): string {
  const text = JSON.stringify(value);
  if (text.length > bytes) throw new Error(`${text.length} > ${bytes}`);
  return text + ' '.repeat(bytes - text.length);
}

/** A `note` input whose canonical JSON is exactly `bytes` long: `{"text":"xxx…"}`. */
export function noteInputOfLength(bytes: number): { text: string } {
  const overhead = JSON.stringify({ text: '' }).length;
  return { text: 'x'.repeat(bytes - overhead) };
}
