/** A promise a test opens by hand: lets a handler block at a known point without sleeping. */
export class Gate {
  private opened!: () => void;
  private reached!: () => void;
  readonly opens = new Promise<void>((resolve) => {
    this.opened = resolve;
  });
  /** Resolves when the code under test reaches the gate. */
  readonly arrived = new Promise<void>((resolve) => {
    this.reached = resolve;
  });
  /** Called by the code under test: signals arrival, then waits (or stops on abort). */
  wait(signal?: AbortSignal): Promise<void> {
    this.reached();
    if (!signal) return this.opens;
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      signal.addEventListener('abort', () => reject(signal.reason), { once: true });
      void this.opens.then(resolve);
    });
  }
  open(): void {
    this.opened();
  }
}
