/**
 * The payments demo (`npm start`): its kinds through the running service — a charge, refunds that
 * only apply to a succeeded charge and never exceed it, and an export written by a subprocess.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { DEMO_KEYS, paymentsConfig } from '../../src/demo/payments.js';
import { type Service, startService } from '../../src/service/index.js';
import { type ProviderServer, startProviderServer } from '../../src/testing/index.js';
import { silent } from '../helpers/engine.js';

describe('the payments demo', () => {
  let service: Service | undefined;
  let stub: ProviderServer | undefined;
  let dir = '';
  afterEach(async () => {
    await service?.stop({ graceMs: 100 });
    await stub?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('charges once, refunds only what a succeeded charge allows, and exports through a subprocess', async () => {
    dir = mkdtempSync(join(tmpdir(), 'sluice-demo-'));
    stub = await startProviderServer();
    const config = paymentsConfig(stub.url);
    service = await startService(
      { ...config, worker: { ...config.worker, tempRoot: join(dir, 'tmp'), pollIntervalMs: 20 } },
      { db: join(dir, 'sluice.db'), port: 0, logger: silent },
    );
    const api = service.url!;
    const submit = async (id: string, kind: string, input: unknown) => {
      const res = await fetch(`${api}/v1/operations`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${DEMO_KEYS.north}`,
          'idempotency-key': id,
          'content-type': 'application/json',
        },
        body: JSON.stringify({ kind, input }),
      });
      expect(res.status).toBe(202);
      return service!.sluice.wait({ tenant: 'north', id }, { timeoutMs: 20_000 });
    };

    const charge = await submit('O7', 'charge', { invoice: 7, amount_cents: 5000 });
    expect([charge.state, charge.result]).toEqual(['succeeded', { charge: 'ch_1', amount_cents: 5000 }]);

    const missing = await submit('R0', 'refund', {
      charge_operation_id: 'nope',
      amount_cents: 1,
      authorized_by: 'ops',
    });
    expect([missing.state, missing.error?.code]).toEqual(['failed', 'refund-no-such-charge']);
    const tooMuch = await submit('R1', 'refund', {
      charge_operation_id: 'O7',
      amount_cents: 5001,
      authorized_by: 'ops',
    });
    expect([tooMuch.state, tooMuch.error?.code]).toEqual(['failed', 'refund-too-large']);
    const part = await submit('R2', 'refund', {
      charge_operation_id: 'O7',
      amount_cents: 3000,
      authorized_by: 'ops',
    });
    expect([part.state, part.result]).toMatchObject(['succeeded', { refund: 're_1', amount_cents: 3000 }]);
    // Two refunds together may not exceed the charge: the provider refuses the rest for good.
    const rest = await submit('R3', 'refund', {
      charge_operation_id: 'O7',
      amount_cents: 3000,
      authorized_by: 'ops',
    });
    expect([rest.state, rest.error?.code]).toEqual(['failed', 'provider-refused']);
    expect(stub.stub.refundLedger().map((r) => r.amount_cents)).toEqual([3000]);
    expect(stub.stub.ledger()).toHaveLength(1);

    const exported = await submit('E1', 'export', { rows: 1000 });
    expect(exported.state).toBe('succeeded');
    expect(exported.result).toMatchObject({
      rows: 1000,
      bytes: expect.any(Number),
      sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    expect(service.worker!.tempBytes()).toBe(0);
  });
});
