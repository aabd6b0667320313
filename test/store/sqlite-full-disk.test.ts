/**
 * SQLite on a disk that is full: a real file system of 4 MiB (tmpfs), filled by a file beside the
 * database while another connection has it open. A store opened then still migrates with nothing to apply (a process that starts
 * answers reads; one that refuses to start answers nothing, and its supervisor restarts it in a
 * loop), reads answer, a submit fails `store-unavailable` and writes nothing, and once the filler
 * is gone the same store takes the submit. Mounting needs root: elsewhere the block is skipped,
 * and says why (the CI runs as root).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isSluiceError } from '../../src/core/errors/index.js';
import { sqliteStore } from '../../src/store/sqlite/index.js';
import { submitParams } from '../conformance/fixtures.js';

/** Mounts a tmpfs of `size` at a new folder, or says why it cannot. */
function mountTmpfs(size: string): { dir: string } | { why: string } {
  if (process.getuid?.() !== 0) return { why: 'mounting a tmpfs needs root' };
  const dir = mkdtempSync(join(tmpdir(), 'sluice-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { stdio: 'pipe' });
    return { dir };
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    return { why: `mount failed: ${String((error as { stderr?: Buffer }).stderr ?? error).trim()}` };
  }
}

/** Writes zeros beside the database until the file system refuses: the disk is then full. */
function fill(path: string): void {
  try {
    writeFileSync(path, Buffer.alloc(8 << 20));
  } catch (error) {
    if ((error as { code?: string }).code !== 'ENOSPC') throw error;
  }
}

const mounted = mountTmpfs('4m');
const why = 'why' in mounted ? mounted.why : '';

describe.skipIf(why !== '')(`SQLite on a full disk${why ? ` (skipped: ${why})` : ''}`, () => {
  const dir = 'dir' in mounted ? mounted.dir : '';
  const path = join(dir, 'sluice.db');
  const filler = join(dir, 'filler');

  // Another process on the file, as a worker beside the API, or one killed and not yet
  // restarted, leaves its -wal and -shm files: a store that opens the file then needs no room to
  // make them. (With none left, opening needs a page of room for the -shm file, and fails
  // `store-unavailable` until there is.)
  let other: Database.Database | undefined;

  beforeAll(async () => {
    const store = sqliteStore({ path });
    await store.migrate();
    await store.operationSubmitMany([submitParams({ id: 'before' })]);
    other = new Database(path);
    other.prepare('SELECT count(*) FROM operations').get();
    await store.close();
  });
  afterAll(() => {
    other?.close();
    if (!dir) return;
    execFileSync('umount', ['-l', dir]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('starts, answers reads and refuses writes while full, and takes them once there is room', async () => {
    fill(filler);
    const store = sqliteStore({ path });
    try {
      // Nothing to apply: the write that proves the file writable fails on the full disk, and is
      // no reason to refuse to start.
      await store.migrate();
      expect((await store.operationGet({ tenant: 'North', id: 'before' }))?.state).toBe('queued');
      const refused = await store.operationSubmitMany([submitParams({ id: 'while-full' })]).catch((e) => e);
      expect(isSluiceError(refused) && [refused.code, refused.retryable]).toEqual([
        'store-unavailable',
        true,
      ]);
      expect(await store.operationGet({ tenant: 'North', id: 'while-full' })).toBeUndefined();

      rmSync(filler);
      const [taken] = await store.operationSubmitMany([submitParams({ id: 'while-full' })]);
      expect(taken?.status).toBe('created');
    } finally {
      await store.close();
    }
  });
});
