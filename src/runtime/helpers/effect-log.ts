/**
 * @module runtime/helpers/effect-log
 * The structured log lines of `ctx.effect`. The attempt's logger already carries tenant,
 * operation, attempt and kind; each effect adds its name and its effect key (the provider
 * idempotency key, the thread that ties a log line to the journal row and to the provider's own
 * records). At debug, every effect's start and end; at info, the effects that did not complete. Never the input, the call's arguments or its result: they may hold personal or
 * payment data. A failure is logged by its code only, for the same reason (a provider's error
 * message may echo the request).
 */
import { ERROR_CODE } from '../../core/errors/code.js';
import type { LazyLog } from '../lazy-log.js';

export async function loggedEffect<T>(
  logs: LazyLog,
  name: string,
  /** Derived only when the lines are written: it is a hash, and the effect derives it anyway. */
  effectKey: () => string,
  run: () => Promise<T>,
): Promise<T> {
  if (!logs.isLevelEnabled('debug')) {
    if (!logs.isLevelEnabled('info')) return run();
    // At info, only the effects that did not complete: the key is what a person reconciling one
    // looks up at the provider.
    return run().catch((error: unknown) => {
      logs.log.info({ effect: name, effectKey: effectKey(), code: codeOf(error) }, 'effect did not complete');
      throw error;
    });
  }
  const effectLog = logs.log.child({ effect: name, effectKey: effectKey() });
  effectLog.debug('effect started');
  try {
    const result = await run();
    effectLog.debug('effect completed');
    return result;
  } catch (error) {
    effectLog.debug({ code: codeOf(error) }, 'effect did not complete');
    throw error;
  }
}

function codeOf(error: unknown): string {
  try {
    const code = (error as { code?: unknown } | null)?.code;
    return typeof code === 'string' && ERROR_CODE.test(code) ? code : 'unclassified-error';
  } catch {
    // A getter that throws: the line is still written, and the effect's error goes on as it was.
    return 'unclassified-error';
  }
}
