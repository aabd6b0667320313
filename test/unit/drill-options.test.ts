/**
 * `sluice drill`'s flags at the edges of their bounds (cli/commands/drill.ts, drill/config.ts):
 * the last value accepted and the first refused, for each bound.
 */

import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type DrillFlags, drillOptions } from '../../src/cli/commands/drill.js';
import { DEFAULTS, MAX_DURATION_MS, parseDuration } from '../../src/drill/config.js';
import { runDrill } from '../../src/drill/run.js';

const FLAGS: DrillFlags = {
  workers: '3',
  duration: '60s',
  scenario: 'all',
  report: 'drill-report',
  latencyMultiple: '3',
  latencyFloor: '400ms',
  recoveryBound: '20s',
};
const options = (over: Partial<DrillFlags>) => () => drillOptions({ ...FLAGS, ...over });

describe('the drill flags at their bounds', () => {
  it('takes a duration of a day and refuses a millisecond more', () => {
    expect(parseDuration('1440m')).toBe(MAX_DURATION_MS);
    expect(() => parseDuration(`${MAX_DURATION_MS + 1}ms`)).toThrow(/too long: at most 1440m/);
    expect(options({ duration: '1440m' })().durationMs).toBe(MAX_DURATION_MS);
    expect(options({ duration: '1441m' })).toThrow(/too long/);
  });

  it('takes a latency multiple from 1 to 100, nothing else', () => {
    expect(options({ latencyMultiple: '1' })().latencyMultiple).toBe(1);
    expect(options({ latencyMultiple: '100' })().latencyMultiple).toBe(100);
    for (const bad of ['0.99', '100.01', 'Infinity', 'abc'])
      expect(options({ latencyMultiple: bad }), bad).toThrow(/--latency-multiple must be from 1 to 100/);
  });

  it('takes a latency floor and a recovery bound of at most 10 minutes', () => {
    expect(options({ latencyFloor: '600s' })().latencyFloorMs).toBe(600_000);
    expect(options({ latencyFloor: '600001ms' })).toThrow(/too long/);
    expect(options({ recoveryBound: '10m' })().recoveryBoundMs).toBe(600_000);
    expect(options({ recoveryBound: '600001ms' })).toThrow(/too long/);
    expect(options({ recoveryBound: '999ms' })).toThrow(/too short/);
  });

  it('takes 1 to 16 workers written in digits', () => {
    expect(options({ workers: '1' })().workers).toBe(1);
    expect(options({ workers: '16' })().workers).toBe(16);
    for (const bad of ['0', '17', '0x3', '2.5', '1e1', ''])
      expect(options({ workers: bad }), bad).toThrow(/--workers must be 1–16/);
  });
});

describe('the drill report folder', () => {
  it('refuses a folder whose logs the drill did not write, before it starts anything', async () => {
    const report = mkdtempSync(join(tmpdir(), 'sluice-drill-report-'));
    mkdirSync(join(report, 'logs'));
    writeFileSync(join(report, 'logs', 'precious.txt'), "not the drill's");
    const temps = () =>
      readdirSync(tmpdir()).filter((f) => f.startsWith('sluice-drill-') && !f.includes('report'));
    const before = temps();
    await expect(runDrill({ ...DEFAULTS, reportDir: report })).rejects.toThrow(
      /logs exists and is not a drill's logs/,
    );
    expect(existsSync(join(report, 'logs', 'precious.txt'))).toBe(true);
    expect(temps()).toEqual(before);
    rmSync(report, { recursive: true, force: true });
  });
});
