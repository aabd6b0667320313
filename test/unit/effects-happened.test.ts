/**
 * How an error record names the effects that happened before the end it describes: in its message
 * (the first five, then a count) and in `details.effectsHappened` (all of them), beside what the
 * details held, within the bounds every record keeps.
 */
import { expect, it } from 'vitest';
import { notingEffectsHappened } from '../../src/core/decisions.js';
import { MAX_ERROR_DETAILS_BYTES, MAX_MESSAGE_CHARS } from '../../src/core/errors/index.js';

const failed = { code: 'boom', message: 'it failed' };

it('leaves a record alone when nothing happened', () => {
  const record = { ...failed, details: [1] };
  expect(notingEffectsHappened(record, [])).toBe(record);
});

it('names one, or the first five and how many more, and keeps the details it held', () => {
  expect(notingEffectsHappened({ ...failed, details: { lastError: failed } }, ['charge'])).toEqual({
    ...failed,
    message: 'it failed (after an effect that happened: charge)',
    details: { lastError: failed, effectsHappened: ['charge'] },
  });
  const names = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
  const noted = notingEffectsHappened(failed, names);
  expect(noted.message).toBe('it failed (after effects that happened: a, b, c, d, e and 2 more)');
  expect(noted.details).toEqual({ effectsHappened: names });
});

it('puts details that are not an object beside the names', () => {
  expect(notingEffectsHappened({ ...failed, details: ['x'] }, ['charge']).details).toEqual({
    detail: ['x'],
    effectsHappened: ['charge'],
  });
  expect(notingEffectsHappened({ ...failed, details: 'text' }, ['charge']).details).toEqual({
    detail: 'text',
    effectsHappened: ['charge'],
  });
});

it('stays within the record bounds: the message cut before its note, details too large dropped', () => {
  const long = notingEffectsHappened({ ...failed, message: 'm'.repeat(MAX_MESSAGE_CHARS) }, ['charge']);
  expect(long.message).toHaveLength(MAX_MESSAGE_CHARS);
  expect(long.message.endsWith('(after an effect that happened: charge)')).toBe(true);
  const big = { blob: 'x'.repeat(MAX_ERROR_DETAILS_BYTES - 20) };
  const dropped = notingEffectsHappened({ ...failed, details: big }, ['charge', 'refund']);
  expect(dropped.details).toEqual({
    effectsHappened: ['charge', 'refund'],
    omitted: "the error's own details, to keep the record within its size",
  });
});
