/**
 * What a `--db` value (or `SLUICE_DB`, or a config's `db`) opens: a postgres URL whatever the
 * case of its scheme, a refusal for any other scheme (never a SQLite file named like a URL), and
 * a SQLite file and folder made private when Sluice makes them.
 */
import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openStore } from '../../src/cli/open-store.js';
import { submitParams } from '../conformance/fixtures.js';

describe('a store target', () => {
  let dir = '';
  const previous = process.cwd();
  afterEach(() => {
    process.chdir(previous);
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('opens PostgreSQL whatever the case of the scheme, and refuses any other scheme', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-target-'));
    // A file path named like a URL would land under the working folder: make that one ours.
    process.chdir(dir);
    for (const url of ['POSTGRES://u@127.0.0.1:1/db', 'PostgreSQL://u@127.0.0.1:1/db']) {
      const store = await openStore(url);
      expect([url, store.dialect]).toEqual([url, 'postgres']);
      await store.close();
    }
    for (const [url, scheme] of [
      ['postgress://u@127.0.0.1/db', 'postgress'],
      ['sqlite://data/sluice.db', 'sqlite'],
      ['mysql://u@h/db', 'mysql'],
    ]) {
      await expect(openStore(url)).rejects.toMatchObject({
        code: 'invalid-argument',
        message: expect.stringContaining(`names a ${scheme}:// URL`),
      });
    }
    // Nothing was made for them.
    expect(existsSync(join(dir, 'postgress:'))).toBe(false);
    expect(existsSync(join(dir, 'sqlite:'))).toBe(false);
  });

  it("makes a SQLite file, its WAL and a missing folder the user's alone", async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-target-'));
    const path = join(dir, 'made', 'sluice.db');
    const store = await openStore(path);
    await store.migrate();
    await store.operationSubmitMany([submitParams({ id: 'a' })]);
    const mode = (p: string) => statSync(p).mode & 0o777;
    expect([mode(join(dir, 'made')), mode(path), mode(`${path}-wal`)]).toEqual([0o700, 0o600, 0o600]);
    await store.close();
  });
});
