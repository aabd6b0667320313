/**
 * Whose process groups a worker's start-up sweep may kill: those its own user recorded. A file
 * another user planted in the temp root, naming a live group, is left alone; the same file of
 * this user's kills it. And the folders the worker makes are its user's alone.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import {
  chownSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { defaultTempRoot, TempDirs } from '../../src/runtime/temp-dirs.js';
import { processAlive } from '../helpers/process-alive.js';

const NOBODY = 65_534;
/** Above Linux's largest pid (2^22): never a live process. */
const DEAD_PID = 4_194_305;

const startTime = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!;
};
const alive = processAlive;

describe.skipIf(process.platform !== 'linux')("the temp root's sweep", () => {
  let root = '';
  const children: ChildProcess[] = [];
  afterEach(() => {
    for (const c of children.splice(0)) if (c.pid && alive(c.pid)) process.kill(-c.pid, 'SIGKILL');
    rmSync(root, { recursive: true, force: true });
  });

  /** A live process group of its own, recorded in a dead worker's folder as a worker would. */
  const plant = (owner?: number) => {
    const child = spawn('sleep', ['300'], { detached: true, stdio: 'ignore' });
    children.push(child);
    const pgid = child.pid!;
    const folder = join(root, `${DEAD_PID}-planted`);
    mkdirSync(folder);
    const file = join(folder, `.group-${pgid}`);
    writeFileSync(file, startTime(pgid));
    if (owner !== undefined) {
      chownSync(folder, owner, owner);
      chownSync(file, owner, owner);
    }
    return pgid;
  };

  it.skipIf(process.getuid?.() !== 0)("leaves alone a group another user's file names", () => {
    root = mkdtempSync(join(tmpdir(), 'sluice-sweep-'));
    const pgid = plant(NOBODY);
    expect(new TempDirs(root).sweepOrphans()).toBe(1);
    expect(alive(pgid)).toBe(true);
  });

  it("kills the group its own user's file names", async () => {
    root = mkdtempSync(join(tmpdir(), 'sluice-sweep-'));
    const pgid = plant();
    const child = children.at(-1)!;
    const exited = new Promise<NodeJS.Signals | null>((resolve) =>
      child.once('exit', (_code, signal) => resolve(signal)),
    );
    expect(new TempDirs(root).sweepOrphans()).toBe(1);
    // SIGKILL is delivered, not done, when kill() returns: a loaded machine runs the sweep's
    // check before the child has died. Its exit, with the signal that ended it, is the proof.
    expect(await exited).toBe('SIGKILL');
    expect(alive(pgid)).toBe(false);
  });

  it("makes its folders the user's alone, under a root of the user's own by default", () => {
    root = mkdtempSync(join(tmpdir(), 'sluice-sweep-'));
    const dirs = new TempDirs(join(root, 'made'));
    const path = dirs.create('North', 'op-1', 1);
    for (const folder of [join(root, 'made'), dirs.ownerDir, path])
      expect([folder, statSync(folder).mode & 0o777]).toEqual([folder, 0o700]);
    expect(defaultTempRoot()).toBe(join(tmpdir(), `sluice-${process.getuid?.()}`));
  });
});

describe("an attempt's temporary bytes", () => {
  it('are counted the same walked off the event loop as in one go: files in nested folders, links not followed', async () => {
    const root = mkdtempSync(join(tmpdir(), 'sluice-bytes-'));
    try {
      mkdirSync(join(root, 'a', 'b'), { recursive: true });
      writeFileSync(join(root, 'one'), 'x'.repeat(1000));
      writeFileSync(join(root, 'a', 'two'), 'y'.repeat(2500));
      writeFileSync(join(root, 'a', 'b', 'three'), 'z'.repeat(7));
      symlinkSync('/etc/passwd', join(root, 'a', 'link'));
      const expected = 1000 + 2500 + 7 + Buffer.byteLength('/etc/passwd');
      expect(TempDirs.bytes(root)).toBe(expected);
      expect(await TempDirs.bytesAsync(root)).toBe(expected);
      expect(await TempDirs.bytesAsync(join(root, 'not-there'))).toBe(0);
      // The loop turns while the walk goes on: something queued behind it runs before it ends.
      for (let i = 0; i < 200; i++) writeFileSync(join(root, `f${i}`), 'w');
      let turned = false;
      setImmediate(() => {
        turned = true;
      });
      const walked = TempDirs.bytesAsync(root).then((n) => [n, turned]);
      expect(await walked).toEqual([expected + 200, true]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
