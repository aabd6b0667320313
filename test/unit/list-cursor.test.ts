/**
 * List cursors are opaque: each position has one cursor, which gives nothing of the position
 * away, reads back as that position under the same key and as nothing under another, and an
 * edited one is refused rather than read as some other position. Cursors of the earlier form
 * (the decimal position in base64url) are refused too: anyone can make one for any position.
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ListCursors } from '../../src/core/list-cursor.js';

const key = () => randomBytes(16).toString('hex');
const position = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });

describe('list cursors', () => {
  it('read back as their position, and give the decimal position away in no form', () => {
    const cursors = new ListCursors(key());
    fc.assert(
      fc.property(position, (seq) => {
        const cursor = cursors.encode(seq);
        expect(cursor).toMatch(/^[A-Za-z0-9_-]{22}$/);
        expect(cursors.decode(cursor)).toBe(seq);
        const decoded = Buffer.from(cursor, 'base64url').toString('latin1');
        if (seq >= 1000) expect(decoded).not.toContain(String(seq));
      }),
    );
    // Neighbours share nothing visible: a tenant cannot count what came between two of its cursors.
    const [a, b] = [cursors.encode(1_000_000), cursors.encode(1_000_001)];
    expect(a.slice(0, 8)).not.toBe(b.slice(0, 8));
  });

  it('read as nothing under another key, and refuse an edited cursor', () => {
    const cursors = new ListCursors(key());
    const other = new ListCursors(key());
    fc.assert(
      fc.property(position, fc.nat(21), fc.constantFrom(...'AQgw_-'), (seq, at, char) => {
        const cursor = cursors.encode(seq);
        expect(other.decode(cursor)).toBeUndefined();
        const edited = cursor.slice(0, at) + char + cursor.slice(at + 1);
        if (edited !== cursor) expect(cursors.decode(edited)).toBeUndefined();
      }),
    );
    for (const bad of ['', '!!!', 'not a cursor', cursors.encode(7).slice(0, 21), `${cursors.encode(7)}A`])
      expect(cursors.decode(bad)).toBeUndefined();
    // The last character's low 4 bits are dropped by decoding: a cursor differing only there
    // decodes to the same bytes, and is still refused, so a position has one cursor.
    const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const cursor = cursors.encode(42);
    const last = ALPHABET.indexOf(cursor[21]!);
    const twin = cursor.slice(0, 21) + ALPHABET[last ^ 1];
    expect(Buffer.from(twin, 'base64url')).toEqual(Buffer.from(cursor, 'base64url'));
    expect(cursors.decode(twin)).toBeUndefined();
  });

  it('refuse a cursor of the earlier form, which anyone could make for any position', () => {
    const cursors = new ListCursors(key());
    const earlier = (seq: number) => Buffer.from(String(seq)).toString('base64url');
    for (const seq of [0, 7, 4217, 1_000_000, 1_234_567_890_123_456, Number.MAX_SAFE_INTEGER])
      expect([seq, cursors.decode(earlier(seq))]).toEqual([seq, undefined]);
    // A position of 16 digits spells a cursor of a real one's length: it is still no cursor.
    expect(earlier(1_234_567_890_123_456)).toHaveLength(22);
    fc.assert(
      fc.property(position, (seq) => {
        expect(cursors.decode(earlier(seq))).toBeUndefined();
      }),
    );
  });
});
