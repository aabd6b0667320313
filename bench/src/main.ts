/**
 * @module bench/main
 * `npm run bench`: runs the selected cases, each in a fresh process, round after round (every
 * case once per round, `--runs` rounds), so a slow spell of the shared machine hits every case
 * of a round rather than all runs of one; then prints one table (medians, ranges, ratios to the
 * limits measured in the same rounds) and the measured costs per operation, and writes both with
 * the raw results to bench/results/.
 *
 * PostgreSQL: one fresh database per bench run (`DATABASE_URL` names the server), dropped at the
 * end, a schema per case run inside it. SQLite: a fresh temp folder per case run.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type CaseResult, type CaseSpec, ONCE_PER_RUN, type ScenarioName } from './cases/types.js';
import { type Options, parseArgs } from './lib/args.js';
import { renderBaselineTable } from './lib/baseline-report.js';
import type { StoreName } from './lib/engine.js';
import { describeLoad, loadBetween, type MachineLoad, sample } from './lib/machine.js';
import { describePeerRuns, isPeer, PEER_CASES, renderPeerSection, SIDE_BY_SIDE } from './lib/peer-report.js';
import { createBenchDatabase, type ServerInfo, serverInfo } from './lib/pg-admin.js';
import {
  buildRows,
  type CaseDef,
  type Collected,
  caseKey,
  renderCosts,
  renderRuns,
  renderTable,
  renderTarget,
} from './lib/report.js';
import { summarizeProfile } from './profile-summary.js';

const here = dirname(fileURLToPath(import.meta.url));
const benchRoot = join(here, '..');
const repoRoot = join(benchRoot, '..');

/** A Sluice scenario on each store: the variant names the store. */
const onBothStores = (...scenarios: ScenarioName[]): CaseDef[] =>
  scenarios.flatMap((scenario) => [
    { scenario, variant: 'sqlite', store: 'sqlite' as const },
    { scenario, variant: 'pg', store: 'pg' as const },
  ]);

function casesOf(o: Options): CaseDef[] {
  const all: CaseDef[] = [
    { scenario: 'limit-pg', variant: '1', store: 'pg' },
    { scenario: 'limit-pg', variant: '16', store: 'pg' },
    { scenario: 'limit-sqlite', variant: 'FULL', store: 'sqlite' },
    { scenario: 'limit-sqlite', variant: 'NORMAL', store: 'sqlite' },
    ...onBothStores('submit-one', 'process-effect', 'process-plain'),
    ...PEER_CASES,
    ...onBothStores('http-submit', 'admission-caps', 'backlog'),
  ];
  return all.filter(
    (c) => o.scenarios.includes(c.scenario) && o.stores.includes(c.store) && (o.peers || !isPeer(c)),
  );
}

const SHORT: Record<ScenarioName, string> = {
  'limit-pg': 'lpg',
  'limit-sqlite': 'lsq',
  'submit-one': 'one',
  'process-effect': 'eff',
  'process-plain': 'pln',
  'enqueue-one': 'e1',
  'enqueue-batch': 'eb',
  'process-defaults': 'pd',
  'process-tuned': 'pt',
  latency: 'lat',
  'http-submit': 'http',
  'admission-caps': 'cap',
  backlog: 'blg',
};

function runCase(spec: CaseSpec, nodeArgs: string[] = []): Promise<CaseResult | undefined> {
  const label = `${caseKey(spec)}${spec.phase === 'all' ? '' : ` (${spec.phase})`}`;
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...nodeArgs, join(here, 'case.js'), JSON.stringify(spec)], {
      stdio: ['ignore', 'pipe', 'pipe'],
      cwd: benchRoot,
    });
    let result: CaseResult | undefined;
    let out = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      out += chunk;
      let nl = out.indexOf('\n');
      while (nl >= 0) {
        const line = out.slice(0, nl);
        out = out.slice(nl + 1);
        if (line.startsWith('@@result ')) result = JSON.parse(line.slice(9)) as CaseResult;
        else if (line.trim()) process.stderr.write(`  [${label}] ${line}\n`);
        nl = out.indexOf('\n');
      }
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      for (const line of chunk.split('\n')) if (line.trim()) process.stderr.write(`  [${label}] ${line}\n`);
    });
    child.on('close', (code) => {
      if (code !== 0) process.stderr.write(`  [${label}] failed (exit ${code})\n`);
      resolve(code === 0 ? result : undefined);
    });
  });
}

function git(args: string[]): string {
  try {
    return execFileSync('git', args, {
      cwd: repoRoot,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  } catch {
    return '?';
  }
}

function header(
  o: Options,
  pgInfo: ServerInfo | undefined,
  sqliteVersion: string | undefined,
  load: string[],
) {
  const cpu = cpus();
  let distBuilt = '?';
  try {
    distBuilt = statSync(join(repoRoot, 'dist/index.js')).mtime.toISOString();
  } catch {}
  const dirty = git(['status', '--porcelain', '--', 'src']).split('\n').filter(Boolean).length;
  const lines = [
    `- when: ${new Date().toISOString()}; commit ${git(['rev-parse', '--short', 'HEAD'])}` +
      `${dirty ? ` with ${dirty} uncommitted change(s) in src/` : ''}; dist built ${distBuilt}`,
    `- machine: ${cpu.length} × ${cpu[0]?.model ?? '?'}, Node ${process.version}` +
      `${
        pgInfo
          ? `, PostgreSQL ${pgInfo.version} (${Object.entries(pgInfo.settings)
              .map(([k, v]) => `${k}=${v}`)
              .join(', ')})`
          : ''
      }` +
      `${sqliteVersion ? `, SQLite ${sqliteVersion}` : ''}`,
    `- load average (1/5/15 min): ${load.join(' → ')}`,
    `- runs per case: ${o.runs} (medians; spread = half the range over the median); process-* operations: ` +
      `${o.ops ?? (o.quick ? 1000 : 10_000)}, ${o.submitters} concurrent submitters, ${o.tenants} tenant(s)${o.quick ? '; --quick' : ''}`,
    `- worker: ${o.slots === undefined ? 'default settings (sluice.worker())' : `WHAT-IF, not the defaults: ${o.slots} slots`}` +
      `; PostgreSQL pool: ${o.poolSize === undefined ? 'default' : `WHAT-IF, not the default: ${o.poolSize}`}`,
    ...(o.scenarios.some((s) => SIDE_BY_SIDE.includes(s)) ? [describePeerRuns(o)] : []),
  ];
  return lines.join('\n');
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  try {
    statSync(join(repoRoot, 'dist/index.js'));
  } catch {
    throw new Error('../dist is missing: build Sluice first (npm run build at the repository root)');
  }
  const cases = casesOf(o);
  if (cases.length === 0 && !o.profile) throw new Error('no case selected');
  const usesPg = cases.some((c) => c.store === 'pg') || (o.profile && o.stores.includes('pg'));
  const load = [
    loadavg()
      .map((x) => x.toFixed(2))
      .join('/'),
  ];

  let database: Awaited<ReturnType<typeof createBenchDatabase>> | undefined;
  let pgInfo: ServerInfo | undefined;
  const dirs: string[] = [];
  const cleanup = async () => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
    await database?.drop().catch((e) => console.error(`could not drop the bench database: ${e}`));
  };
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      void cleanup().finally(() => process.exit(130));
    });
  }
  try {
    if (usesPg) {
      pgInfo = await serverInfo(o.serverUrl);
      database = await createBenchDatabase(o.serverUrl);
      console.error(
        `PostgreSQL ${pgInfo.version}: bench database ${new URL(database.url).pathname.slice(1)}`,
      );
    }
    const spec = (
      c: CaseDef,
      round: number,
      phase: CaseSpec['phase'] = 'all',
      dir?: string,
      tag?: string,
    ): CaseSpec => {
      const d = dir ?? mkdtempSync(join(tmpdir(), 'sluice-bench-'));
      if (!dir) dirs.push(d);
      return {
        scenario: c.scenario,
        variant: c.variant,
        quick: o.quick,
        ops: c.scenario.startsWith('process-') ? o.ops : undefined,
        tenants: o.tenants,
        submitters: o.submitters,
        slots: o.slots,
        poolSize: o.poolSize,
        serverUrl: o.serverUrl,
        databaseUrl: database?.url ?? '',
        dir: d,
        tag:
          tag ??
          `b${round}_${SHORT[c.scenario]}_${c.variant.toLowerCase()}_${randomBytes(3).toString('hex')}`,
        phase,
        backlog: c.scenario === 'backlog' ? o.backlog : undefined,
      };
    };

    const results: Collected = new Map(cases.map((c) => [caseKey(c), []]));
    const machine = new Map<string, MachineLoad[]>(cases.map((c) => [caseKey(c), []]));
    for (let round = 0; round < o.runs; round++) {
      for (const c of cases) {
        if (round > 0 && ONCE_PER_RUN.has(c.scenario)) continue;
        const started = performance.now();
        const s = spec(c, round);
        const before = sample();
        const r = await runCase(s);
        const load = loadBetween(before, sample());
        rmSync(s.dir, { recursive: true, force: true });
        results.get(caseKey(c))![round] = r;
        machine.get(caseKey(c))![round] = load;
        const figs = r
          ? Object.entries(r.figures)
              .map(([k, v]) =>
                /^p\d+$/.test(k)
                  ? `${k} ${v.toFixed(2)} ms`
                  : `${k} ${Math.round(v).toLocaleString('en-US')}/s`,
              )
              .join(', ')
          : 'FAILED';
        console.error(
          `run ${round + 1}/${o.runs}  ${caseKey(c).padEnd(22)} ${figs}  (${((performance.now() - started) / 1000).toFixed(1)} s; ` +
            `${describeLoad(load)})`,
        );
      }
    }
    load.push(
      loadavg()
        .map((x) => x.toFixed(2))
        .join('/'),
    );

    let profileText = '';
    if (o.profile) {
      const profDir = join(benchRoot, 'results', 'profiles');
      mkdirSync(profDir, { recursive: true });
      for (const store of o.stores) {
        const c: CaseDef = { scenario: 'process-effect', variant: store, store: store as StoreName };
        const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-'));
        dirs.push(dir);
        const tag = `bp_${store}_${randomBytes(3).toString('hex')}`;
        const sub = await runCase(spec(c, 0, 'submit', dir, tag));
        if (!sub) continue;
        const name = `worker-${store}-${Date.now()}.cpuprofile`;
        const proc = await runCase({ ...spec(c, 0, 'process', dir, tag), sampleWaits: true }, [
          '--cpu-prof',
          '--cpu-prof-dir',
          profDir,
          '--cpu-prof-name',
          name,
        ]);
        if (!proc?.window) continue;
        const text = summarizeProfile(join(profDir, name), {
          fromUs: proc.window.startUs,
          toUs: proc.window.endUs,
        });
        const waits = Object.entries(proc.info)
          .filter(([k]) => k.startsWith('waits.'))
          .map(([k, v]) => `  ${Number(v).toFixed(2).padStart(6)}  ${k.slice(6)}`);
        const perOp = Object.entries(proc.perOp)
          .filter(([k]) => k.startsWith('process.'))
          .map(([k, v]) => `  ${k.slice(8)} ${Number(v).toFixed(3)}`);
        profileText +=
          `\n### CPU profile of the worker, process-effect on ${store === 'pg' ? 'PostgreSQL' : 'SQLite'} ` +
          `(${Math.round(proc.figures.process ?? 0).toLocaleString('en-US')} ops/s under the profiler)\n\n` +
          '```\n' +
          text +
          (waits.length > 0
            ? `\n\nserver backends of the worker, sampled every 10 ms (mean number in each state):\n${waits.join('\n')}`
            : '') +
          `\n\nper operation in this run:\n${perOp.join('\n')}` +
          '\n```\n';
      }
    }

    const sqliteVersion = [...results.values()]
      .flat()
      .map((r) => r?.info.sqlite)
      .find((v) => typeof v === 'string') as string | undefined;
    const rows = buildRows(cases, results, o.submitters, o.slots);
    const baselineTable = renderBaselineTable(cases, results);
    const report = [
      '## Sluice benchmark',
      '',
      header(o, pgInfo, sqliteVersion, load),
      '',
      renderTable(rows),
      '',
      renderTarget(rows, results),
      '',
      ...renderPeerSection(cases, results),
      ...(baselineTable
        ? ['### Read against a baseline measured in the same case run', '', baselineTable, '']
        : []),
      '### Measured costs per operation (medians)',
      '',
      renderCosts(cases, results),
      '',
      '### Run by run, with the load of the shared machine during each run',
      '',
      renderRuns(cases, results, machine),
      profileText,
    ].join('\n');
    console.log(report);

    const resultsDir = join(benchRoot, 'results');
    mkdirSync(resultsDir, { recursive: true });
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    writeFileSync(join(resultsDir, `${stamp}.md`), `${report}\n`);
    writeFileSync(
      join(resultsDir, `${stamp}.json`),
      `${JSON.stringify({ options: o, pg: pgInfo, load, results: Object.fromEntries(results), machine: Object.fromEntries(machine) }, null, 2)}\n`,
    );
    console.error(`\nwritten: bench/results/${stamp}.md and .json`);
    const failed = [...results.values()].flat().filter((r) => r === undefined).length;
    if (failed > 0) process.exitCode = 1;
  } finally {
    await cleanup();
  }
}

// Old profiles pile up; keep the last 20.
function pruneProfiles() {
  const dir = join(benchRoot, 'results', 'profiles');
  try {
    const files = readdirSync(dir)
      .filter((f) => f.endsWith('.cpuprofile'))
      .map((f) => ({ f, t: statSync(join(dir, f)).mtimeMs }))
      .sort((a, b) => b.t - a.t);
    for (const { f } of files.slice(20)) rmSync(join(dir, f));
  } catch {}
}

main()
  .then(pruneProfiles)
  .catch((error) => {
    console.error(error instanceof Error ? error.message : error);
    process.exit(1);
  });
