/**
 * The store's clock as the HTTP API reads it (http/store-clock.ts): the host's clock plus an
 * offset measured against `store.now()`, the first time before it answers, then at most once a
 * refresh interval and never on a request's path; a store that cannot answer leaves the hint
 * on the last offset and fails no request.
 */
import { describe, expect, it } from 'vitest';
import { StoreClock } from '../../src/http/store-clock.js';

const OFFSET = 600_000;

function store(answer: () => Promise<number> = async () => Date.now() + OFFSET) {
  const s = {
    calls: 0,
    now: () => {
      s.calls += 1;
      return answer();
    },
  };
  return s;
}

describe('the store clock of the HTTP API', () => {
  it("answers the store's time from the first call, measured once", async () => {
    const s = store();
    const clock = new StoreClock(s, 60_000);
    const [a, b] = await Promise.all([clock.now(), clock.now()]);
    for (const t of [a, b, await clock.now()]) {
      expect(t - Date.now()).toBeGreaterThan(OFFSET - 1_000);
      expect(t - Date.now()).toBeLessThan(OFFSET + 1_000);
    }
    expect(s.calls).toBe(1);
  });

  it('measures again once the last measurement is older than the refresh interval, without waiting', async () => {
    let offset = OFFSET;
    let release: (() => void) | undefined;
    const s = store(async () => {
      if (s.calls > 1) await new Promise<void>((r) => (release = r));
      return Date.now() + offset;
    });
    const clock = new StoreClock(s, 0);
    await clock.now();
    offset = -OFFSET;
    // A refresh is due at once (interval 0): started, not waited for; the old offset answers.
    const t = await clock.now();
    expect(s.calls).toBe(2);
    expect(t - Date.now()).toBeGreaterThan(OFFSET - 1_000);
    release!();
    await clock.measure();
    expect((await clock.now()) - Date.now()).toBeLessThan(-OFFSET + 1_000);
  });

  it("keeps the host's clock when the store cannot answer, and fails nothing", async () => {
    const s = store(async () => {
      throw new Error('store-unavailable');
    });
    const clock = new StoreClock(s, 60_000);
    const t = await clock.now();
    expect(Math.abs(t - Date.now())).toBeLessThan(1_000);
    // Not asked again before the interval has passed.
    await clock.now();
    expect(s.calls).toBe(1);
  });
});
