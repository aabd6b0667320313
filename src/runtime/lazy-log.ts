/**
 * @module runtime/lazy-log
 * An attempt's child logger (tenant, operation, attempt, kind), made on first use. pino
 * serialises a child's bindings when it makes the child, about half a microsecond, 2.5% of a
 * SQLite drain's CPU when every attempt made one; at the default level (`warn`) most attempts
 * write no line at all (docs/benchmarks.md).
 */
import type { Bindings, Level, Logger } from 'pino';

export class LazyLog {
  readonly #parent: Logger;
  readonly #bindings: Bindings;
  #log: Logger | undefined;

  constructor(parent: Logger, bindings: Bindings) {
    this.#parent = parent;
    this.#bindings = bindings;
  }

  get log(): Logger {
    this.#log ??= this.#parent.child(this.#bindings);
    return this.#log;
  }

  /** Whether a line at `level` would be written, asked without making the child. */
  isLevelEnabled(level: Level): boolean {
    return (this.#log ?? this.#parent).isLevelEnabled(level);
  }
}
