/**
 * A client on a raw loopback socket, for what `fetch` hides or will not do: send headers that
 * declare a body and then not send it, ask for `100 Continue`, read `Connection` and `Keep-Alive`,
 * see interim answers, and tell when the server has closed its side.
 */
import { connect, type Socket } from 'node:net';

export interface RawAnswer {
  status: number;
  /** Lower-cased names; a repeated header keeps its last value. */
  headers: Record<string, string>;
  body: string;
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body in tests
  json: any;
}

export class RawClient {
  readonly socket: Socket;
  /** Resolves once the server has ended or closed the connection. */
  readonly ended: Promise<void>;
  private buffer = '';
  private done = false;
  private wake: () => void = () => {};

  /**
   * `allowHalfOpen`: keep this side open when the server ends its own, as a stalled client does
   * (by default the socket ends its side in answer, as most clients do).
   */
  constructor(base: string, options: { allowHalfOpen?: boolean } = {}) {
    const { port } = new URL(base);
    this.socket = connect({ port: Number(port), host: '127.0.0.1', allowHalfOpen: options.allowHalfOpen });
    this.socket.setEncoding('latin1');
    this.socket.on('data', (chunk: string) => {
      this.buffer += chunk;
      this.wake();
    });
    this.socket.on('error', () => {});
    this.ended = new Promise<void>((resolve) => {
      const end = () => {
        this.done = true;
        this.wake();
        resolve();
      };
      this.socket.once('end', end);
      this.socket.once('close', end);
    });
  }

  write(text: string): void {
    this.socket.write(text, 'latin1');
  }

  /** The next answer on the connection, an interim one (`100 Continue`) included. */
  async read(): Promise<RawAnswer> {
    for (;;) {
      const answer = this.take();
      if (answer) return answer;
      if (this.done)
        throw new Error(`the connection ended before an answer; read: ${JSON.stringify(this.buffer)}`);
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }

  destroy(): void {
    this.socket.destroy();
  }

  private take(): RawAnswer | undefined {
    const end = this.buffer.indexOf('\r\n\r\n');
    if (end === -1) return undefined;
    const [statusLine, ...lines] = this.buffer.slice(0, end).split('\r\n');
    const status = Number(statusLine!.split(' ')[1]);
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
    }
    const length = status < 200 ? 0 : Number(headers['content-length'] ?? 0);
    if (this.buffer.length < end + 4 + length) return undefined;
    const body = this.buffer.slice(end + 4, end + 4 + length);
    this.buffer = this.buffer.slice(end + 4 + length);
    let json: unknown;
    try {
      json = body ? JSON.parse(body) : undefined;
    } catch {
      json = undefined;
    }
    return { status, headers, body, json };
  }
}
