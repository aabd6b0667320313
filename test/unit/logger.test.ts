/**
 * The logger Sluice makes when given none writes an error's cause as a record of its own: a
 * store error already carries the driver's message, which pino's default serializer appended
 * again, and the cause's database code appeared nowhere.
 */
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { StoreError } from '../../src/core/errors/index.js';
import { sluiceLogger } from '../../src/observability/logger.js';

function capture(): { stream: Writable; lines: () => Array<Record<string, unknown>> } {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      chunks.push(String(chunk));
      done();
    },
  });
  return {
    stream,
    lines: () =>
      chunks
        .join('')
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => JSON.parse(l)),
  };
}

describe('the default logger', () => {
  it("writes a store error's message once, and its cause with the database's code", () => {
    const out = capture();
    const log = sluiceLogger('info', out.stream);
    const cause = Object.assign(new Error('terminating connection due to administrator command'), {
      code: '57P01',
    });
    log.warn(
      { err: new StoreError('unavailable', `PostgreSQL 57P01: ${cause.message}`, { cause }) },
      'claim failed',
    );
    log.error({ err: new Error('plain') }, 'no cause');
    const [withCause, plain] = out.lines();
    expect(out.lines()).toHaveLength(2);
    expect(withCause).toMatchObject({
      name: 'sluice',
      msg: 'claim failed',
      err: {
        type: 'StoreError',
        message: 'PostgreSQL 57P01: terminating connection due to administrator command',
        code: 'store-unavailable',
        cause: {
          type: 'Error',
          message: 'terminating connection due to administrator command',
          code: '57P01',
        },
      },
    });
    expect(plain).toMatchObject({ err: { type: 'Error', message: 'plain' } });
    expect(plain?.err).not.toHaveProperty('cause');
  });

  it('logs at the level it is given, and nothing under it', () => {
    const out = capture();
    const log = sluiceLogger('warn', out.stream);
    log.info('not written');
    log.warn('written');
    expect(out.lines().map((l) => l.msg)).toEqual(['written']);
  });
});
