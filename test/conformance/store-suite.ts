/**
 * @module test/conformance/store-suite
 * The store conformance suite: one set of cases every `Store` driver must pass (River's
 * `riverdriver/riverdrivertest/`). It calls the Store methods directly, never the engine, on a
 * fresh, migrated, empty store per case whose clock is a `FakeClock`: every time the store
 * stamps is predictable and no case sleeps.
 *
 * A driver's test file runs it:
 * ```ts
 * describeStoreConformance('sqlite', async () => {
 *   const clock = new FakeClock();
 *   const store = sqliteStore({ path: tempFile(), clock });
 *   await store.migrate();
 *   return { store, clock, cleanup: () => store.close() };
 * });
 * ```
 * A case a driver genuinely cannot pass is skipped by name with its reason (Hono's
 * `common.case.test.ts`); a skip that names no case fails the suite, so skips cannot go stale.
 * After every case the queue counters are compared with the true counts of the store.
 */
import { describe, expect, it } from 'vitest';
import { admissionCases } from './cases/admission.js';
import { batchCases } from './cases/batches.js';
import { closedCases } from './cases/closed.js';
import { effectCases } from './cases/effects.js';
import { finishCases } from './cases/finish.js';
import { identityCases } from './cases/identity.js';
import { leaseCases } from './cases/leases.js';
import { operatorCases } from './cases/operator.js';
import { schedulingCases } from './cases/scheduling.js';
import {
  type ConformanceSkip,
  expectCountersTrue,
  type StoreFactory,
  type StoreFixture,
} from './fixtures.js';

export type { ConformanceSkip, StoreFactory, StoreFixture } from './fixtures.js';

/** How case files declare their cases: groups (`describe`) of cases that each get a fresh store. */
export interface CaseRegistry {
  group(name: string, body: (g: CaseRegistry) => void): void;
  /** A case that closes its store returns 'closed': the counters cannot be checked after it. */
  // biome-ignore lint/suspicious/noConfusingVoidType: a case's body returns nothing, or 'closed'.
  test(name: string, fn: (fx: StoreFixture) => Promise<void | 'closed'>): void;
}

export interface ConformanceOptions {
  /** Cases this driver skips, each with its reason. */
  skip?: ConformanceSkip[];
}

/**
 * Declares the conformance suite for one driver.
 *
 * @param name the driver, as shown by the reporter (`Store conformance: sqlite`)
 * @param factory creates a fresh, migrated, empty store with an injected `FakeClock`
 */
export function describeStoreConformance(
  name: string,
  factory: StoreFactory,
  options: ConformanceOptions = {},
): void {
  const skips = options.skip ?? [];
  const declared = new Set<string>();

  const registry = (path: string[]): CaseRegistry => ({
    group(groupName, body) {
      describe(groupName, () => body(registry([...path, groupName])));
    },
    test(caseName, fn) {
      const fullName = [...path, caseName].join(' > ');
      declared.add(fullName);
      const skip = skips.find((s) => s.tests.includes(fullName));
      it(caseName, async (ctx) => {
        if (skip) ctx.skip(`${name}: ${skip.reason}`);
        const fx = await factory();
        try {
          if ((await fn(fx)) !== 'closed') await expectCountersTrue(fx.store);
        } finally {
          await fx.cleanup();
        }
      });
    },
  });

  describe(`Store conformance: ${name}`, () => {
    const root = registry([]);
    identityCases(root);
    leaseCases(root);
    effectCases(root);
    finishCases(root);
    operatorCases(root);
    schedulingCases(root);
    admissionCases(root);
    batchCases(root);
    closedCases(root);

    it('every skip names a case of the suite and gives a reason', () => {
      for (const skip of skips) {
        expect(skip.reason.trim(), 'a skip without a reason').not.toBe('');
        for (const test of skip.tests) expect([...declared], `skip names no case: ${test}`).toContain(test);
      }
    });
  });
}
