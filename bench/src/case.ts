/**
 * @module bench/case
 * Runs one case (one scenario on one store or variant) once, in this process, and prints its
 * result as one line `@@result <json>` on stdout. The runner (main.ts) starts a fresh process per
 * case run, so no run inherits another's heap, JIT state, connections or open files.
 *
 *   node dist/case.js '<CaseSpec as JSON>'
 */
import { admissionCaps } from './cases/admission-caps.js';
import { backlog } from './cases/backlog.js';
import { processOps, submitOne } from './cases/engine-cases.js';
import { httpSubmit } from './cases/http-submit.js';
import { limitPg, limitSqlite } from './cases/limits.js';
import { peerShape } from './cases/peer-shapes.js';
import type { CaseResult, CaseSpec } from './cases/types.js';

const RUNNERS: Record<CaseSpec['scenario'], (spec: CaseSpec) => Promise<CaseResult>> = {
  'limit-pg': limitPg,
  'limit-sqlite': limitSqlite,
  'submit-one': submitOne,
  'process-effect': processOps,
  'process-plain': processOps,
  'enqueue-one': peerShape,
  'enqueue-batch': peerShape,
  'process-defaults': peerShape,
  'process-tuned': peerShape,
  latency: peerShape,
  'http-submit': httpSubmit,
  'admission-caps': admissionCaps,
  backlog,
};

const spec = JSON.parse(process.argv[2] ?? '{}') as CaseSpec;
const run = RUNNERS[spec.scenario];
if (!run) {
  console.error(`unknown scenario ${spec.scenario}`);
  process.exit(2);
}
try {
  const result = await run(spec);
  process.stdout.write(`@@result ${JSON.stringify(result)}\n`);
  process.exit(0);
} catch (error) {
  console.error(error);
  process.exit(1);
}
