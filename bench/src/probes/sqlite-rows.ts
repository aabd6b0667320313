/**
 * @module bench/probes/sqlite-rows
 * What reading a row costs better-sqlite3, on the claim's own update: a file of queued operations
 * (submitted through the engine, `synchronous = NORMAL` so the disk stays out of it), then rounds
 * of 32 claims' updates and their commit, three forms taking turns: the whole row read as an
 * object (`RETURNING *`), the same read as an array (raw mode, what the store does), and `seq`
 * alone (the floor: the update without the row). Prints each form's median round.
 *
 *   node dist/probes/sqlite-rows.js [--ops 72000] [--rounds 90]
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { Database } from '../lib/drivers.js';
import { loadSluice, quantile } from './load.js';

const { values } = parseArgs({
  options: {
    ops: { type: 'string', default: '72000' },
    rounds: { type: 'string', default: '90' },
  },
});
const ops = Number(values.ops);
const rounds = Number(values.rounds);
const BATCH = 32;
/** Below the default cap of 10,000 waiting operations a tenant. */
const TENANTS = Math.max(1, Math.ceil(ops / 9000));

const { sluice } = await loadSluice();
const path = join(mkdtempSync(join(tmpdir(), 'sluice-rows-')), 'sluice.db');
const engine = new sluice.Sluice({ store: sluice.sqliteStore({ path, synchronous: 'NORMAL' }) });
engine.define('bench.noop', {
  input: z.object({ job: z.number().int(), note: z.string() }),
  run: () => undefined,
});
await engine.migrate();
for (let from = 0; from < ops; from += 500) {
  await Promise.all(
    Array.from({ length: Math.min(500, ops - from) }, (_, i) =>
      engine.submit({
        tenant: `t${(from + i) % TENANTS}`,
        id: `o${from + i}`,
        kind: 'bench.noop',
        input: { job: from + i, note: 'a row of about 64 bytes' },
      }),
    ),
  );
}
await engine.close();

const db = new Database(path);
db.pragma('journal_mode = WAL');
db.pragma('synchronous = NORMAL');
const seqs = db
  .prepare(`SELECT seq FROM operations WHERE state = 'queued' ORDER BY seq`)
  .pluck()
  .all() as number[];
const update = (returning: string) =>
  db.prepare(
    `UPDATE operations SET state = 'running', attempt = attempt + 1, epoch = epoch + 1, started_at = ?,
       lease_owner = ?, lease_expires_at = ?, updated_at = ? WHERE seq = ? RETURNING ${returning}`,
  );
const forms: Array<[string, ReturnType<typeof update>]> = [
  ['the row as an object', update('*')],
  ['the row as an array', update('*').raw(true)],
  ['seq alone', update('seq')],
];
const times = forms.map((): number[] => []);
const now = Date.now();
let next = 0;
for (let r = 0; r < rounds; r++) {
  for (let k = 0; k < forms.length; k++) {
    const i = (k + r) % forms.length;
    const batch = seqs.slice(next, next + BATCH);
    next += BATCH;
    if (batch.length < BATCH) throw new Error(`${ops} operations are too few for ${rounds} rounds`);
    const stmt = forms[i]![1];
    const t0 = process.hrtime.bigint();
    db.transaction(() => {
      for (const seq of batch) stmt.get(now, 'probe', now + 30_000, now, seq);
    })();
    times[i]!.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
}
// The first rounds warm up the statements.
const warm = Math.min(10, Math.floor(rounds / 4));
console.log(
  `${BATCH} claims' updates and their commit, ${rounds - warm} rounds each, medians: ` +
    forms.map(([label], i) => `${label} ${Math.round(quantile(times[i]!.slice(warm), 0.5))} µs`).join(', '),
);
