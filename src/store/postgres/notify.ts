/**
 * @module store/postgres/notify
 * Wake-ups across processes: LISTEN on the schema's channel (`sluice_<schema>`) on a dedicated
 * connection, outside the pool (a pooled connection would carry the LISTEN to whoever borrows
 * it next). Submits, retries and redrives NOTIFY the class whose work became ready, inside their
 * transaction, so the wake-up is delivered when, and only if, the work is committed.
 *
 * A notification is a hint, never the only way work is found: it can be lost while the listening
 * connection is down. The listener reconnects by itself with back-off, and after each reconnect
 * calls `onReconnect` so the engine can look for work it may have missed (a poll of every class).
 * `onLost` says when wake-ups stop, so the engine can look for work itself meanwhile and say so.
 *
 * Each LISTEN is proved before it counts: the pool (another connection) sends an empty
 * notification on the channel, which every listener ignores, and the listener must hear it. A
 * connection pooler in transaction mode accepts LISTEN and then drops every notification (the
 * server connection that listened goes back to its pool), so without the proof a worker would
 * count on wake-ups that never come. A LISTEN that is not heard counts as lost (`onLost`, once),
 * and the engine polls and claims on every freed slot meanwhile, as with `notify: false`. It is
 * tried again, every minute rather than with the outage back-off: a pooler needs an operator, not
 * time, but a proof can also go unheard for a server too busy to deliver it within 2 s, and a
 * worker must not stay deaf for the rest of its life for that.
 */
import type pg from 'pg';
import { StoreError } from '../../core/errors/index.js';
import type { PgContext } from './connection.js';
import { pgDriver } from './driver.js';
import { classifyPgError } from './errors.js';

export interface SubscribeOptions {
  /** Called after the listening connection was lost and is back: notifications may have been missed. */
  onReconnect?: () => void;
  /**
   * Called when wake-ups stop: the listening connection was lost, or the first one could not be
   * made. Once an outage, and once more if a reconnect then hears nothing (a pooler in
   * transaction mode put in front meanwhile), since that needs an operator, not time.
   */
  onLost?: (error: unknown) => void;
  /** How often a LISTEN that heard nothing is tried again. Default 60 s. */
  deafRetryMs?: number;
}

const MIN_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 5000;
/** How long after its NOTIFY committed the proof must have been heard (delivery takes ~1 ms). */
const PROOF_MS = 2000;
/** How often a LISTEN whose proof went unheard is tried again. */
const DEAF_RETRY_MS = 60_000;

/** Errors that say the listener connected but cannot hear: trying again would not help. */
const deaf = new WeakSet<object>();

/**
 * Listens for wake-ups. Resolves once listening — or, if it cannot listen yet (the database out
 * of reach, a LISTEN that hears nothing), at once, and keeps trying in the background (a worker
 * started during an outage must not stay deaf after it, and `onLost` says so before this
 * resolves); `onReconnect` is called whenever listening starts late or again. Rejects only behind
 * a transaction pooler without `listenUrl`, where no later try could hear anything.
 * The returned function stops listening and closes the connection.
 */
export async function subscribe(
  ctx: PgContext,
  onClass: (cls: string) => void,
  options: SubscribeOptions = {},
): Promise<() => Promise<void>> {
  const config: pg.ClientConfig = {
    ...ctx.pool.options,
    ...(ctx.listenUrl === undefined ? {} : { connectionString: ctx.listenUrl }),
    application_name: 'sluice-listen',
  };
  if (ctx.pooled && ctx.listenUrl === undefined) {
    // Not even tried: through the pooler LISTEN is accepted and never heard (the proof below
    // would find so after PROOF_MS, at every worker's start).
    const error = new StoreError(
      'unknown',
      `behind a transaction pooler LISTEN "${ctx.channel}" would hear nothing: give listenUrl, a direct ` +
        'URL of the server, to hear wake-ups; until then work is found by polling',
    );
    deaf.add(error);
    throw error;
  }
  let client: pg.Client | undefined;
  let closed = false;
  let timer: NodeJS.Timeout | undefined;
  let backoff = MIN_BACKOFF_MS;
  /** A reconnect that could not hear has been reported in this outage. */
  let toldDeaf = false;

  const connect = async (): Promise<void> => {
    const c = new (pgDriver().Client)(config);
    // Errors while connecting come back through connect() as well; this keeps them from being
    // unhandled 'error' events.
    c.on('error', () => {});
    let heard = () => {};
    const proof = new Promise<void>((resolve) => {
      heard = resolve;
    });
    c.on('notification', (msg) => {
      if (msg.channel !== ctx.channel) return;
      if (msg.payload) onClass(msg.payload);
      else heard();
    });
    try {
      await c.connect();
      await c.query(`LISTEN "${ctx.channel}"`);
      await ctx.query(`SELECT pg_notify($1, '')`, [ctx.channel]);
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), PROOF_MS);
      });
      const missed = await Promise.race([proof.then(() => false), late]);
      clearTimeout(timer);
      if (missed) {
        const error = new StoreError(
          'unknown',
          `LISTEN "${ctx.channel}" hears no notifications: a connection pooler in transaction mode? ` +
            'Use session mode or a direct URL (docs/operations.md); until then work is found by polling',
        );
        deaf.add(error);
        throw error;
      }
    } catch (error) {
      await c.end().catch(() => {});
      throw classifyPgError(error);
    }
    client = c;
    // A lost connection surfaces as 'error' and/or 'end'; the first starts one reconnect.
    const lost = (error?: unknown) => {
      if (client !== c) return;
      client = undefined;
      c.end().catch(() => {});
      options.onLost?.(
        error === undefined
          ? new StoreError('unavailable', `the connection listening on "${ctx.channel}" ended`)
          : classifyPgError(error),
      );
      schedule();
    };
    c.on('error', lost);
    c.on('end', () => lost());
  };

  const schedule = () => {
    if (closed || timer) return;
    timer = setTimeout(async () => {
      timer = undefined;
      if (closed) return;
      try {
        await connect();
        backoff = MIN_BACKOFF_MS;
        toldDeaf = false;
        if (closed) return void (await stop());
        options.onReconnect?.();
      } catch (error) {
        unheard(error);
      }
    }, backoff);
    timer.unref();
  };

  /** A connection that could not be made, or made and deaf: told once, tried again later. */
  const unheard = (error: unknown) => {
    const isDeaf = deaf.has(error as object);
    if (isDeaf && !toldDeaf && !closed) {
      toldDeaf = true;
      options.onLost?.(error);
    }
    if (isDeaf) backoff = options.deafRetryMs ?? DEAF_RETRY_MS;
    schedule();
    if (!isDeaf) backoff = Math.min(MAX_BACKOFF_MS, backoff * 2);
  };

  const stop = async () => {
    const c = client;
    client = undefined;
    if (c) await c.end().catch(() => {});
  };

  try {
    await connect();
  } catch (error) {
    if (!deaf.has(error as object)) options.onLost?.(error);
    unheard(error);
  }
  return async () => {
    closed = true;
    if (timer) clearTimeout(timer);
    timer = undefined;
    await stop();
  };
}
