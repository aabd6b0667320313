/**
 * @module bench/lib/args
 * The command line of `npm run bench`.
 */
import { SCENARIOS, type ScenarioName } from '../cases/types.js';
import type { StoreName } from './engine.js';
import { DEFAULT_DATABASE_URL } from './pg-admin.js';

export interface Options {
  quick: boolean;
  runs: number;
  scenarios: ScenarioName[];
  stores: StoreName[];
  /** Operations of the process-* scenarios (default 10,000, side by side 20,000; fewer with --quick). */
  ops: number | undefined;
  tenants: number;
  submitters: number;
  profile: boolean;
  limits: boolean;
  /** Run the peer queues (graphile-worker, pg-boss, BullMQ) beside Sluice's side-by-side cases. */
  peers: boolean;
  /** What-if: worker slots per class (default: the engine's). */
  slots: number | undefined;
  /** What-if: the PostgreSQL store's pool size (default: the store's). */
  poolSize: number | undefined;
  serverUrl: string;
  /** backlog: waiting operations (default 1,000,000; 20,000 with --quick). */
  backlog: number | undefined;
}

export const USAGE = `usage: npm run bench -- [options]

  --quick              fewer operations and one run per case (a smoke run)
  --scenario NAME      run only these (repeat, or comma-separate): ${SCENARIOS.join(', ')}
  --store sqlite|pg    only this store (repeatable); default both
  --runs N             runs per case (default 3; 1 with --quick; 0 with --profile: the profile only)
  --ops N              operations of the process-* scenarios (default 10000, process-defaults and
                       process-tuned 20000; with --quick 1000 and 2000)
  --tenants N          spread the operations over N tenants (default 1)
  --submitters N       concurrent submitters in the process-* submit phase (default 16)
  --profile            also CPU-profile the worker of process-effect (node --cpu-prof), once per store
  --no-limits          do not add the limit scenarios the ratios need
  --no-peers           side-by-side scenarios: Sluice only, without graphile-worker, pg-boss, BullMQ
  --slots N            what-if: worker slots per class (not the default: the table says so)
  --pool-size N        what-if: the PostgreSQL store's pool size (not the default)
  --backlog N          waiting operations of the backlog scenario (default 1000000; 20000 with
                       --quick); it runs in the first round only
  DATABASE_URL         the PostgreSQL server (default ${DEFAULT_DATABASE_URL}); a fresh database
                       is created per bench run and dropped after it
  REDIS_URL            BullMQ's Redis (default redis://127.0.0.1:6379); a key prefix per case run,
                       obliterated after it`;

export function parseArgs(argv: string[]): Options {
  const o: Options = {
    quick: false,
    runs: Number.NaN,
    scenarios: [],
    stores: [],
    ops: undefined,
    tenants: 1,
    submitters: 16,
    profile: false,
    limits: true,
    peers: true,
    slots: undefined,
    poolSize: undefined,
    serverUrl: process.env.DATABASE_URL || DEFAULT_DATABASE_URL,
    backlog: undefined,
  };
  const int = (name: string, v: string | undefined, min = 1): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min) throw new Error(`${name} needs an integer ≥ ${min}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const [flag, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a];
    const value = () => inline ?? argv[++i];
    switch (flag) {
      case '--quick':
        o.quick = true;
        break;
      case '--scenario':
        for (const s of (value() ?? '').split(',').filter(Boolean)) {
          if (!(SCENARIOS as readonly string[]).includes(s))
            throw new Error(`unknown scenario ${s}\n${USAGE}`);
          o.scenarios.push(s as ScenarioName);
        }
        break;
      case '--store': {
        const s = value();
        if (s !== 'sqlite' && s !== 'pg') throw new Error(`--store is sqlite or pg\n${USAGE}`);
        o.stores.push(s);
        break;
      }
      case '--runs':
        o.runs = int('--runs', value(), 0);
        break;
      case '--ops':
        o.ops = int('--ops', value());
        break;
      case '--tenants':
        o.tenants = int('--tenants', value());
        break;
      case '--submitters':
        o.submitters = int('--submitters', value());
        break;
      case '--slots':
        o.slots = int('--slots', value());
        break;
      case '--pool-size':
        o.poolSize = int('--pool-size', value());
        break;
      case '--profile':
        o.profile = true;
        break;
      case '--backlog':
        o.backlog = int('--backlog', value());
        break;
      case '--no-limits':
        o.limits = false;
        break;
      case '--peers':
        o.peers = true;
        break;
      case '--no-peers':
        o.peers = false;
        break;
      case '--help':
      case '-h':
        console.log(USAGE);
        process.exit(0);
        break;
      default:
        throw new Error(`unknown option ${a}\n${USAGE}`);
    }
  }
  if (Number.isNaN(o.runs)) o.runs = o.quick ? 1 : 3;
  if (o.stores.length === 0) o.stores = ['sqlite', 'pg'];
  if (o.scenarios.length === 0) o.scenarios = [...SCENARIOS];
  if (o.limits) {
    if (o.stores.includes('pg') && !o.scenarios.includes('limit-pg')) o.scenarios.unshift('limit-pg');
    if (o.stores.includes('sqlite') && !o.scenarios.includes('limit-sqlite'))
      o.scenarios.unshift('limit-sqlite');
  }
  return o;
}
