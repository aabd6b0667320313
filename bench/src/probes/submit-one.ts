/**
 * @module bench/probes/submit-one
 * `sluice.submit()` awaited one at a time by one caller, the side-by-side scenario's enqueue shape:
 * submits per second and the process's CPU per submit. With `--against <dist/index.js>` it loads
 * that build too and alternates the two round by round in this one process, each round on a
 * fresh engine and store of its own, so both builds see the same minutes of this noisy machine.
 *
 *   node dist/probes/submit-one.js [--store pg|sqlite] [--ops 2000] [--rounds 3] [--against PATH]
 */

import { parseArgs } from 'node:util';
import { z } from 'zod';
import { alternate, freshStore, loadBuilds, quantile, roundRatios, type Sluice } from './load.js';

const { values } = parseArgs({
  options: {
    store: { type: 'string', default: 'pg' },
    ops: { type: 'string', default: '2000' },
    rounds: { type: 'string', default: '3' },
    against: { type: 'string' },
  },
});
const n = Number(values.ops);
const builds = await loadBuilds(values.against);
const input = z.object({ job: z.number().int(), amount_cents: z.number().int(), note: z.string() });
const payload = (job: number) => ({ job, amount_cents: 5000, note: 'a row of about 64 bytes' });

async function round(s: Sluice): Promise<{ rate: number; cpu: number }> {
  const store = freshStore(s, values.store, 'submit1');
  await store.migrate();
  const engine = new s.Sluice({ store });
  engine.define('bench.noop', { input, run: () => undefined });
  for (let i = 0; i < 200; i++)
    await engine.submit({ tenant: 'warm', id: `w${i}`, kind: 'bench.noop', input: payload(i) });
  const cpu = process.cpuUsage();
  const started = performance.now();
  for (let i = 0; i < n; i++)
    await engine.submit({ tenant: `t${i % 4}`, id: `j${i}`, kind: 'bench.noop', input: payload(i) });
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  await engine.close();
  return { rate: n / seconds, cpu: (used.user + used.system) / n };
}

const results = await alternate(builds, Number(values.rounds), round);
for (const [i, build] of builds.entries()) {
  const rates = results[i]!.map((r) => r.rate);
  const cpus = results[i]!.map((r) => r.cpu);
  console.log(
    `${build.label} ${values.store}: ${Math.round(quantile(rates, 0.5))} submits/s ` +
      `(${rates.map(Math.round).join(', ')}), CPU ${Math.round(quantile(cpus, 0.5))} µs/submit`,
  );
}
if (builds.length === 2)
  console.log(
    roundRatios(
      results[0]!.map((r) => r.rate),
      results[1]!.map((r) => r.rate),
    ),
  );
