import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { DueWakes } from '../../src/queue/due-wakes.js';

describe('DueWakes', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('wakes each class at each due instant, earliest first, once for instants that coincide', () => {
    const woke: string[] = [];
    const due = new DueWakes((cls) => woke.push(cls));
    due.add('a', 100);
    due.add('a', 50);
    due.add('a', 50);
    due.add('b', 70);
    due.add('a', 300);
    vi.advanceTimersByTime(49);
    expect(woke).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(woke).toEqual(['a']);
    expect(due.pending).toBe(3);
    vi.advanceTimersByTime(20);
    expect(woke).toEqual(['a', 'b']);
    vi.advanceTimersByTime(30);
    expect(woke).toEqual(['a', 'b', 'a']);
    vi.advanceTimersByTime(200);
    expect(woke).toEqual(['a', 'b', 'a', 'a']);
    expect(due.pending).toBe(0);
  });

  it('keeps at most 1,024 instants a class and forgets them all when stopped', () => {
    const woke: string[] = [];
    const due = new DueWakes((cls) => woke.push(cls));
    for (let i = 0; i < 1025; i++) due.add('a', 1000 + i);
    expect(due.pending).toBe(1024);
    due.stop();
    expect(due.pending).toBe(0);
    vi.advanceTimersByTime(5000);
    expect(woke).toEqual([]);
  });

  it('leaves instants past its horizon to the poll: a budget deferred for a month does not spin a timer', () => {
    const woke: string[] = [];
    const due = new DueWakes((cls) => woke.push(cls));
    // 30 days does not fit a timer's 32-bit delay, which Node would turn into 1 ms, again and again.
    due.add('a', 30 * 24 * 3600_000);
    due.add('a', 60_001);
    expect(due.pending).toBe(0);
    vi.advanceTimersByTime(120_000);
    expect(woke).toEqual([]);
    due.add('a', 60_000);
    expect(due.pending).toBe(1);
    vi.advanceTimersByTime(60_000);
    expect(woke).toEqual(['a']);
  });
});
