/** A pino logger whose lines a test reads back, parsed, in the order they were written. */
import { Writable } from 'node:stream';
import pino from 'pino';

export function captureLog(level: pino.Level): {
  logger: pino.Logger;
  lines: Array<Record<string, unknown>>;
} {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  return { logger: pino({ level }, stream), lines };
}
