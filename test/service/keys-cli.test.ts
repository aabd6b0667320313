/**
 * `sluice keys new` makes a key nobody could guess and the config line that admits it;
 * `sluice keys hash` turns the same key into the same line.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { KeyRing } from '../../src/http/auth.js';

const ROOT = join(import.meta.dirname, '../..');

function cli(...args: string[]): { status: number | null; lines: string[] } {
  const run = spawnSync(process.execPath, [join(ROOT, 'dist/cli/main.js'), ...args], { encoding: 'utf8' });
  return { status: run.status, lines: run.stdout.split('\n').filter(Boolean) };
}

describe('sluice keys', () => {
  it('new prints a random key and the config form that lets it in', () => {
    const first = cli('keys', 'new');
    const second = cli('keys', 'new');
    expect([first.status, second.status]).toEqual([0, 0]);
    const [key, hashed] = first.lines;
    // 32 random bytes as base64url: 43 characters.
    expect(key).toMatch(/^sluice_[A-Za-z0-9_-]{43}$/);
    expect(Buffer.from(key!.slice('sluice_'.length), 'base64url')).toHaveLength(32);
    expect(second.lines[0]).not.toBe(key);
    expect(cli('keys', 'hash', key!).lines).toEqual([hashed]);
    const ring = new KeyRing({ tenants: { north: [hashed!] }, admin: [] });
    expect(ring.authenticate(`Bearer ${key}`)).toEqual({
      kind: 'tenant',
      tenant: 'north',
      id: 'tenant:north',
    });
    expect(() => ring.authenticate(`Bearer ${second.lines[0]}`)).toThrow();
  });
});
