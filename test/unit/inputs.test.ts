/**
 * Values from a command line or the environment, at their edges: each refused in one line that
 * names where it came from and what it was.
 */
import { describe, expect, it } from 'vitest';
import { jsonFrom, logLevel, portFrom, urlScheme } from '../../src/config/inputs.js';

const refusal = (f: () => unknown) => {
  try {
    f();
    return undefined;
  } catch (error) {
    return [(error as { code?: string }).code, (error as Error).message];
  }
};

describe('command-line and environment values', () => {
  it('a port: whole digits from 0 to 65535, spaces around allowed', () => {
    expect(['0', '65535', ' 8080 '].map((t) => portFrom('--port', t))).toEqual([0, 65535, 8080]);
    for (const text of ['65536', '-1', '', ' ', '8080x', '1e3', '80.5'])
      expect(refusal(() => portFrom('PORT', text))).toEqual([
        'invalid-argument',
        `PORT must be a port number from 0 to 65535, not ${JSON.stringify(text)}`,
      ]);
  });

  it('a log level: one of pino’s, else the fallback when unset or empty', () => {
    expect(logLevel('warn', {})).toBe('warn');
    expect(logLevel('warn', { SLUICE_LOG_LEVEL: '' })).toBe('warn');
    expect(logLevel('warn', { SLUICE_LOG_LEVEL: 'silent' })).toBe('silent');
    expect(refusal(() => logLevel('info', { SLUICE_LOG_LEVEL: 'verbose' }))?.[1]).toMatch(
      /^SLUICE_LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent, not "verbose"$/,
    );
  });

  it('JSON given to a flag, and the scheme of a URL', () => {
    expect(jsonFrom('--result', '{"a":1}')).toEqual({ a: 1 });
    expect(refusal(() => jsonFrom('--result', '{bad'))?.[1]).toMatch(/^--result is not JSON: /);
    expect(
      ['postgres://h/db', 'POSTGRESQL://h', 'git+ssh://x', './data/x.db', 'C:/x', ':memory:'].map(urlScheme),
    ).toEqual(['postgres', 'POSTGRESQL', 'git+ssh', undefined, undefined, undefined]);
  });
});
