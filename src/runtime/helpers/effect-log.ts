/**
 * @module runtime/helpers/effect-log
 * The structured log lines of `ctx.effect`. The attempt's logger already carries tenant,
 * operation, attempt and kind; each effect adds its name and its effect key (the provider
 * idempotency key, the thread that ties a log line to the journal row and to the provider's own
 * records). Never the input, the call's arguments or its result: they may hold personal or
 * payment data. A failure is logged by its code only, for the same reason (a provider's error
 * message may echo the request).
 */
import type { LazyLog } from '../lazy-log.js';

export async function loggedEffect<T>(
  logs: LazyLog,
  name: string,
  /** Derived only when the lines are written: it is a hash, and the effect derives it anyway. */
  effectKey: () => string,
  run: () => Promise<T>,
): Promise<T> {
  if (!logs.isLevelEnabled('debug')) return run();
  const effectLog = logs.log.child({ effect: name, effectKey: effectKey() });
  effectLog.debug('effect started');
  try {
    const result = await run();
    effectLog.debug('effect completed');
    return result;
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    effectLog.debug(
      { code: typeof code === 'string' ? code : 'unclassified-error' },
      'effect did not complete',
    );
    throw error;
  }
}
