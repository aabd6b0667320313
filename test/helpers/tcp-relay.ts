/**
 * A TCP relay to the database, standing in for what sits between a store and its server: a link
 * that can be cut (a server that went away) or that is not there yet (created `closed`, it drops
 * every connection until `open()`), and with `fromServer`, a pooler that changes what the server
 * sends (each connection gets its own filter, called with each chunk and a way to pass bytes on).
 */
import { createServer, type Server, Socket } from 'node:net';

export interface TcpRelay {
  /** `target` with its host and port replaced by the relay's. */
  url: string;
  /** Lets connections through (for a relay created `closed`). */
  open(): void;
  /** Ends every connection and stops listening. */
  cut(): Promise<void>;
}

export async function tcpRelay(
  target: URL,
  options: {
    closed?: boolean;
    fromServer?: () => (chunk: Buffer, toClient: (bytes: Buffer) => void) => void;
  } = {},
): Promise<TcpRelay> {
  const sockets = new Set<Socket>();
  let closed = options.closed ?? false;
  const server: Server = createServer((inbound) => {
    if (closed) {
      inbound.destroy();
      return;
    }
    const outbound = new Socket();
    outbound.connect(Number(target.port || 5432), target.hostname);
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    }
    inbound.pipe(outbound);
    const filter = options.fromServer?.();
    if (filter) {
      outbound.on('data', (chunk: Buffer) => filter(chunk, (bytes) => inbound.write(bytes)));
      outbound.on('close', () => inbound.destroy());
      inbound.on('close', () => outbound.destroy());
    } else outbound.pipe(inbound);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const url = new URL(target.toString());
  url.hostname = '127.0.0.1';
  url.port = String(typeof address === 'object' && address ? address.port : 0);
  return {
    url: url.toString(),
    open: () => {
      closed = false;
    },
    cut: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
