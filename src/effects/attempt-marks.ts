/**
 * @module effects/attempt-marks
 * An attempt's `committed` marks (step 5 of the protocol), written with its next write instead of
 * waited for one by one.
 *
 * Awaited, a mark was a transaction of its own between the provider's answer and the handler's
 * next step; with one effect per operation a worker's round was three store calls (the begins,
 * the marks, the ends with the next claim), each a commit. Here the mark joins the journal's next
 * batch, and the handler has its result at once. If the handler ends before that batch leaves
 * (a handler that returns after its last effect, in the same turn of the event loop), the end
 * takes its marks back and writes them first, in its own transaction: the round is two calls.
 *
 * What the protocol promises does not change: the mark is durable before the operation completes
 * (before, or in the same commit as, the end). A crash before it is written is crash point C2 —
 * the provider has the effect, the journal says `pending` — which the next attempt recovers under
 * the same key, as it always had to for a crash between the answer and the mark's commit.
 *
 * A mark written alone and refused means the lease is lost: the attempt is stopped, as when the
 * heartbeat finds it so. One whose write failed is written again with the end; if the first write
 * did take effect, the second is refused by the effect's state and changes nothing.
 */
import { LeaseLost } from '../core/errors/index.js';
import { JsonText } from '../core/json-text.js';
import type { Queued } from '../runtime/batcher.js';
import type { EffectMarkParams, LeaseRef } from '../store/types.js';
import type { Journal } from './run-effect.js';

interface Sent {
  params: EffectMarkParams;
  written: Promise<boolean>;
}

export class AttemptMarks {
  #sent: Sent[] = [];
  #taken: Array<Queued<EffectMarkParams, boolean>> = [];
  #over = false;
  /** Stopped when a mark written alone is refused (the lease is lost) while the handler runs. */
  stop: { abort(reason: unknown): void } | undefined;
  /**
   * Told of a `committed` mark made after the attempt's end (a call that outlived it) and refused:
   * the provider has the effect, the journal says `pending`, and the next attempt recovers it.
   */
  onLateRefusal: ((effect: string) => void) | undefined;

  constructor(
    private readonly journal: Journal,
    private readonly lease: LeaseRef,
  ) {}

  /**
   * Queues a mark on the journal's next batch; the handler does not wait for it. A `committed`
   * mark's result is copied as JSON text now (core/json-text.ts), which the store keeps as it is:
   * the handler may change the object it was given before the mark is written (the effect
   * protocol hands it the text already made). (A `failed` or `absent` mark comes here only when its
   * own write failed: it is tried again with the end.)
   */
  add(mark: EffectMarkParams): void {
    const params =
      mark.state === 'committed' && !(mark.result instanceof JsonText)
        ? { ...mark, result: new JsonText(JSON.stringify(mark.result ?? null)) }
        : mark;
    // Made once the attempt had ended: no end carries it, and no handler waits for it.
    const late = this.#over;
    const written = this.journal.mark(params);
    written.then(
      (ok) => {
        if (ok || mark.state !== 'committed') return;
        // A `failed` or `absent` mark here is a second try of one whose write failed, perhaps after
        // its commit: refused, it may only have been written already, which is no lost lease.
        if (!this.#over) this.stop?.abort(new LeaseLost(this.lease.id));
        else if (late) this.onLateRefusal?.(mark.name);
      },
      () => {
        if (late && mark.state === 'committed') this.onLateRefusal?.(mark.name);
      },
    );
    this.#sent.push({ params, written });
  }

  /** Whether any mark was made: an attempt without effects has nothing to carry or wait for. */
  get made(): boolean {
    return this.#sent.length > 0;
  }

  /**
   * The result of an effect of this attempt that committed, read as the journal would return it:
   * step 1 of a second `ctx.effect` of the same name, whose mark may not be written yet.
   */
  committed(name: string): { result: unknown } | undefined {
    const sent = this.#sent.find((s) => s.params.name === name && s.params.state === 'committed');
    return sent && { result: (sent.params as { result: JsonText }).result.value() };
  }

  /**
   * Step 1 for an effect whose refusal (`failed`, `absent`) this attempt is still writing, because
   * its own write failed: the journal may say `pending` yet. A `failed` one is the answer, as the
   * journal's would be: returned, and nothing is sent again. An `absent` one is waited for: written,
   * the journal says so; failed again, it is dropped, never carried by the end. The handler is
   * about to send under the key again, and a refusal written after that send would say "did not
   * happen" over a request whose outcome may be unknown.
   */
  async refusal(name: string): Promise<Extract<EffectMarkParams, { state: 'failed' }> | undefined> {
    // A copy, latest first: another effect's call may drop its own marks while this one waits.
    for (const s of [...this.#sent].reverse()) {
      if (s.params.name !== name || s.params.state === 'committed') continue;
      if (s.params.state === 'failed') return s.params;
      const landed = await s.written.then(
        () => true,
        () => false,
      );
      const at = this.#sent.indexOf(s);
      if (!landed && at >= 0) this.#sent.splice(at, 1);
    }
    return undefined;
  }

  /**
   * The marks the end must carry: those still queued, taken back from the batch, and those whose
   * write failed. Waits for the ones in flight first, so the end never overtakes a mark. With
   * `alone`, nothing is taken back: every mark is written before the end is (crash point C3's
   * test needs the journal to say `committed` while the operation still runs).
   */
  async forEnd(alone: boolean): Promise<EffectMarkParams[]> {
    this.#taken = alone ? [] : this.journal.takeMarks(this.lease);
    const taken = new Set(this.#taken.map((q) => q.item));
    const failed: EffectMarkParams[] = [];
    for (const s of this.#sent) {
      if (taken.has(s.params)) continue;
      try {
        await s.written;
      } catch {
        failed.push(s.params);
      }
    }
    return [...taken, ...failed];
  }

  /** The end was written (or refused): the marks it took are answered with it. */
  ended(accepted: boolean): void {
    this.#over = true;
    for (const q of this.#taken.splice(0)) q.resolve(accepted);
  }

  /** The attempt writes nothing more (a lost lease, a simulated crash): queued marks are dropped. */
  drop(): void {
    this.#over = true;
    if (this.#sent.length === 0) return;
    for (const q of this.journal.takeMarks(this.lease)) q.resolve(false);
  }
}
