import { describe, expect, it } from 'vitest';
import { InputInvalid, MAX_INPUT_ISSUES } from '../../src/core/errors/index.js';

const issues = (n: number) => Array.from({ length: n }, (_, i) => ({ path: ['amounts', i], message: 'bad' }));

describe('InputInvalid keeps the first MAX_INPUT_ISSUES issues', () => {
  it('at the limit keeps them all and omits none', () => {
    const e = new InputInvalid('batch', issues(MAX_INPUT_ISSUES));
    expect([e.issues.length, e.omitted, e.details]).toEqual([
      MAX_INPUT_ISSUES,
      0,
      { issues: issues(MAX_INPUT_ISSUES) },
    ]);
  });

  it('one over keeps the first ones and counts the one left out', () => {
    const e = new InputInvalid('batch', issues(MAX_INPUT_ISSUES + 1));
    expect([e.issues.length, e.omitted]).toEqual([MAX_INPUT_ISSUES, 1]);
    expect(e.issues.at(-1)?.path).toEqual(['amounts', MAX_INPUT_ISSUES - 1]);
    expect(e.details).toEqual({ issues: issues(MAX_INPUT_ISSUES), omitted: 1 });
  });
});
