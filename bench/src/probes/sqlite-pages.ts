/**
 * @module bench/probes/sqlite-pages
 * What a SQLite commit costs by the pages it dirties: transactions that each update one row in
 * each of K tables (so K pages, K WAL frames), K taking turns within a round, on a fresh WAL file
 * per K, with the driver Sluice loads. Prints commits/s per K and round, then the medians, under
 * the `--synchronous` given (`FULL`, Sluice's default: a WAL fsync per commit; `NORMAL`: none,
 * so the frames' writes and the checkpoints stand out).
 *
 * A submit dirties ~5.5 pages (the operation, its `(tenant, id)` key, the ready index, the
 * tenant's queue row, the class row) where the single-row commit loop dirties one or two: this
 * says what those pages cost on their own.
 *
 *   node dist/probes/sqlite-pages.js [--pages 1,2,4,6] [--commits 3000] [--rounds 5] [--synchronous FULL]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { Database } from '../lib/drivers.js';
import { quantile } from './load.js';

const { values } = parseArgs({
  options: {
    pages: { type: 'string', default: '1,2,4,6' },
    commits: { type: 'string', default: '3000' },
    rounds: { type: 'string', default: '5' },
    synchronous: { type: 'string', default: 'FULL' },
  },
});
const pages = values.pages.split(',').map((k) => z.coerce.number().int().min(1).max(64).parse(k));
const commits = z.coerce.number().int().min(100).parse(values.commits);
const rounds = z.coerce.number().int().min(1).parse(values.rounds);
const synchronous = z.enum(['FULL', 'NORMAL']).parse(values.synchronous);
const dir = mkdtempSync(join(tmpdir(), 'sluice-pages-'));

/** Commits/s of `commits` transactions that each dirty `k` pages, after 300 untimed. */
function commitRate(k: number): number {
  const path = join(dir, `k${k}.db`);
  for (const suffix of ['', '-wal', '-shm']) rmSync(path + suffix, { force: true });
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${synchronous}`);
  const updates = Array.from({ length: k }, (_, i) => {
    db.exec(`CREATE TABLE t${i} (id INTEGER PRIMARY KEY, n INTEGER NOT NULL, pad TEXT NOT NULL)`);
    db.prepare(`INSERT INTO t${i} VALUES (1, 0, ?)`).run('x'.repeat(100));
    return db.prepare(`UPDATE t${i} SET n = n + 1 WHERE id = 1`);
  });
  const commit = db.transaction(() => {
    for (const update of updates) update.run();
  });
  for (let i = 0; i < 300; i++) commit.immediate();
  const start = process.hrtime.bigint();
  for (let i = 0; i < commits; i++) commit.immediate();
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  db.close();
  return commits / seconds;
}

const rates = new Map<number, number[]>(pages.map((k) => [k, []]));
for (let round = 1; round <= rounds; round++) {
  // The order turns each round, so no K always runs first (or last) in a round.
  const order = round % 2 ? pages : [...pages].reverse();
  for (const k of order) rates.get(k)!.push(commitRate(k));
  console.log(
    `round ${round}: ${pages.map((k) => `${k}p ${Math.round(rates.get(k)!.at(-1)!)}/s`).join(', ')}`,
  );
}
const median = (k: number) => quantile(rates.get(k)!, 0.5);
const first = pages[0]!;
/** What each page past the first K's costs a commit, from the medians' times. */
const perPage = (k: number) => (1e6 / median(k) - 1e6 / median(first)) / (k - first);
console.log(
  `synchronous=${synchronous}, medians: ${pages
    .map(
      (k) =>
        `${k} ${k === 1 ? 'page' : 'pages'} ${Math.round(median(k))}/s` +
        (k === first ? '' : ` (${perPage(k).toFixed(1)} µs a page more than ${first})`),
    )
    .join(', ')}`,
);
rmSync(dir, { recursive: true, force: true });
