/**
 * The context helpers carry the attempt's deadline and cancellation into the outside world:
 * `ctx.exec` (a subprocess and its whole process group), `ctx.fetch` (a request whose
 * connection is torn down) and `ctx.pgQuery` (a statement stopped on the server). Each is cut off
 * at the deadline and on cancel, nothing they start outlives the attempt (its temporary folders
 * included), and effect log lines carry the effect key, never the input.
 *
 * Synchronisation is on events: a child reports its pids over a loopback socket, the HTTP server
 * sees the request and the connection close, the attempt ends. Where no event exists — a
 * PostgreSQL statement becoming active — the test polls the server's own view (pg_stat_activity).
 * The attempt timeouts below are configuration, never assertions.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer, type IncomingMessage } from 'node:http';
import { createServer as createNetServer, type Server as NetServer } from 'node:net';
import { dirname, join } from 'node:path';
import pg from 'pg';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  Ambiguous,
  deriveEffectKey,
  isAttemptTimeout,
  isCancelRequested,
  isDeadlineExceeded,
  isLeaseLost,
  isWorkerShutdown,
  type KindLimits,
  type Operation,
  type OperationContext,
  Permanent,
} from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { type Harness, harness } from '../helpers/engine.js';
import { usePostgres } from '../helpers/postgres.js';

/** Whether a process has stopped running: no /proc entry, or a zombie waiting to be reaped. */
function gone(pid: number): boolean {
  if (existsSync('/proc/self/stat')) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
      return state === 'Z' || state === 'X';
    } catch {
      return true;
    }
  }
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

/** A pino logger that keeps every line (debug and up), for checks on what is logged. */
function captureLogs(level: 'debug' | 'info' = 'debug') {
  const raw: string[] = [];
  const logger = pino({ level }, { write: (line: string) => void raw.push(line) });
  return { logger, raw, lines: () => raw.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

/** Defines kind `job` (input `{}`, one attempt unless told) that runs `run`. */
function job(h: Harness, run: (ctx: OperationContext) => Promise<unknown>, limits: KindLimits = {}) {
  h.sluice.define('job', {
    input: z.object({}),
    limits: { maxAttempts: 1, ...limits },
    run: async (_input, ctx) => (await run(ctx)) ?? null,
  });
  return {
    submit: (id: string, options: { deadlineMs?: number } = {}) =>
      h.sluice.submit({ tenant: 'North', id, kind: 'job', input: {}, ...options }),
    wait: (id: string) => h.sluice.wait({ tenant: 'North', id }),
  };
}

const lastErrorCode = (op: Operation) =>
  (op.error?.details as { lastError?: { code?: string } } | undefined)?.lastError?.code;

/**
 * A child (node) that starts a grandchild (`sleep 30`, same process group), then reports
 * `{pid, grandchild, cwd}` to the test over loopback. Modes: `hang` (runs until killed),
 * `ignore-term` (also ignores SIGTERM: only SIGKILL stops it).
 */
const CHILD = `
const { spawn } = require('node:child_process');
const net = require('node:net');
const [port, mode] = process.argv.slice(1);
if (mode === 'ignore-term') process.on('SIGTERM', () => {});
const grandchild = spawn('sleep', ['30'], { stdio: 'ignore' });
const socket = net.connect(Number(port), '127.0.0.1', () =>
  socket.end(JSON.stringify({ pid: process.pid, grandchild: grandchild.pid, cwd: process.cwd() })));
setInterval(() => {}, 1 << 30);
`;

interface Report {
  pid: number;
  grandchild: number;
  cwd: string;
}

/** The loopback server children report to; `next()` is the next report, in arrival order. */
async function reportServer() {
  const arrived: Report[] = [];
  const waiting: Array<(r: Report) => void> = [];
  const server: NetServer = createNetServer((socket) => {
    let data = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk) => {
      data += chunk;
    });
    socket.on('end', () => {
      socket.end();
      const report = JSON.parse(data) as Report;
      const waiter = waiting.shift();
      if (waiter) waiter(report);
      else arrived.push(report);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    next: () =>
      new Promise<Report>((resolve) => {
        const report = arrived.shift();
        if (report) resolve(report);
        else waiting.push(resolve);
      }),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

describe('ctx.exec', () => {
  let h: Harness | undefined;
  let closeReports: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
    await closeReports?.();
    closeReports = undefined;
  });

  it('kills the subprocess and its grandchild at the attempt timeout', async () => {
    h = await harness();
    const pidFile = join(h.dir, 'pids');
    let reason: unknown;
    const { submit, wait } = job(
      h,
      async (ctx) => {
        await ctx
          .exec('sh', ['-c', 'echo $$ > "$PIDS"; sleep 30 & echo $! >> "$PIDS"; wait'], {
            env: { ...process.env, PIDS: pidFile },
          })
          .catch((error) => {
            reason = error;
            throw error;
          });
      },
      { attemptTimeoutMs: 300 },
    );
    h.worker().start();
    await submit('T1');
    const op = await wait('T1');
    expect([op.state, lastErrorCode(op)]).toEqual(['dead', 'attempt-timeout']);
    expect(isAttemptTimeout(reason)).toBe(true);
    const pids = readFileSync(pidFile, 'utf8').trim().split('\n').map(Number);
    expect(pids).toHaveLength(2);
    // The shell was the leader; `sleep` its child, which a kill of the leader alone would orphan.
    expect(pids.map(gone)).toEqual([true, true]);
  });

  it.each([
    { trigger: 'cancel', mode: 'hang' },
    { trigger: 'cancel', mode: 'ignore-term' },
    { trigger: 'shutdown', mode: 'hang' },
    { trigger: 'lost lease', mode: 'hang' },
  ] as const)('$trigger stops the whole process group (child: $mode)', async ({ trigger, mode }) => {
    const logs = captureLogs();
    const clock = new FakeClock();
    h = await harness({ clock, sluice: { logger: logs.logger } });
    const reports = await reportServer();
    closeReports = reports.close;
    let reason: unknown;
    const { submit, wait } = job(
      h,
      async (ctx) => {
        if (ctx.attempt > 1 || reason !== undefined) return 'ran again';
        await ctx
          .exec(process.execPath, ['-e', CHILD, String(reports.port), mode], { killGraceMs: 200 })
          .catch((error) => {
            reason = error;
            throw error;
          });
      },
      { maxAttempts: 2 },
    );
    // One slot: the rescued operation cannot run again until this attempt has ended.
    const worker = h.worker({ leaseMs: 120_000, heartbeatMs: 60_000, slots: { default: 1 } });
    worker.start();
    await submit('C1');
    const report = await reports.next();
    expect([gone(report.pid), gone(report.grandchild)]).toEqual([false, false]);

    if (trigger === 'cancel') {
      expect((await h.sluice.cancel({ tenant: 'North', id: 'C1' })).cancel).toBe('requested');
      expect((await wait('C1')).state).toBe('cancelled');
      expect(isCancelRequested(reason)).toBe(true);
    } else if (trigger === 'shutdown') {
      await worker.stop({ graceMs: 0 });
      // Interrupted, not failed: back to the queue, to run again elsewhere.
      expect((await h.sluice.get({ tenant: 'North', id: 'C1' }))?.state).toBe('queued');
      expect(isWorkerShutdown(reason)).toBe(true);
    } else {
      // The worker is "paused" past its lease: a rescuer hands the operation to someone else.
      clock.advance(120_001);
      const abandoned = new Promise((resolve) => worker.once('attempt', (e) => resolve(e.report.outcome)));
      expect(await h.sluice.rescueExpiredLeases()).toBe(1);
      await worker.heartbeatNow();
      expect(await abandoned).toBe('abandoned');
      expect(isLeaseLost(reason)).toBe(true);
    }
    expect([gone(report.pid), gone(report.grandchild)]).toEqual([true, true]);
    const escalated = logs
      .lines()
      .some((l) => l.msg?.toString().includes('sending SIGKILL') && l.pid === report.pid);
    expect(escalated).toBe(mode === 'ignore-term');
  });

  it('stops a subprocess the handler did not await when the attempt ends, without an unhandled rejection', async () => {
    h = await harness();
    const reports = await reportServer();
    closeReports = reports.close;
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      const { submit, wait } = job(h, async (ctx) => {
        const reported = reports.next();
        void ctx.exec(process.execPath, ['-e', CHILD, String(reports.port), 'hang']);
        return reported; // returns while the child still runs
      });
      h.worker().start();
      await submit('F1');
      const op = await wait('F1');
      expect(op.state).toBe('succeeded');
      const report = op.result as unknown as Report;
      expect([gone(report.pid), gone(report.grandchild)]).toEqual([true, true]);
      // A rejection is reported after the microtask queue drains: let one macrotask pass.
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('keeps output up to maxOutputBytes: the limit itself whole, one byte more truncated and flagged', async () => {
    h = await harness();
    const mib = 1024 * 1024;
    const { submit, wait } = job(h, async (ctx) => {
      const summary = (r: Awaited<ReturnType<OperationContext['exec']>>) => ({
        code: r.code,
        stdout: [Buffer.byteLength(r.stdout), r.stdoutTruncated],
        stderr: [Buffer.byteLength(r.stderr), r.stderrTruncated],
      });
      const write = `process.stdout.write('o'.repeat(1000)); process.stderr.write('e'.repeat(1001))`;
      return {
        edge: summary(await ctx.exec(process.execPath, ['-e', write], { maxOutputBytes: 1000 })),
        atDefault: summary(await ctx.exec('head', ['-c', String(mib), '/dev/zero'])),
        overDefault: summary(await ctx.exec('head', ['-c', String(mib + 1), '/dev/zero'])),
        sample: (await ctx.exec(process.execPath, ['-e', write], { maxOutputBytes: 3 })).stdout,
      };
    });
    h.worker().start();
    await submit('O1');
    const op = await wait('O1');
    expect(op.state).toBe('succeeded');
    expect(op.result).toEqual({
      edge: { code: 0, stdout: [1000, false], stderr: [1000, true] },
      atDefault: { code: 0, stdout: [mib, false], stderr: [0, false] },
      overDefault: { code: 0, stdout: [mib, true], stderr: [0, false] },
      sample: 'ooo',
    });
  });

  it('streams output to a file in a temp folder (no cap but the temp budget), removed with the attempt', async () => {
    h = await harness();
    const bytes = 3 * 1024 * 1024;
    const { submit, wait } = job(h, async (ctx) => {
      const r = await ctx.exec('sh', ['-c', `head -c ${bytes} /dev/zero; echo oops >&2`], {
        stdout: 'file',
        maxOutputBytes: 10,
      });
      return {
        stdoutPath: r.stdoutPath,
        size: statSync(r.stdoutPath!).size,
        inMemory: r.stdout.length,
        truncated: r.stdoutTruncated,
        stderr: r.stderr,
        stderrPath: r.stderrPath,
      };
    });
    h.worker().start();
    await submit('F2');
    const op = await wait('F2');
    const result = op.result as { stdoutPath: string };
    expect(op.result).toEqual({
      stdoutPath: expect.stringContaining(join(h.dir, 'tmp')),
      size: bytes,
      inMemory: 0,
      truncated: false,
      stderr: 'oops\n',
      stderrPath: null,
    });
    expect(existsSync(dirname(result.stdoutPath))).toBe(false);
  });

  it.each(['success', 'error', 'timeout'] as const)(
    'on %s, the process group and the temp folders it worked in are gone when the attempt ends',
    async (ending) => {
      h = await harness();
      const report = join(h.dir, 'report');
      // The shell works in a temp folder and leaves a background member in its group; on
      // `timeout` it waits for it, otherwise it exits at once, leaving it running.
      const script = `pwd > "$R.tmp"; sleep 30 >/dev/null 2>&1 & echo $$ $! >> "$R.tmp"; mv "$R.tmp" "$R"; ${
        ending === 'timeout' ? 'wait' : 'exit 0'
      }`;
      const { submit, wait } = job(
        h,
        async (ctx) => {
          const r = await ctx.exec('sh', ['-c', script], {
            cwd: 'temp',
            stdout: 'file',
            env: { ...process.env, R: report },
          });
          if (ending === 'error') throw new Permanent('the export failed');
          return { code: r.code };
        },
        { attemptTimeoutMs: ending === 'timeout' ? 300 : 60_000 },
      );
      const worker = h.worker();
      worker.start();
      await submit('D1');
      const op = await wait('D1');
      expect(op.state).toBe({ success: 'succeeded', error: 'failed', timeout: 'dead' }[ending]);
      if (ending === 'timeout') expect(lastErrorCode(op)).toBe('attempt-timeout');
      const [cwd, pids] = readFileSync(report, 'utf8').trim().split('\n');
      const [shell, sleeper] = pids!.split(' ').map(Number);
      expect(cwd!.startsWith(worker.tempDirs.ownerDir)).toBe(true);
      expect([gone(shell!), gone(sleeper!)]).toEqual([true, true]);
      expect(existsSync(cwd!)).toBe(false);
      expect(readdirSync(worker.tempDirs.ownerDir)).toEqual([]);
    },
  );

  it('rejects with the spawn error for a program that does not exist', async () => {
    h = await harness();
    const { submit, wait } = job(h, async (ctx) => {
      const error = await ctx.exec('sluice-no-such-program', []).catch((e: NodeJS.ErrnoException) => e);
      return (error as NodeJS.ErrnoException).code;
    });
    h.worker().start();
    await submit('N1');
    expect((await wait('N1')).result).toBe('ENOENT');
  });
});

describe('ctx.fetch', () => {
  let h: Harness | undefined;
  let server: HttpServer | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve) ?? resolve(null));
    server = undefined;
  });

  /** A loopback server that accepts requests and never answers. */
  async function silentServer() {
    let onRequest!: (req: IncomingMessage) => void;
    const requested = new Promise<IncomingMessage>((resolve) => {
      onRequest = resolve;
    });
    server = createHttpServer((req) => onRequest(req));
    await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
    const address = server.address();
    const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}/slow`;
    // The server's view: the request arrived, then its connection was closed by the client.
    const closed = requested.then((req) => new Promise<void>((resolve) => req.socket.once('close', resolve)));
    return { url, requested, closed };
  }

  it.each([
    { by: 'attempt timeout', limits: { attemptTimeoutMs: 300 }, deadlineMs: undefined },
    { by: 'operation deadline', limits: {}, deadlineMs: 300 },
  ])(
    'aborts a request that gets no answer at the $by; the server sees the connection closed',
    async ({ by, limits, deadlineMs }) => {
      h = await harness();
      const slow = await silentServer();
      let reason: unknown;
      const { submit, wait } = job(
        h,
        async (ctx) => {
          await ctx.fetch(slow.url).catch((error) => {
            reason = error;
            throw error;
          });
        },
        limits,
      );
      h.worker().start();
      await submit('H1', { deadlineMs });
      await slow.closed;
      const op = await wait('H1');
      if (by === 'attempt timeout') {
        expect([op.state, lastErrorCode(op)]).toEqual(['dead', 'attempt-timeout']);
        expect(isAttemptTimeout(reason)).toBe(true);
      } else {
        expect([op.state, op.error?.code]).toEqual(['failed', 'deadline-exceeded']);
        expect(isDeadlineExceeded(reason)).toBe(true);
      }
    },
  );

  it("also stops on the caller's own signal, with the caller's reason; the attempt goes on", async () => {
    h = await harness();
    const slow = await silentServer();
    const { submit, wait } = job(h, async (ctx) => {
      const mine = new AbortController();
      const response = ctx.fetch(slow.url, { signal: mine.signal });
      await slow.requested;
      mine.abort(new Error('no longer needed'));
      const error = await response.catch((e: Error) => e);
      return { message: (error as Error).message, attemptAborted: ctx.signal.aborted };
    });
    h.worker().start();
    await submit('H2');
    await slow.closed;
    const op = await wait('H2');
    expect([op.state, op.result]).toEqual([
      'succeeded',
      { message: 'no longer needed', attemptAborted: false },
    ]);
  });
});

describe('ctx.effect logs', () => {
  let h: Harness | undefined;
  afterEach(async () => {
    await h?.close();
    h = undefined;
  });

  it('carry tenant, operation, attempt and the effect key, never the input', async () => {
    const logs = captureLogs();
    h = await harness({ sluice: { logger: logs.logger } });
    const secret = 'CARD-4242-4242-4242-SECRET';
    h.sluice.define('pay', {
      input: z.object({ card: z.string() }),
      async run(input, ctx) {
        const charge = await ctx.effect('charge', {
          call: async ({ key }) => ({ id: `ch_${key.slice(3, 9)}`, last4: input.card.slice(-4) }),
        });
        return { charge: charge.id };
      },
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'P1', kind: 'pay', input: { card: secret } });
    expect((await h.sluice.wait({ tenant: 'North', id: 'P1' })).state).toBe('succeeded');
    const effectLines = logs.lines().filter((l) => l.effect === 'charge');
    expect(effectLines.map((l) => l.msg)).toEqual(['effect started', 'effect completed']);
    for (const line of effectLines) {
      expect(line).toMatchObject({
        tenant: 'North',
        operation: 'P1',
        attempt: 1,
        kind: 'pay',
        effectKey: deriveEffectKey('North', 'P1', 'charge'),
      });
    }
    expect(logs.raw.join('')).not.toContain(secret);
  });

  it('at info, name the effects that did not complete, with their key', async () => {
    const logs = captureLogs('info');
    h = await harness({ sluice: { logger: logs.logger } });
    h.sluice.define('pay', {
      input: z.object({}),
      limits: { maxAttempts: 1 },
      async run(_input, ctx) {
        await ctx.effect('fine', { call: async () => 1 });
        return ctx.effect('charge', {
          call: async () => {
            throw new Ambiguous('timed out after sending');
          },
        });
      },
    });
    h.worker().start();
    await h.sluice.submit({ tenant: 'North', id: 'P2', kind: 'pay', input: {} });
    await h.sluice.wait({ tenant: 'North', id: 'P2' });
    const effectLines = logs.lines().filter((l) => l.effect !== undefined);
    expect(effectLines).toEqual([
      expect.objectContaining({
        msg: 'effect did not complete',
        effect: 'charge',
        effectKey: deriveEffectKey('North', 'P2', 'charge'),
        code: 'ambiguous-outcome',
        operation: 'P2',
      }),
    ]);
  });
});

describe('ctx.pgQuery', () => {
  const db = usePostgres();
  let admin: pg.Client;
  let h: Harness | undefined;
  const opened: Array<pg.Pool | pg.Client> = [];

  beforeAll(async () => {
    admin = await db.client();
  });
  afterAll(async () => {
    await admin?.end();
  });
  afterEach(async () => {
    await h?.close();
    h = undefined;
    await Promise.all(opened.splice(0).map((c) => c.end()));
  });

  const pool = (max = 2) => {
    const p = new pg.Pool({ connectionString: db.url, max });
    opened.push(p);
    return p;
  };
  const client = async () => {
    const c = await db.client();
    opened.push(c);
    return c;
  };
  const marker = () => `sluice_probe_${randomBytes(4).toString('hex')}`;

  /** Statements now executing on the server whose text carries `tag`. */
  async function activeWith(tag: string): Promise<number> {
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity
        WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE ('%' || $1 || '%')`,
      [tag],
    );
    return rows[0]!.n;
  }

  /** Waits until the server runs a statement tagged `tag` (polls pg_stat_activity; fails after 20 s). */
  async function untilActive(tag: string): Promise<void> {
    const giveUp = performance.now() + 20_000;
    while ((await activeWith(tag)) === 0) {
      if (performance.now() > giveUp) throw new Error(`no active statement tagged ${tag}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  it('cuts a statement off at the attempt timeout: the server no longer runs it', async () => {
    h = await harness();
    const onPool = pool();
    const tag = marker();
    let reason: unknown;
    const { submit, wait } = job(
      h,
      async (ctx) => {
        await ctx.pgQuery(onPool, `SELECT pg_sleep(30) /* ${tag} */`).catch((error) => {
          reason = error;
          throw error;
        });
      },
      { attemptTimeoutMs: 1500 },
    );
    h.worker().start();
    await submit('Q1');
    await untilActive(tag);
    const op = await wait('Q1');
    expect([op.state, lastErrorCode(op)]).toEqual(['dead', 'attempt-timeout']);
    expect(isAttemptTimeout(reason)).toBe(true);
    expect(await activeWith(tag)).toBe(0);
  });

  it.each(['pool', 'client'] as const)(
    'sluice.cancel stops a running statement on the server (on a %s), long before its timeout',
    async (via) => {
      h = await harness();
      const target = via === 'pool' ? pool() : await client();
      const tag = marker();
      let reason: unknown;
      const { submit, wait } = job(h, async (ctx) => {
        await ctx.pgQuery(target, `SELECT pg_sleep(30) /* ${tag} */`).catch((error) => {
          reason = error;
          throw error;
        });
      });
      h.worker().start();
      await submit('Q2');
      await untilActive(tag);
      expect((await h.sluice.cancel({ tenant: 'North', id: 'Q2' })).cancel).toBe('requested');
      const op = await wait('Q2');
      expect(op.state).toBe('cancelled');
      expect(isCancelRequested(reason)).toBe(true);
      expect(await activeWith(tag)).toBe(0);
      // Still usable: the caller's client is back outside any transaction; the pool serves on.
      if (via === 'client') expect((target as pg.Client).getTransactionStatus()).toBe('I');
      expect((await target.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    },
  );

  const SETTING = `SELECT setting AS ms FROM pg_settings WHERE name = 'statement_timeout'`;

  it('sets statement_timeout from the time left with SET LOCAL: nothing leaks into the pool', async () => {
    h = await harness();
    const one = pool(1); // one connection: the handler's and the check's
    const before = (await one.query<{ ms: string }>(SETTING)).rows[0]!.ms;
    const { submit, wait } = job(
      h,
      async (ctx) => Number((await ctx.pgQuery<{ ms: string }>(one, SETTING)).rows[0]!.ms),
      { attemptTimeoutMs: 60_000 },
    );
    h.worker().start();
    await submit('Q3');
    const applied = (await wait('Q3')).result as number;
    expect(applied).toBeGreaterThan(0);
    expect(applied).toBeLessThanOrEqual(60_000);
    expect((await one.query<{ ms: string }>(SETTING)).rows[0]!.ms).toBe(before);
  });

  it('counts the time left after the wait for a pooled connection, not before it', async () => {
    h = await harness();
    const one = pool(1);
    const held = await one.connect(); // the pool's only connection, taken before the attempt
    const { submit, wait } = job(
      h,
      async (ctx) => Number((await ctx.pgQuery<{ ms: string }>(one, SETTING)).rows[0]!.ms),
      { attemptTimeoutMs: 4000 },
    );
    h.worker().start();
    await submit('Q4');
    // Two seconds of the attempt's four pass while its query waits for the connection: the
    // time passing is what is under test.
    const since = performance.now();
    while (one.waitingCount === 0 || performance.now() - since < 2000)
      await new Promise((resolve) => setTimeout(resolve, 20));
    held.release();
    const applied = (await wait('Q4')).result as number;
    expect(applied).toBeGreaterThan(0);
    expect(applied).toBeLessThanOrEqual(2000);
  });

  it("keeps a tighter session timeout, and inside the caller's transaction puts the previous value back", async () => {
    h = await harness();
    const c = await client();
    await c.query('SET statement_timeout = 250');
    const { submit, wait } = job(
      h,
      async (ctx) => {
        // The session's own 250 ms is tighter than the time left: it is kept, and its error is
        // the statement's own (the attempt's time is not up).
        const tight = await ctx.pgQuery(c, 'SELECT pg_sleep(30)').then(
          () => 'finished',
          (e: { code?: string }) => e.code,
        );
        const afterTight = [c.getTransactionStatus(), (await c.query<{ ms: string }>(SETTING)).rows[0]!.ms];
        await c.query('BEGIN');
        await c.query('SET LOCAL statement_timeout = 0');
        const inside = Number((await ctx.pgQuery<{ ms: string }>(c, SETTING)).rows[0]!.ms);
        const restored = [c.getTransactionStatus(), (await c.query<{ ms: string }>(SETTING)).rows[0]!.ms];
        await c.query('COMMIT');
        return { tight, afterTight, inside, restored };
      },
      { attemptTimeoutMs: 60_000 },
    );
    h.worker().start();
    await submit('Q4');
    const op = await wait('Q4');
    const result = op.result as { inside: number };
    expect(op.result).toEqual({
      tight: '57014',
      afterTight: ['I', '250'],
      inside: result.inside,
      restored: ['T', '0'],
    });
    expect(result.inside).toBeGreaterThan(250);
    expect(result.inside).toBeLessThanOrEqual(60_000);
    expect((await c.query<{ ms: string }>(SETTING)).rows[0]!.ms).toBe('250');
  });
});
