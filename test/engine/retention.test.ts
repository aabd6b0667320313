/**
 * Retention: terminal operations are purged to a tombstone after `terminalMs`; a resubmission
 * of a tombstoned id is refused (`operation-expired`), never run again; the tombstone itself
 * expires after `tombstoneMs`, and `needs_reconciliation` is never purged.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { isOperationExpired } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { type Harness, harness } from '../helpers/engine.js';

const DAY = 86_400_000;

describe('retention', () => {
  let h: Harness;
  afterEach(async () => h?.close());

  it('purges to a tombstone, refuses the id while it lasts, then frees it', async () => {
    const clock = new FakeClock();
    h = await harness({ clock, sluice: { retention: { terminalMs: 7 * DAY, tombstoneMs: 30 * DAY } } });
    let runs = 0;
    h.sluice.define('job', { input: z.object({ n: z.number() }), run: () => ({ run: ++runs }) });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'J1', kind: 'job', input: { n: 1 } });
    expect((await h.sluice.wait({ tenant: 'North', id: 'J1' })).state).toBe('succeeded');

    clock.advance(7 * DAY - 1);
    expect(await h.sluice.purgeExpired()).toBe(0);
    clock.advance(2);
    expect(await h.sluice.purgeExpired()).toBe(1);
    expect(await h.sluice.get({ tenant: 'North', id: 'J1' })).toBeUndefined();

    for (const input of [{ n: 1 }, { n: 2 }]) {
      const refused = await h.sluice
        .submit({ tenant: 'North', id: 'J1', kind: 'job', input })
        .catch((e) => e);
      expect(isOperationExpired(refused)).toBe(true);
    }
    expect(runs).toBe(1);

    clock.advance(23 * DAY);
    await h.sluice.purgeExpired();
    const again = await h.sluice.submit({ tenant: 'North', id: 'J1', kind: 'job', input: { n: 1 } });
    expect(again.created).toBe(true);
    expect((await h.sluice.wait({ tenant: 'North', id: 'J1' })).result).toEqual({ run: 2 });
  });
});
