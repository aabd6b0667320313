import { describe, expect, it } from 'vitest';
import { quickStart } from '../examples/quick-start.js';

describe('the README quick start', () => {
  it('runs as documented', async () => {
    expect(await quickStart()).toEqual({
      created: [true, false],
      state: 'succeeded',
      result: { charge: 'ch_1' },
      charges: 1,
    });
  });
});
