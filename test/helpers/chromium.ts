/**
 * Debian's Chromium for the browser tests, driven by playwright-core (never a browser download).
 * It is not on a fresh machine unless installed (`apt-get install -y chromium`, as .ci/run does):
 * without it the browser tests are skipped, and say why; in CI a missing browser fails the run.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { BrowserContext } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';
export const hasChromium = existsSync(CHROMIUM);

/** Throws in CI when the browser is missing: a browser test must not pass by being skipped there. */
export function requireChromiumInCi(what: string): void {
  if (process.env.CI === 'true' && !hasChromium)
    throw new Error(`${CHROMIUM} is missing: .ci/run installs Debian's chromium for ${what}`);
}

/** A headless Chromium with a profile of its own under `dir`, quiet on the network. */
export async function launchChromium(
  dir: string,
  viewport: { width: number; height: number },
): Promise<BrowserContext> {
  const { chromium } = await import('playwright-core');
  return chromium.launchPersistentContext(join(dir, 'profile'), {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport,
  });
}
