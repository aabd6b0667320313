/**
 * @module runtime/helpers/pg-cancel
 * Cancels the statement a PostgreSQL connection is running, the way libpq's `PQcancel` does: a
 * `CancelRequest` packet (the backend's process id and secret key, which the server sent when the
 * connection started) on a new, short-lived socket to the same server.
 *
 * Why this and not the alternatives:
 * - `SELECT pg_cancel_backend(pid)` needs a second authenticated connection. Taken from the
 *   caller's pool it can deadlock exactly when cancelling matters most (every connection busy
 *   with a statement to cancel), and a fresh one costs a full authentication.
 * - Destroying the socket does not stop the statement: a backend busy executing does not read
 *   its socket, so it runs on (holding its locks and snapshot) until it finishes or its
 *   `statement_timeout` fires.
 * The `CancelRequest` needs no authentication and no pool slot; the server answers by closing
 * the socket once it has signalled the backend, which then stops at its next interrupt check and
 * fails the statement with SQLSTATE 57014.
 */
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';

/** What a node-postgres `Client` (also a pooled one) knows about its own connection. */
interface CancelTarget {
  processID?: unknown;
  secretKey?: unknown;
  host?: unknown;
  port?: unknown;
}

/** The magic request code of `CancelRequest`: 1234 in the high 16 bits, 5678 in the low. */
const CANCEL_REQUEST_CODE = 80877102;

/** Whether the client exposes what a cancel request needs (the JS `pg` client does, once connected). */
export function canCancel(target: object): boolean {
  const client = target as CancelTarget;
  return (
    typeof client.processID === 'number' &&
    (typeof client.secretKey === 'number' || Buffer.isBuffer(client.secretKey)) &&
    typeof client.port === 'number' &&
    (typeof client.host === 'string' || client.host === undefined)
  );
}

function packet(processID: number, secretKey: number | Buffer): Buffer {
  const key = Buffer.isBuffer(secretKey) ? secretKey : Buffer.alloc(4);
  if (!Buffer.isBuffer(secretKey)) key.writeInt32BE(secretKey);
  const head = Buffer.alloc(12);
  head.writeInt32BE(12 + key.length, 0);
  head.writeInt32BE(CANCEL_REQUEST_CODE, 4);
  head.writeInt32BE(processID, 8);
  return Buffer.concat([head, key]);
}

/**
 * Sends a cancel request for `client`'s running statement. Resolves true once the server has
 * taken it (it closed the socket), false if it could not be delivered within `timeoutMs`.
 * Never rejects.
 */
export function sendCancelRequest(target: object, timeoutMs: number): Promise<boolean> {
  if (!canCancel(target)) return Promise.resolve(false);
  const client = target as CancelTarget;
  const host = (client.host as string | undefined) ?? 'localhost';
  const port = client.port as number;
  return new Promise((resolve) => {
    let socket: Socket;
    let sent = false;
    const done = (ok: boolean) => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), timeoutMs);
    // A host that is a directory is a Unix socket folder (as libpq and node-postgres read it).
    socket = host.startsWith('/') ? connect(join(host, `.s.PGSQL.${port}`)) : connect(port, host);
    socket.once('connect', () => {
      socket.write(packet(client.processID as number, client.secretKey as number | Buffer));
      sent = true;
    });
    socket.once('error', () => done(false));
    socket.once('close', () => done(sent));
    socket.resume();
  });
}
