/**
 * A store whose every method call goes through `around` first, for tests that make a real store
 * fail, hang or answer late: `around` returns what the call answers, calling `call()` for the
 * real one when it wants it.
 */
import type { Store } from '../../src/store/store.js';

export function aroundStore(
  store: Store,
  around: (method: string, call: () => unknown, args: unknown[]) => unknown,
): Store {
  return new Proxy(store, {
    get(target, property, receiver) {
      const real = Reflect.get(target, property, receiver);
      if (typeof real !== 'function') return real;
      return (...args: unknown[]) => around(String(property), () => real.apply(target, args), args);
    },
  });
}
