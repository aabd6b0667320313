/**
 * @module bench/profile-summary
 * Reads a V8 CPU profile (`node --cpu-prof`) and says where the time went: idle (waiting on I/O,
 * i.e. on the database), garbage collection, and busy time by package or Sluice module, both
 * "self" (the sampled function itself) and "on stack" (the share of samples with that package
 * anywhere on the stack: what the work of that layer costs, callees included).
 *
 *   node dist/profile-summary.js <file.cpuprofile> [--from <µs>] [--to <µs>]
 *
 * `--from`/`--to` cut the profile to a window on the same monotonic clock (the process phase a
 * case reports), leaving out start-up and shutdown.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

interface CallFrame {
  functionName: string;
  url: string;
  lineNumber: number;
}
interface ProfileNode {
  id: number;
  callFrame: CallFrame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** The package or Sluice module a frame belongs to. */
export function groupOf(frame: CallFrame): string {
  const { url, functionName } = frame;
  if (!url) return functionName.startsWith('(') ? functionName : '(V8 builtins)';
  if (url.startsWith('node:')) return 'node internals';
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) {
    const rest = url.slice(nm + 14).split('/');
    return rest[0]!.startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0]!;
  }
  const dist = url.indexOf('/dist/');
  if (dist >= 0 && !url.includes('/bench/dist/')) {
    const module = url.slice(dist + 6).replace(/\.js$/, '');
    return `sluice ${module.split('/').slice(0, -1).join('/') || module}`;
  }
  if (url.includes('/bench/')) return 'bench harness';
  return url;
}

export function summarizeProfile(path: string, window?: { fromUs?: number; toUs?: number }): string {
  const p = JSON.parse(readFileSync(path, 'utf8')) as CpuProfile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

  const self = new Map<string, number>();
  const onStack = new Map<string, number>();
  const fnSelf = new Map<string, number>();
  let total = 0;
  let t = p.startTime;
  for (let i = 0; i < p.samples.length; i++) {
    t += p.timeDeltas[i] ?? 0;
    // A sample stands for the time until the next one.
    const dt = p.timeDeltas[i + 1] ?? 0;
    if (window?.fromUs !== undefined && t < window.fromUs) continue;
    if (window?.toUs !== undefined && t > window.toUs) break;
    const leaf = byId.get(p.samples[i]!)!;
    total += dt;
    const g = groupOf(leaf.callFrame);
    self.set(g, (self.get(g) ?? 0) + dt);
    const f = leaf.callFrame;
    const fkey = `${f.functionName || '(anonymous)'}  ${g}${f.url ? `  ${f.url.split('/').slice(-2).join('/')}:${f.lineNumber + 1}` : ''}`;
    fnSelf.set(fkey, (fnSelf.get(fkey) ?? 0) + dt);
    const seen = new Set<string>();
    for (let id: number | undefined = leaf.id; id !== undefined; id = parent.get(id)) {
      const node = byId.get(id)!;
      if (node.callFrame.functionName === '(root)') break;
      seen.add(groupOf(node.callFrame));
    }
    for (const s of seen) onStack.set(s, (onStack.get(s) ?? 0) + dt);
  }
  const share = (x: number) => `${((x / total) * 100).toFixed(1).padStart(5)}%`;
  const ms = (x: number) => `${(x / 1000).toFixed(0)} ms`;
  const idle = self.get('(idle)') ?? 0;
  const gc = self.get('(garbage collector)') ?? 0;
  const busy = total - idle;
  const top = (m: Map<string, number>, k: number) => [...m].sort((a, b) => b[1] - a[1]).slice(0, k);
  const lines = [
    `profile ${path}`,
    `window ${ms(total)}: idle ${share(idle)} (waiting on I/O), busy ${share(busy)} (of which GC ${share(gc)}, ` +
      `"(program)" ${share(self.get('(program)') ?? 0)})`,
    '',
    'self time by package / Sluice module (share of the window):',
    ...top(self, 16).map(([g, x]) => `  ${share(x)}  ${g}`),
    '',
    // The harness is left out here: its store-call counter wraps every store call.
    'on stack (the work of a layer, callees included):',
    ...top(onStack, 16)
      .filter(([g]) => !g.startsWith('(') && g !== 'bench harness')
      .map(([g, x]) => `  ${share(x)}  ${g}`),
    '',
    'top functions by self time:',
    ...top(fnSelf, 20).map(([f, x]) => `  ${share(x)}  ${f}`),
  ];
  return lines.join('\n');
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [file, ...rest] = process.argv.slice(2);
  if (!file) {
    console.error('usage: node dist/profile-summary.js <file.cpuprofile> [--from µs] [--to µs]');
    process.exit(2);
  }
  const at = (flag: string) => {
    const i = rest.indexOf(flag);
    return i >= 0 ? Number(rest[i + 1]) : undefined;
  };
  console.log(summarizeProfile(file, { fromUs: at('--from'), toUs: at('--to') }));
}
