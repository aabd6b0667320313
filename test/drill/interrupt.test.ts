/**
 * The drill's deployment never outlives the drill, and its API never dies unnoticed. Run as a user
 * runs it, the built CLI on SQLite:
 *
 * - Ctrl-C twice (the second before the graceful stop is done) still ends every process of the
 *   deployment and removes the run's folder: the second signal used to reach Node's default
 *   handler and leave the workers running, parented to init.
 * - The API process killed mid-run fails the drill: only worker exits were watched, and a
 *   recovery measured on a deployment without its API passed.
 * - The store reaches the deployment's processes in their environment, not on their command
 *   lines, which anyone on the host can read (`ps`): a PostgreSQL URL may carry its password.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import type { DrillResult } from '../../src/drill/types.js';
import { assertBuilt } from '../helpers/worker-process.js';

const ROOT = join(import.meta.dirname, '../..');
const GUARD_MS = 120_000;

/**
 * The pids of processes whose command line (or environment, readable for this user's own
 * processes) names `text`.
 */
function processesNaming(
  text: string,
  where: Array<'cmdline' | 'environ'> = ['cmdline', 'environ'],
): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    for (const file of where) {
      try {
        if (readFileSync(join('/proc', entry, file), 'utf8').includes(text)) {
          pids.push(Number(entry));
          break;
        }
      } catch {
        // gone meanwhile, or another user's
      }
    }
  }
  return pids;
}

interface Started {
  child: ChildProcess;
  report: string;
  /** The run's temp folder, from the drill's first line (its SQLite file lives there). */
  workDir: Promise<string>;
  /** Resolves at the first progress line of `phase`. */
  phase(name: string): Promise<void>;
  /** Resolves once stderr matches `pattern`. */
  line(pattern: RegExp): Promise<RegExpExecArray>;
  exited: Promise<number | null>;
  stderr(): string;
}

function startDrill(args: string[]): Started {
  const report = mkdtempSync(join(tmpdir(), 'sluice-drill-report-'));
  const child = spawn(process.execPath, ['dist/cli/main.js', 'drill', ...args, '--report', report], {
    cwd: ROOT,
    env: { ...process.env, SLUICE_DRILL_BREAK: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  const waiters: Array<{
    test: (text: string) => RegExpExecArray | null;
    resolve(m: RegExpExecArray): void;
  }> = [];
  child.stderr!.on('data', (c: Buffer) => {
    err += c.toString('utf8');
    for (const w of waiters.splice(0)) {
      const m = w.test(err);
      if (m) w.resolve(m);
      else waiters.push(w);
    }
  });
  child.stdout!.resume();
  const line = (pattern: RegExp) =>
    new Promise<RegExpExecArray>((resolve) => {
      const m = pattern.exec(err);
      if (m) resolve(m);
      else waiters.push({ test: (text) => pattern.exec(text), resolve });
    });
  return {
    child,
    report,
    workDir: line(/drill: sqlite (\S+)\/drill\.db/).then((m) => m[1]!),
    phase: (name) => line(new RegExp(`^${name} +\\d+:\\d+`, 'm')).then(() => undefined),
    line,
    exited: new Promise((resolve) => child.once('exit', (code) => resolve(code))),
    stderr: () => err,
  };
}

describe('sluice drill, stopped or broken from outside', () => {
  beforeAll(() => assertBuilt());

  it(
    'ends every process of its deployment and its folder on a double Ctrl-C',
    async () => {
      const run = startDrill(['--duration', '15s', '--workers', '2']);
      const workDir = await run.workDir;
      await run.phase('baseline');
      // The deployment is up: the API and both workers have the run's store in their environment,
      // and none has it on its command line.
      // (A handler's subprocesses inherit the environment: at least three, then.)
      expect(processesNaming(`SLUICE_DB=${workDir}/drill.db`, ['environ']).length).toBeGreaterThanOrEqual(3);
      expect(processesNaming(`${workDir}/drill.db`, ['cmdline'])).toEqual([]);
      run.child.kill('SIGINT');
      // The second once the first is being handled (two at once may reach the process as one).
      await run.line(/drill: interrupted: stopping the deployment/);
      run.child.kill('SIGINT');
      expect(await run.exited, run.stderr().slice(-2000)).toBe(130);
      expect(processesNaming(workDir)).toEqual([]);
      expect(existsSync(workDir)).toBe(false);
      rmSync(run.report, { recursive: true, force: true });
    },
    GUARD_MS,
  );

  it(
    'fails when its API process dies mid-run',
    async () => {
      const run = startDrill(['--duration', '15s', '--workers', '2', '--scenario', 'crash']);
      const workDir = await run.workDir;
      await run.phase('crash');
      const api = processesNaming(workDir).filter((pid) =>
        readFileSync(join('/proc', String(pid), 'cmdline'), 'utf8').includes('--role\0api\0'),
      );
      expect(api).toHaveLength(1);
      process.kill(api[0]!, 'SIGKILL');
      expect(await run.exited, run.stderr().slice(-2000)).toBe(1);
      const result = JSON.parse(readFileSync(join(run.report, 'result.json'), 'utf8')) as DrillResult;
      const ran = result.invariants.find((i) => i.name === 'The deployment ran as driven');
      expect(ran?.pass).toBe(false);
      expect(ran?.detail).toContain('the API process exited on its own');
      expect(processesNaming(workDir)).toEqual([]);
      rmSync(run.report, { recursive: true, force: true });
    },
    GUARD_MS,
  );
});
