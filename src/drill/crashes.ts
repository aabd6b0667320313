/**
 * @module drill/crashes
 * The crash phase: worker processes SIGKILLed at random moments, and replacements started with
 * failpoints armed so that some of them kill themselves inside an effect — after the provider
 * committed a charge but before the journal says so (C2, `effect.after-call`), or after the
 * effects committed but before the operation completes (C3, `operation.before-complete`). A
 * random SIGKILL lands wherever the worker is (claiming, inside an export's subprocess, writing
 * the journal); a failpoint lands exactly in the window the effect protocol exists for.
 *
 * Every dead worker is replaced at once (deployment.ts). When the phase ends, incarnations whose
 * failpoint has not fired yet are replaced gracefully by clean ones, so recovery runs without
 * armed failpoints.
 */
import { LOAD } from './config.js';
import type { Deployment } from './deployment.js';

/** The failpoints replacements are started with, in turn ('' for none). `{n}`: the nth hit. */
const ARMED = [
  'effect.after-call=kill@{n}',
  'operation.before-complete=kill@{n}',
  '',
  'effect.after-call=kill@{n}',
];

export class Crashes {
  private timer: NodeJS.Timeout | undefined;
  private armedCount = 0;
  private readonly pending = new Set<Promise<void>>();

  constructor(private readonly deployment: Deployment) {}

  /** Starts killing: at least one kill in `phaseMs`, then at `LOAD.killsPerSec` on average. */
  start(phaseMs: number): void {
    this.deployment.failpointsForRestart = () => {
      const spec = ARMED[this.armedCount++ % ARMED.length]!;
      return spec.replace('{n}', String(2 + Math.floor(Math.random() * 3)));
    };
    const mean = 1000 / LOAD.killsPerSec;
    const schedule = (delay: number) => {
      this.timer = setTimeout(() => {
        this.killOne();
        schedule(mean * (0.5 + Math.random()));
      }, delay);
    };
    // The first kill early in the phase, so even a short phase has one.
    schedule(Math.min(phaseMs / 4, mean) * Math.random());
  }

  private killOne(): void {
    // Armed incarnations are left to their failpoint, so it lands inside an effect as planned.
    const live = this.deployment.liveWorkers();
    const unarmed = live.filter((i) => i.failpoints === '');
    const pool = unarmed.length > 0 ? unarmed : live;
    if (pool.length === 0) return;
    const victim = pool[Math.floor(Math.random() * pool.length)]!;
    const p = this.deployment.kill(victim).catch(() => {});
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  /** Stops killing; replaces armed incarnations with clean ones; resolves once all are running. */
  async stop(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.deployment.failpointsForRestart = () => '';
    await Promise.all([...this.pending]);
    await this.deployment.settled();
    const armed = this.deployment.liveWorkers().filter((i) => i.failpoints !== '');
    await Promise.all(armed.map((i) => this.deployment.replace(i)));
    await this.deployment.settled();
  }
}
