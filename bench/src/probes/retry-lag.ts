/**
 * @module bench/probes/retry-lag
 * How late a retry starts after its back-off has passed, with the worker at its defaults (poll
 * 500 ms). Operations fail once (`Retryable`) with a back-off of `--backoff-ms` (full jitter: the
 * delay is drawn below it); the probe reads each first attempt's end and second attempt's start
 * and the delay drawn (`retryDelayMs`) from the attempt history, and prints the lag (second
 * start − first end − delay; the history's times are in whole milliseconds) per build,
 * `--against` alternating round by round.
 *
 *   node dist/probes/retry-lag.js [--store sqlite|pg] [--ops 20] [--rounds 4] [--backoff-ms 100] [--against …]
 */
import { parseArgs } from 'node:util';
import { alternate, freshStore, loadBuilds, quantile, type Sluice } from './load.js';

const { values } = parseArgs({
  options: {
    store: { type: 'string', default: 'sqlite' },
    ops: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '4' },
    'backoff-ms': { type: 'string', default: '100' },
    against: { type: 'string' },
  },
});
const ops = Number(values.ops);
const backoffMs = Number(values['backoff-ms']);

const any = {
  '~standard': { version: 1 as const, vendor: 'probe', validate: (value: unknown) => ({ value }) },
};

async function round(s: Sluice): Promise<number[]> {
  // Every operation retries once: far over the service-wide retry budget, which is not measured here.
  const engine = new s.Sluice({ store: freshStore(s, values.store!, 'retrylag'), retryBudget: false });
  const failedOnce = new Set<string>();
  engine.define('probe.flaky', {
    input: any,
    limits: { backoff: { baseMs: backoffMs, capMs: backoffMs } },
    run(_input, ctx) {
      if (failedOnce.has(ctx.id)) return null;
      failedOnce.add(ctx.id);
      throw new s.Retryable('once');
    },
  });
  await engine.migrate();
  const worker = engine.worker();
  worker.start();
  const lags: number[] = [];
  // One at a time, so that each retry's lag is its own and not a queue's.
  for (let i = 0; i < ops; i++) {
    const ref = { tenant: 't', id: `o${i}` };
    await engine.submit({ ...ref, kind: 'probe.flaky', input: {} });
    await engine.wait(ref, { timeoutMs: 10_000, pollMs: 5 });
    const op = await engine.get(ref, { include: ['attempts'] });
    const [first, second] = op!.attempts!;
    const gap = Date.parse(second!.startedAt) - Date.parse(first!.endedAt);
    lags.push(gap - (first!.retryDelayMs ?? 0));
  }
  await engine.close();
  return lags;
}

const builds = await loadBuilds(values.against);
const results = await alternate(builds, Number(values.rounds), round);
console.log(
  `retry-lag on ${values.store}: ${ops} operations a round failing once, back-off below ${backoffMs} ms`,
);
builds.forEach((b, i) => {
  const lags = results[i]!.flat();
  console.log(
    `${b.label}: the retry started after the failure, beyond its delay: p50 ${quantile(lags, 0.5).toFixed(1)} ms, ` +
      `p90 ${quantile(lags, 0.9).toFixed(1)} ms, max ${Math.max(...lags).toFixed(1)} ms`,
  );
});
