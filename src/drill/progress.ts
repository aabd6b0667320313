/**
 * @module drill/progress
 * The live progress display on stderr while the drill runs: on a terminal one line redrawn in
 * place after every sample; otherwise (CI logs) a plain line every few seconds and at each phase
 * change. The line itself is the report module's `formatProgress`.
 */
import { formatProgress, progressCountsFromSample } from './report/index.js';
import type { Sample } from './types.js';

export interface ProgressSource {
  phase: string;
  elapsedMs: number;
  totalMs: number;
  accepted: number;
  succeeded: number;
  kills: number;
  sample: Sample | undefined;
}

export class Progress {
  private lastPlain = 0;
  private lastPhase = '';
  private drawn = false;

  constructor(
    private readonly out: NodeJS.WritableStream & { isTTY?: boolean; columns?: number },
    private readonly plainEveryMs = 5000,
  ) {}

  update(s: ProgressSource): void {
    const counts = s.sample
      ? progressCountsFromSample(s.sample)
      : { running: 0, waiting: 0, providerCharges: 0, rejected: 0 };
    const width = this.out.isTTY ? Math.max(40, (this.out.columns ?? 100) - 1) : 120;
    const line = formatProgress(
      {
        phase: s.phase,
        elapsedMs: s.elapsedMs,
        totalMs: s.totalMs,
        accepted: s.accepted,
        succeeded: s.succeeded,
        kills: s.kills,
        ...counts,
      },
      width,
    );
    if (this.out.isTTY) {
      this.write(`\r\x1b[2K${line}`);
      this.drawn = true;
      return;
    }
    const now = performance.now();
    if (s.phase !== this.lastPhase || now - this.lastPlain >= this.plainEveryMs) {
      this.write(`${line}\n`);
      this.lastPlain = now;
      this.lastPhase = s.phase;
    }
  }

  /** A message on its own line (the progress line is redrawn after it). */
  note(text: string): void {
    this.end();
    this.write(`${text}\n`);
  }

  /** Writes, never throwing: a progress line lost to a closed stream must not stop the drill. */
  private write(text: string): void {
    try {
      this.out.write(text);
    } catch {
      // the stream is gone; the drill goes on and reports through its files
    }
  }

  /** Leaves the progress line in place and moves to a new line. */
  end(): void {
    if (this.drawn) this.write('\n');
    this.drawn = false;
  }
}
