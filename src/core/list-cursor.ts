/**
 * @module core/list-cursor
 * List cursors, opaque. A cursor is the position (`seq`) of the last operation a page held,
 * encrypted as one AES-128 block under the `cursor` secret the store made at its migration, so
 * every process that shares the store reads every other's cursors. In the clear (as it was, the
 * decimal position in base64url) it told a tenant paging its own operations how many the whole
 * service had accepted in between, since `seq` counts every tenant's submits.
 *
 * One block of a block cipher is a permutation: each position has one cursor, and without the key
 * neither tells anything of the other. The block's first half is a fixed mark, so a cursor the key
 * did not make (edited, cut, from another store) is refused rather than read as some other
 * position. Cursors of the earlier, unencrypted form are refused like any other string the key did
 * not make: read, they let a tenant forge a cursor for any position and, by bisecting the positions
 * where its own operations appear, count what every other tenant submitted in between.
 */
import { createCipheriv, createDecipheriv } from 'node:crypto';

const MARK = Buffer.from('sluice-c', 'latin1');
const BASE64URL = /^[A-Za-z0-9_-]+$/;
/** 16 bytes in base64url, unpadded. */
const CURSOR_CHARS = 22;

export class ListCursors {
  private readonly key: Buffer;

  /** `keyHex`: the store's `cursor` secret, 16 bytes as hex. */
  constructor(keyHex: string) {
    this.key = Buffer.from(keyHex, 'hex');
    if (this.key.length !== 16) throw new Error('a cursor key is 16 bytes');
  }

  encode(seq: number): string {
    const block = Buffer.alloc(16);
    MARK.copy(block);
    block.writeBigUInt64BE(BigInt(seq), 8);
    const cipher = createCipheriv('aes-128-ecb', this.key, null).setAutoPadding(false);
    return Buffer.concat([cipher.update(block), cipher.final()]).toString('base64url');
  }

  /** The position a cursor stands for, or undefined for a string that is no cursor. */
  decode(cursor: string): number | undefined {
    // Decoding skips what is not base64url, so `!!!` would read as an empty cursor.
    if (cursor.length !== CURSOR_CHARS || !BASE64URL.test(cursor)) return undefined;
    const bytes = Buffer.from(cursor, 'base64url');
    if (bytes.length !== 16) return undefined;
    const decipher = createDecipheriv('aes-128-ecb', this.key, null).setAutoPadding(false);
    const block = Buffer.concat([decipher.update(bytes), decipher.final()]);
    const seq = block.subarray(0, MARK.length).equals(MARK)
      ? safe(block.readBigUInt64BE(MARK.length))
      : undefined;
    // The last character carries 4 bits that decoding drops: only the one spelling is a cursor.
    return seq !== undefined && this.encode(seq) === cursor ? seq : undefined;
  }
}

const safe = (n: bigint): number | undefined =>
  n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : undefined;
