/**
 * The dashboard in Debian's Chromium, against a real server on a SQLite file with a worker: an
 * operator signs in with the admin key, reads the queues, lists every tenant's dead operations,
 * opens one and redrives it, then redrives the rest from the listing, and settles a
 * reconciliation with what the provider shows; a tenant signs in with its own key and reads its usage and a charge's journal; a
 * live view shows work submitted after it was read. An id and an input written as markup stay
 * text (no script of theirs runs), a wrong key is answered on the page, and the page requests
 * nothing but its own server. In CI (.ci/run installs the browser) a missing Chromium is a
 * failure; elsewhere the block is skipped, and says why.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { Ambiguous, Retryable } from '../../src/core/errors/index.js';
import { CHROMIUM, hasChromium, launchChromium, requireChromiumInCi } from '../helpers/chromium.js';
import { KEYS, type Rig, rig } from './rig.js';

requireChromiumInCi("the dashboard's browser test");

/** What the page's globals are read for (the project's tsconfig has no DOM lib). */
type Browser = { sessionStorage: { length: number }; __pwned?: number };

/** An id a careless page would render as an element whose handler runs. */
const MARKUP_ID = '<svg/onload=window.__pwned=1>';
const MARKUP_INPUT = '<script>window.__pwned=2</script>';

describe.skipIf(!hasChromium)(`the dashboard in Chromium (skipped when ${CHROMIUM} is not installed)`, () => {
  let r: Rig;
  let base: string;
  let dir: string;
  let context: BrowserContext;
  const requests: string[] = [];
  const pageErrors: string[] = [];
  const failed: string[] = [];

  beforeAll(async () => {
    r = await rig({
      sluice: { retryBudget: false },
      define(sluice) {
        // Its charge timed out after sending, past the provider's retention: it waits for a person.
        sluice.define('uncertain', {
          input: z.object({}),
          limits: { backoff: { baseMs: 0, capMs: 0 } },
          run: (_input, ctx) =>
            ctx.effect('charge', {
              retentionMs: 1,
              call: async () => {
                throw new Ambiguous('timed out after sending');
              },
            }),
        });
        sluice.define('flaky', {
          input: z.object({ note: z.string() }),
          limits: { maxAttempts: 1 },
          run: async () => {
            throw new Retryable('the upstream answered 503');
          },
        });
      },
    });
    base = await r.listen();
    const { sluice } = r.h;
    const worker = r.h.worker();
    worker.start();
    await sluice.submit({
      tenant: 'north',
      id: 'paid',
      kind: 'charge',
      input: { invoice: 7, amount_cents: 5000 },
    });
    await sluice.submit({ tenant: 'north', id: MARKUP_ID, kind: 'flaky', input: { note: MARKUP_INPUT } });
    await sluice.submit({ tenant: 'south', id: 'south-dead', kind: 'flaky', input: { note: 'n' } });
    await sluice.submit({ tenant: 'north', id: 'unsure', kind: 'uncertain', input: {} });
    expect((await sluice.wait({ tenant: 'north', id: 'paid' }, { timeoutMs: 20_000 })).state).toBe(
      'succeeded',
    );
    for (const [tenant, id] of [
      ['north', MARKUP_ID],
      ['south', 'south-dead'],
    ] as const)
      expect((await sluice.wait({ tenant, id }, { timeoutMs: 20_000 })).state).toBe('dead');
    expect((await sluice.wait({ tenant: 'north', id: 'unsure' }, { timeoutMs: 20_000 })).state).toBe(
      'needs_reconciliation',
    );
    await worker.stop();
    // Work that waits: south's note is due in ten minutes.
    await sluice.submit({
      tenant: 'south',
      id: 'later',
      kind: 'note',
      input: { text: 'x' },
      delayMs: 600_000,
    });

    dir = await mkdtemp(join(tmpdir(), 'sluice-dashboard-browser-'));
    context = await launchChromium(dir, { width: 1200, height: 900 });
  }, 60_000);

  afterAll(async () => {
    await context?.close();
    await r?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function open(): Promise<Page> {
    const page = await context.newPage();
    page.on('request', (request) => requests.push(request.url()));
    page.on('response', (response) => {
      if (response.status() >= 400) failed.push(`${response.status()} ${response.url()}`);
    });
    page.on('pageerror', (error) => pageErrors.push(String(error)));
    page.on('console', (message) => {
      if (message.type() === 'error') pageErrors.push(message.text());
    });
    await page.goto(`${base}/dashboard`, { waitUntil: 'load' });
    return page;
  }

  async function signIn(page: Page, key: string): Promise<void> {
    await page.locator('#sign-in').waitFor({ state: 'visible' });
    await page.fill('#key', key);
    await page.click('#sign-in button[type=submit]');
  }

  it('shows a wrong key as the API answered it, and stays signed out', async () => {
    const page = await open();
    await signIn(page, 'not-a-key');
    await expect.poll(() => page.textContent('#problem')).toContain('unauthorized');
    expect(await page.isVisible('#sign-in')).toBe(true);
    expect(await page.evaluate(() => (globalThis as unknown as Browser).sessionStorage.length)).toBe(0);
    await page.close();
  });

  it("lets an admin read the queues, list every tenant's dead operations, open one as text, and redrive it", async () => {
    const page = await open();
    await signIn(page, KEYS.admin);
    await page.locator('#who').filter({ hasText: 'admin key' }).waitFor();
    // The queues, as the API has them: south's note waits in bulk.
    const rows = page.locator('table').nth(1).locator('tbody tr');
    await rows.first().waitFor();
    expect(await rows.count()).toBe(1);
    expect(await rows.first().locator('td').allTextContents()).toEqual(['bulk', 'south', '1', '0']);
    await page.click('text=south');
    await page.locator('td', { hasText: 'later' }).waitFor();
    expect(await page.locator('tbody tr td.state-queued').count()).toBe(1);

    // Every tenant's dead operations, counted on the home page, then listed, then the one whose
    // id is markup.
    await page.goto(`${base}/dashboard#/`);
    await page.locator('#awaiting li').first().waitFor();
    expect(await page.locator('#awaiting li').allTextContents()).toEqual([
      'Dead operations: 2 (redrive them)',
      'Operations needing reconciliation: 1 (establish what the provider did)',
    ]);
    await page.getByRole('link', { name: 'Dead operations', exact: true }).click();
    await page.getByRole('heading', { name: 'Operations dead, every tenant' }).waitFor();
    const dead = page.locator('tbody tr');
    expect(await dead.count()).toBe(2);
    expect(await dead.locator('td:first-child').allTextContents()).toEqual(['north', 'south']);
    expect(await dead.locator('td.state-dead').count()).toBe(2);
    // Only the states an operator acts on are offered without a tenant.
    expect(await page.locator('select[name=state] option').allTextContents()).toEqual([
      'dead',
      'needs_reconciliation',
    ]);
    const idLink = page.getByRole('link', { name: MARKUP_ID, exact: true });
    await idLink.waitFor();
    expect(await page.locator('svg').count()).toBe(0);
    await idLink.click();
    await page.getByRole('heading', { name: `Operation ${MARKUP_ID}` }).waitFor();
    expect(await page.locator('pre').first().textContent()).toContain(MARKUP_INPUT);
    expect(await page.locator('dd.state-dead').textContent()).toBe('dead');
    expect(await page.locator('td', { hasText: 'attempts-exhausted' }).count()).toBeGreaterThan(0);
    expect(await page.evaluate(() => (globalThis as unknown as Browser).__pwned)).toBeUndefined();

    await page.fill('#actions input[name=reason]', 'the upstream is back');
    await page.click('#actions button[type=submit]');
    await page.locator('dd.state-queued').waitFor();
    const after = await r.call(
      'GET',
      `/v1/operations/${encodeURIComponent(MARKUP_ID)}?tenant=north&include=events`,
      {
        key: KEYS.admin,
      },
    );
    expect(after.json.state).toBe('queued');
    expect(after.json.events).toMatchObject([
      { action: 'redrive', by: 'admin#1', reason: 'the upstream is back' },
    ]);
    await page.locator('td', { hasText: 'the upstream is back' }).waitFor();

    // What is left dead, every tenant's: south's, back to the queue from the listing in one go.
    await page.goto(`${base}/dashboard#/operations?state=dead`);
    await page.getByRole('heading', { name: 'Operations dead, every tenant' }).waitFor();
    expect(await page.locator('tbody tr td:first-child').allTextContents()).toEqual(['south']);
    await page.fill('#page-actions input[name=reason]', 'the whole upstream is back');
    await page.click('#page-actions button[type=submit]');
    await page.locator('p.muted', { hasText: 'No operation on this page.' }).waitFor();
    const south = await r.call('GET', '/v1/operations/south-dead?tenant=south&include=events', {
      key: KEYS.admin,
    });
    expect([south.json.state, south.json.events]).toMatchObject([
      'queued',
      [{ action: 'redrive', by: 'admin#1', reason: 'the whole upstream is back' }],
    ]);
    await page.close();
  });

  it('lets an admin settle a reconciliation with what the provider shows', async () => {
    const page = await open();
    await signIn(page, KEYS.admin);
    await page.locator('#who').filter({ hasText: 'admin key' }).waitFor();
    await page.getByRole('link', { name: 'Operations needing reconciliation', exact: true }).click();
    await page.getByRole('link', { name: 'unsure', exact: true }).click();
    await page.locator('dd.state-needs_reconciliation').waitFor();
    const form = page.locator('form.settle');
    const journal = (await r.h.store.effectList({ tenant: 'north', id: 'unsure' }))[0]!;
    expect(await form.locator('legend').allTextContents()).toEqual([`Effect charge (key ${journal.key})`]);

    // An answer that is not JSON is said so, and nothing is sent.
    await form.locator('select[name=outcome-0]').selectOption('committed');
    await form.locator('input[name=answer-0]').fill('{ch_9');
    await form.locator('input[name=reason]').fill('the provider shows ch_9 under the key');
    await form.locator('button[type=submit]').click();
    await expect
      .poll(() => page.textContent('#problem'))
      .toContain("the provider's answer for charge is not JSON");
    expect((await r.h.sluice.get({ tenant: 'north', id: 'unsure' }))?.state).toBe('needs_reconciliation');

    await form.locator('input[name=answer-0]').fill('{"id":"ch_9"}');
    await form.locator('input[name=reference-0]').fill('ch_9');
    await form.locator('select[name=resolution]').selectOption('succeeded');
    await form.locator('input[name=result]').fill('{"charge":"ch_9"}');
    await form.locator('button[type=submit]').click();
    await page.locator('dd.state-succeeded').waitFor();
    const settled = await r.call('GET', '/v1/operations/unsure?tenant=north&include=effects,events', {
      key: KEYS.admin,
    });
    expect([settled.json.state, settled.json.result]).toEqual(['succeeded', { charge: 'ch_9' }]);
    expect(settled.json.effects).toMatchObject([{ name: 'charge', state: 'committed', reference: 'ch_9' }]);
    expect(settled.json.events).toMatchObject([
      { action: 'reconcile', by: 'admin#1', reason: 'the provider shows ch_9 under the key' },
    ]);
    await page.close();
  });

  it("lets a tenant read its usage and a charge's journal, and not the queues", async () => {
    const page = await open();
    await signIn(page, KEYS.north);
    await page.getByRole('heading', { name: 'Tenant north' }).waitFor();
    expect(await page.getByRole('heading', { name: 'Classes' }).count()).toBe(0);
    await page.goto(`${base}/dashboard#/operation?id=paid`);
    await page.locator('dd.state-succeeded').waitFor();
    const effect = await page
      .locator('table')
      .nth(1)
      .locator('tbody tr')
      .first()
      .locator('td')
      .allTextContents();
    const journal = (await r.h.store.effectList({ tenant: 'north', id: 'paid' }))[0]!;
    expect(effect.slice(0, 5)).toEqual(['charge', 'committed', journal.provider ?? '', journal.key, '1']);
    // Nothing to act on: no cancel for an ended operation, no redrive for a tenant.
    expect(await page.locator('#actions').count()).toBe(0);
    await page.click('#sign-out');
    await page.locator('#sign-in').waitFor({ state: 'visible' });
    expect(await page.evaluate(() => (globalThis as unknown as Browser).sessionStorage.length)).toBe(0);
    await page.close();
  });

  it('shows nothing a read in flight brings back after the key signed out', async () => {
    const page = await open();
    // The queues' answer is held until the operator has signed out.
    let release = () => {};
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let asked = () => {};
    const reached = new Promise<void>((resolve) => {
      asked = resolve;
    });
    await page.route('**/v1/queues', async (route) => {
      asked();
      await held;
      await route.continue();
    });
    await signIn(page, KEYS.admin);
    await reached;
    await page.locator('#sign-out').click();
    await page.locator('#sign-in').waitFor({ state: 'visible' });
    // The held read answers now: wait until its body has reached the page, then for a task of the
    // page's after it (what the page does with a body it read happens before its next task).
    const finished = page.waitForEvent('requestfinished', (r) => r.url().endsWith('/v1/queues'));
    release();
    await finished;
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 0)));
    expect(await page.locator('#view').textContent()).toBe('');
    expect(await page.locator('#nav').isHidden()).toBe(true);
    await page.close();
  });

  it('reads a live view again: work submitted meanwhile shows without a reload', async () => {
    const page = await open();
    await signIn(page, KEYS.admin);
    await page.locator('#who').filter({ hasText: 'admin key' }).waitFor();
    expect(await page.isChecked('#live')).toBe(true);
    const tenants = page.locator('table').nth(1).locator('tbody tr');
    await tenants.first().waitFor();
    const before = await tenants.allTextContents();
    expect(before.join()).not.toContain('east');
    const navigations: string[] = [];
    page.on('framenavigated', (frame) => navigations.push(frame.url()));
    await r.h.sluice.submit({
      tenant: 'east',
      id: 'live',
      kind: 'note',
      input: { text: 'y' },
      delayMs: 600_000,
    });
    // The next read of the queues (every 5 s) brings it: no reload, no navigation.
    await page.locator('td', { hasText: 'east' }).waitFor({ timeout: 20_000 });
    expect(await tenants.count()).toBe(before.length + 1);
    expect(navigations).toEqual([]);
    await page.close();
  });

  it('requested nothing but its own server, and raised no error in the page', () => {
    expect(requests.length).toBeGreaterThan(10);
    expect(requests.filter((url) => !url.startsWith(`${base}/`))).toEqual([]);
    // The wrong key's 401 is the one failed request, and the one error Chromium logs (a failed
    // fetch, not a script error): no missing file, no policy refusing anything of the page's own.
    expect(failed).toEqual([`401 ${base}/v1/me`]);
    expect(pageErrors.filter((e) => !e.includes('401'))).toEqual([]);
  });
});
