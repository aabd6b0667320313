import type pino from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { LazyLog } from '../../src/runtime/lazy-log.js';
import { captureLog } from '../helpers/log-capture.js';

function capture(level: pino.Level) {
  const { logger, lines } = captureLog(level);
  return { parent: logger, lines };
}

describe('the lazy attempt log', () => {
  it('makes no child logger to answer whether a level is on', () => {
    const { parent } = capture('warn');
    const child = vi.spyOn(parent, 'child');
    const logs = new LazyLog(parent, { tenant: 'north', operation: 'O7' });
    expect(logs.isLevelEnabled('debug')).toBe(false);
    expect(logs.isLevelEnabled('warn')).toBe(true);
    expect(child).not.toHaveBeenCalled();
  });

  it('makes one child on first use, whose lines carry the bindings', () => {
    const { parent, lines } = capture('info');
    const child = vi.spyOn(parent, 'child');
    const logs = new LazyLog(parent, { tenant: 'north', operation: 'O7', attempt: 2 });
    logs.log.info('first');
    logs.log.warn('second');
    expect(child).toHaveBeenCalledTimes(1);
    expect(lines.map((l) => [l.msg, l.tenant, l.operation, l.attempt])).toEqual([
      ['first', 'north', 'O7', 2],
      ['second', 'north', 'O7', 2],
    ]);
  });
});
