/// <reference lib="dom" />
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { type BrowserContext, chromium, type Page, type Route } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalStack, startLocalStack } from '#lib/local/stack.ts';

/**
 * The dashboard in Debian's Chromium against the real local server: sign in, feeds, keys (copy to the
 * clipboard), domains, imports, products, "try it" and usage. Where the server does not offer a part yet
 * (404) or a dependency is down (503), the test asserts the clear message the page shows instead, so it
 * follows what the server really answers.
 */
const CHROMIUM = '/usr/bin/chromium';
const SHOTS = resolve('test-results/screenshots');
const PHOTO = resolve('test/fixtures/vision/voc-dinner.jpg');
/** Demo product photos (served by the local server at /demo/images) imported into the test feed. */
const DEMO_PRODUCTS = ['tools-hammer5', 'tools-screwDriver', 'others-volleyball', 'fishes-fish1'];
const QUERY_IMAGE = resolve('demo/images/tools-hammer5.webp');
/** The stack's enterprise default, not the built-in 10,000: a feed pinned to 10,000 differs from it. */
const ENTERPRISE_DEFAULT = 20_000;

let stack: LocalStack;
let context: BrowserContext;
let page: Page;
/** Console errors about the pages' own resources (not the API's refusals, which some tests ask for). */
const missing: string[] = [];
let dataDir: string;
let profileDir: string;
let feedId = '';
let searchId = '';

async function api(method: string, path: string, body?: unknown, bearer = stack.adminToken) {
  const response = await fetch(`${stack.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${bearer}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}

/** The test feed's file: the demo photos in DEMO_PRODUCTS as products SKU-1, SKU-2, ... */
const feedRows = () =>
  DEMO_PRODUCTS.map((name, n) => ({
    id: `SKU-${n + 1}`,
    title: name.replace(/-/g, ' '),
    image_link: `${stack.url}/demo/images/${name}.webp`,
    link: `https://shop.example.com/p/${n + 1}`,
    price: `${n + 1}9.99 EUR`,
    availability: 'in stock',
  }));

/** The page's detection requests answered with `objects` (their boxes in the query image's pixels). */
const answerDetectWith = (objects: { box: number[]; label: string; score: number }[]) =>
  page.route('**/api/v1/detect', (route) =>
    route.fulfill({
      contentType: 'application/json',
      body: JSON.stringify({
        action: 'detect',
        searchId: 'x',
        results: { objects },
        processTimeSeconds: 0.01,
      }),
    }),
  );

const shot = (name: string, fullPage = true) =>
  page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage });

describe('dashboard in Chromium', () => {
  beforeAll(async () => {
    if (!existsSync(CHROMIUM))
      throw new Error(`${CHROMIUM} is missing: run scripts/install-chromium.sh (npm test does it as root).`);
    await mkdir(SHOTS, { recursive: true });
    dataDir = await mkdtemp(join(tmpdir(), 'vps-browser-'));
    profileDir = await mkdtemp(join(tmpdir(), 'vps-chromium-'));
    stack = await startLocalStack({
      ...process.env,
      LOG_LEVEL: 'silent',
      PORT: '0',
      DATA_DIR: dataDir,
      PLAN_LIMIT_ENTERPRISE: String(ENTERPRISE_DEFAULT),
    });
    context = await chromium.launchPersistentContext(profileDir, {
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
      viewport: { width: 1280, height: 900 },
    });
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.url });
    page = context.pages()[0] ?? (await context.newPage());
    page.setDefaultTimeout(10_000);
    page.on('console', (message) => {
      const url = message.location().url;
      if (message.type() === 'error' && url && !/\/(admin|api)\//.test(new URL(url).pathname))
        missing.push(`${url}: ${message.text()}`);
    });
  });

  afterAll(async () => {
    await context?.close();
    await stack?.close();
    await rm(dataDir, { recursive: true, force: true });
    await rm(profileDir, { recursive: true, force: true });
  });

  it('refuses a wrong admin token with the error message and request id, then signs in', async () => {
    await page.goto(stack.url);
    await expect(page.getByRole('heading', { name: 'Sign in' }).isVisible()).resolves.toBe(true);
    await shot('01-sign-in');

    await page.getByLabel('Admin token').fill('adm_wrong-token-0000000000');
    await page.getByRole('button', { name: 'Sign in' }).click();
    const alert = page.locator('.alert.error');
    await alert.waitFor();
    expect(await alert.textContent()).toMatch(/401 unauthorized/);
    expect(await alert.locator('.request-id').textContent()).toMatch(/^[0-9a-f-]{36}$/);

    await page.getByLabel('Admin token').fill(stack.adminToken);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Feeds' }).waitFor();
    expect(await page.evaluate(() => sessionStorage.getItem('vps.adminToken'))).toBe(stack.adminToken);
    await page.locator('tr[data-feed-id="demo"]').waitFor();
  });

  it('creates a feed and lands on its API keys', async () => {
    await page.getByLabel('Name', { exact: true }).fill('Browser test shop');
    await page.getByLabel('Feed id (optional)').fill('browser-shop');
    await page.getByLabel('Plan').selectOption('pro');
    await shot('02-feeds');
    await page.getByRole('button', { name: 'Create feed' }).click();
    await page.getByRole('heading', { name: 'API Keys' }).waitFor();
    feedId = 'browser-shop';
    const feed = await api('GET', `/admin/v1/feeds/${feedId}`);
    expect(feed.body).toMatchObject({ name: 'Browser test shop', plan: 'pro', hourlyLimit: 1000 });
  });

  it('creates a search id and copies it to the clipboard', async () => {
    await page.getByLabel('Label').fill('storefront');
    await page.getByRole('button', { name: 'Create search id' }).click();
    const full = page.locator('#new-key');
    await full.waitFor();
    searchId = (await full.textContent()) ?? '';
    expect(searchId).toMatch(/^vps_[\w-]{32}$/);

    await page.locator('.new-key button.copy').click();
    await page.locator('.new-key button.copy[data-copied="true"]').waitFor();
    expect(await page.evaluate(() => navigator.clipboard.readText())).toBe(searchId);
    await expect(page.locator('#toast').textContent()).resolves.toMatch(/copied/);

    const { body } = await api('GET', `/admin/v1/feeds/${feedId}/keys`);
    expect(body.keys.map((k: { searchId: string }) => k.searchId)).toEqual([searchId]);
    await page.locator(`tr[data-search-id="${searchId}"]`).waitFor();
    await shot('03-api-keys');
  });

  it('validates a domain, adds one and removes it', async () => {
    await page.getByRole('link', { name: 'Domains' }).click();
    await page.getByRole('heading', { name: 'Allowed domains' }).waitFor();
    const input = page.getByLabel('Add a domain');
    await input.fill('not a domain!');
    await page.getByRole('button', { name: 'Add domain' }).click();
    expect(await page.locator('#domain-error').textContent()).toMatch(/is not a hostname/);
    expect(await input.getAttribute('aria-invalid')).toBe('true');

    await input.fill('*.com');
    await page.getByRole('button', { name: 'Add domain' }).click();
    expect(await page.locator('#domain-error').textContent()).toMatch(/would allow every site under \.com/);
    // Past the page's own check, the server's (public suffixes): shown at the field too
    await input.fill('*.co.uk');
    await page.getByRole('button', { name: 'Add domain' }).click();
    await page.getByText(/^\*\.co\.uk: .*public suffix/).waitFor();
    expect(await input.getAttribute('aria-invalid')).toBe('true');

    // A shorthand the URL parser reads as another address is not saved as that address: the server
    // refuses it, naming the address
    await input.fill('010');
    await page.getByRole('button', { name: 'Add domain' }).click();
    await page.getByText(/^010: is read as an IP address \(0\.0\.0\.8\)/).waitFor();

    // Kept as the server keeps it: no scheme, port, trailing dot or capitals
    await input.fill('https://Shop.Example.com.:443/');
    await page.getByRole('button', { name: 'Add domain' }).click();
    await page.locator('li[data-domain="shop.example.com"]').waitFor();
    expect((await api('GET', `/admin/v1/feeds/${feedId}`)).body.domains).toEqual(['shop.example.com']);
    await shot('04-domains');

    // With a domain list, searches from the dashboard's own host are refused; the page says so.
    await page.getByRole('link', { name: 'Try it' }).click();
    await page.locator('#try-file').setInputFiles(PHOTO);
    const refused = page.locator('.results .alert.error');
    await refused.waitFor();
    expect(await refused.textContent()).toMatch(
      /Requests from 127\.0\.0\.1 are not allowed.*403 domain_not_allowed/s,
    );
    expect(await refused.locator('.request-id').textContent()).toMatch(/^[0-9a-f-]{36}$/);

    await page.getByRole('link', { name: 'Domains' }).click();
    // The last domain: a second click, as removing it opens the search ids to every origin
    await page.getByRole('button', { name: 'Remove shop.example.com' }).click();
    expect((await api('GET', `/admin/v1/feeds/${feedId}`)).body.domains).toEqual(['shop.example.com']);
    await page.getByRole('button', { name: /^Confirm: remove shop\.example\.com, the last domain/ }).click();
    await page.getByText('No domains: requests from any origin are accepted.').waitFor();
    expect((await api('GET', `/admin/v1/feeds/${feedId}`)).body.domains).toEqual([]);
  });

  it('imports a feed file and shows its progress until it succeeds', async () => {
    const rows = feedRows();
    const file = join(dataDir, 'feed.json');
    await writeFile(file, JSON.stringify(rows));

    await page.getByRole('link', { name: 'Imports' }).click();
    await page.getByLabel('Upload a feed file').setInputFiles(file);
    await page.getByRole('button', { name: 'Start import' }).click();
    await page
      .locator('.import-progress[data-status="succeeded"], .import-progress[data-status="failed"]')
      .waitFor({ timeout: 30_000 });
    expect(await page.locator('.import-progress').getAttribute('data-status')).toBe('succeeded');
    expect(await page.locator('.import-progress [data-stat="processed"] .stat-value').textContent()).toBe(
      String(rows.length),
    );
    const { body } = await api('GET', `/admin/v1/feeds/${feedId}/imports`);
    expect(JSON.stringify(body)).toMatch(/succeeded/);
    // Listed among the recent imports, and shown again in a new tab (progress was this tab's only)
    const importId = body.imports[0].importId as string;
    await page.locator(`.recent-imports tr[data-import-id="${importId}"] .badge.status-succeeded`).waitFor();
    await shot('05-imports');
    await page.evaluate((key) => sessionStorage.removeItem(key), `vps.import.${feedId}`);
    await page.reload();
    await page.locator('.import-progress[data-status="succeeded"]').waitFor();
    // A URL and a file at once: refused, not one of them silently dropped
    await page.getByLabel('Feed URL').fill('https://shop.example.com/feed.xml');
    await page.getByLabel('Upload a feed file').setInputFiles(file);
    await page.getByRole('button', { name: 'Start import' }).click();
    await page.getByText('Choose either a feed URL or a file, not both.').waitFor();
    expect((await api('GET', `/admin/v1/feeds/${feedId}/imports`)).body.imports).toHaveLength(1);
  });

  it("counts a re-import's product whose content changed as updated, so the counts add up", async () => {
    const rows = feedRows();
    rows[0]!.title = `${rows[0]!.title} (renamed)`;
    const file = join(dataDir, 'feed-renamed.json');
    await writeFile(file, JSON.stringify(rows));
    await page.getByLabel('Feed URL').fill('');
    await page.getByLabel('Upload a feed file').setInputFiles(file);
    await page.getByRole('button', { name: 'Start import' }).click();
    // The new import's progress (the one shown before had succeeded already)
    await page.waitForFunction(
      () => document.querySelectorAll('.recent-imports tbody tr').length === 2,
      undefined,
      { timeout: 30_000 },
    );
    await page.locator('.import-progress[data-status="succeeded"]').waitFor({ timeout: 30_000 });
    const stat = async (name: string) =>
      Number(await page.locator(`.import-progress [data-stat="${name}"] .stat-value`).textContent());
    expect(await stat('updated')).toBe(1);
    expect(await stat('skipped')).toBe(rows.length - 1);
    expect(
      (await stat('embedded')) + (await stat('updated')) + (await stat('skipped')) + (await stat('failed')),
    ).toBe(await stat('processed'));
  });

  it('browses the imported products', async () => {
    await page.getByRole('link', { name: 'Products' }).click();
    await page.locator(`.grid.products[data-count="${DEMO_PRODUCTS.length}"]`).waitFor();
    await shot('06-products');
  });

  it('searches an uploaded image and shows results with scores', async () => {
    const photo = (await readFile(QUERY_IMAGE)).toString('base64');
    const expectedSearch = await api('POST', '/api/v1/search/image', { imageData: photo }, searchId);
    expect(expectedSearch.status).toBe(200);
    expect(expectedSearch.body.length).toBeGreaterThan(0);
    const expectedDetect = await api('POST', '/api/v1/detect', { imageData: photo }, searchId);

    await page.getByRole('link', { name: 'Try it' }).click();
    // The keyboard goes from the search id to the drop zone in one Tab (no hidden stop between them).
    await page.locator('#try-key').focus();
    await page.keyboard.press('Tab');
    expect(await page.evaluate(() => document.activeElement?.className)).toBe('dropzone');
    await page.locator('#try-file').setInputFiles(QUERY_IMAGE);
    await page.locator('.preview img').waitFor();
    await page.locator('.results .grid.products .product').first().waitFor({ timeout: 20_000 });
    expect(await page.locator('.results .product').count()).toBe(expectedSearch.body.length);
    expect(await page.locator('.results .product .score').first().textContent()).toMatch(/score \d\.\d{3}/);
    // The photo is one of the imported products: it comes first.
    expect(await page.locator('.results .product').first().textContent()).toContain(
      expectedSearch.body[0].title,
    );
    await shot('07-search-results');
    // The allowance left after both of the page's requests (search and detection, sent at once): one
    // more request's own count is that less one.
    await page.locator('.detect-status p').first().waitFor();
    await page.waitForFunction(
      () => !document.querySelector('.detect-status')?.textContent?.includes('Detecting'),
    );
    const next = await fetch(`${stack.url}/api/v1/search/image`, {
      method: 'POST',
      headers: { authorization: `Bearer ${searchId}`, 'content-type': 'application/json' },
      body: JSON.stringify({ imageData: photo }),
    });
    const left = Number(next.headers.get('RateLimit-Remaining'));
    expect(await page.locator('.results .quota').textContent()).toBe(`${left + 1} of 1000 requests left now`);

    if (expectedDetect.status === 200 && expectedDetect.body.results.objects.length > 0) {
      const boxes = page.locator('.overlay .box');
      await boxes.first().waitFor({ timeout: 20_000 });
      expect(await boxes.count()).toBeGreaterThan(0);
      await shot('08-detect');
      // Keyboard: focus the first box and press Enter → the crop is searched.
      await boxes.first().focus();
      await page.keyboard.press('Enter');
      await page.getByRole('heading', { name: /Results for the .+ crop/ }).waitFor();
      await page
        .locator('.results [data-empty="true"], .results .grid.products, .results .alert')
        .first()
        .waitFor({ timeout: 20_000 });
    } else if (expectedDetect.status === 200) {
      await page.getByText('No objects detected.').waitFor({ timeout: 20_000 });
      await shot('08-detect');
    } else {
      const message = page.locator(`.detect-status .alert[data-code="${expectedDetect.body.error.code}"]`);
      await message.waitFor({ timeout: 20_000 });
      expect(await message.textContent()).toMatch(
        /Object detection is (temporarily unavailable|not available)/,
      );
      await shot('08-detect');
    }
  });

  it('shows usage rising in the chart and totals', async () => {
    const before = (await api('GET', `/admin/v1/feeds/${feedId}/usage`)).body.totals.requests as number;
    expect(before).toBeGreaterThanOrEqual(3);
    await page.getByRole('link', { name: 'Usage' }).click();
    const requests = page.locator('[data-stat="requests"] .stat-value');
    await requests.waitFor();
    expect(Number(await requests.textContent())).toBe(before);
    expect(await page.locator('svg.chart rect[data-endpoint="search_image"]').count()).toBeGreaterThan(0);

    await api(
      'POST',
      '/api/v1/search/image',
      { imageData: (await readFile(PHOTO)).toString('base64') },
      searchId,
    );
    // A related-products request from a widget that says where it runs (its product unknown: a 404)
    const related = await api(
      'POST',
      '/api/v1/related',
      { productId: 'no-such-product', context: { type: 'pdp', domain: 'Shop.Example' } },
      searchId,
    );
    expect(related.status).toBe(404);
    await page.getByRole('button', { name: 'Refresh' }).click();
    await page.waitForFunction(
      (n) => document.querySelector('[data-stat="requests"] .stat-value')?.textContent === String(n),
      before + 2,
    );
    expect(await page.locator('.usage-contexts tbody td').allTextContents()).toEqual([
      'pdp',
      'shop.example',
      '1',
    ]);
    // Per search id: named by its label, the id masked.
    const row = page.locator('table tbody tr', {
      has: page.locator('code', { hasText: searchId.slice(0, 8) }),
    });
    expect(await row.locator('td').allTextContents()).toEqual([
      'storefront',
      `${searchId.slice(0, 8)}…${searchId.slice(-4)}`,
      expect.stringMatching(/^\d+$/),
      expect.stringMatching(/^\d+$/),
    ]);
    await shot('09-usage');
  });

  it('revokes a search id after a confirmation', async () => {
    await page.getByRole('link', { name: 'API Keys' }).click();
    await page.getByRole('button', { name: 'Revoke search id storefront' }).click();
    await page.getByRole('button', { name: /Confirm: revoke search id storefront/ }).click();
    await page.locator(`tr.revoked[data-search-id="${searchId}"]`).waitFor();
    expect(
      (await api('POST', '/api/v1/search/image', { imageData: 'iVBORw0K' }, searchId)).body.error.code,
    ).toBe('search_id_revoked');
  });

  it('finds a demo product from the demo feed, as a newcomer would', async () => {
    await page.getByRole('link', { name: 'Feeds' }).first().click();
    await page.locator('tr[data-feed-id="demo"] a').click();
    await page.getByRole('link', { name: 'Try it' }).click();
    await page.locator('#try-file').setInputFiles(resolve('demo/images/fishes-fish1.webp'));
    await page.locator('.results .grid.products .product').first().waitFor({ timeout: 20_000 });
    // The photo is the stingray print's own packshot: it comes first, found geometrically (≥ 0.9).
    const first = page.locator('.results .product').first();
    expect(await first.locator('.title').textContent()).toBe('Stingray print');
    expect(
      Number((await first.locator('.score').textContent())?.match(/\d\.\d{3}/)?.[0]),
    ).toBeGreaterThanOrEqual(0.9);
    await shot('11-demo-try-it');
  });

  it('shows a failed import note about the file without a "row null", and the failure in red', async () => {
    await api('POST', '/admin/v1/feeds', { feedId: 'moved-images', name: 'Moved images' });
    // A product first: a full import that imports none of its file's keeps it, and notes so (row null).
    const [first] = feedRows();
    const { body: started } = await api('POST', '/admin/v1/feeds/moved-images/imports', {
      format: 'json',
      content: JSON.stringify([first]),
    });
    await expect
      .poll(
        async () =>
          (await api('GET', `/admin/v1/feeds/moved-images/imports/${started.importId}`)).body.status,
        { timeout: 30_000 },
      )
      .toBe('succeeded');
    const file = join(dataDir, 'moved.csv');
    await writeFile(
      file,
      `id,title,image_link\nm1,Moved 1,${stack.url}/demo/images/gone1.webp\nm2,Moved 2,${stack.url}/demo/images/gone2.webp\n`,
    );
    await page.goto(`${stack.url}/#/feeds/moved-images/imports`);
    await page.getByRole('heading', { level: 1, name: 'Moved images' }).waitFor();
    await page.getByLabel('Upload a feed file').setInputFiles(file);
    await page.getByRole('button', { name: 'Start import' }).click();
    await page.locator('.import-progress[data-status="failed"]').waitFor({ timeout: 30_000 });
    const errors = await page.locator('.import-progress ol.errors li').allTextContents();
    expect(errors).toContainEqual(expect.stringMatching(/^Products not in this file were kept/));
    expect(errors.join('\n')).not.toMatch(/null|undefined/);
    // The rows not imported apart from the note (a warning: nothing failed by it).
    const errorList = page.locator('.import-progress .problems.error');
    expect(await errorList.locator('summary').textContent()).toBe('2 errors (rows not imported)');
    expect(await errorList.locator('li').allTextContents()).toEqual([
      expect.stringMatching(/^row 1, productId m1: image_link .*gone1\.webp: HTTP 404\.$/),
      expect.stringMatching(/^row 2, productId m2: image_link .*gone2\.webp: HTTP 404\.$/),
    ]);
    const warningList = page.locator('.import-progress .problems.warning');
    expect(await warningList.locator('summary').textContent()).toBe('1 warning (not counted as failed)');
    expect(await warningList.locator('li').allTextContents()).toEqual([
      expect.stringMatching(/^Products not in this file were kept/),
    ]);
    await page.locator('.recent-imports .badge.status-failed.bad').waitFor();
    expect(await page.locator('.recent-imports .badge.status-succeeded.ok').count()).toBe(1);

    // An import with more failed rows than the 100 problems it keeps says how many of them are listed.
    const path = `/admin/v1/feeds/moved-images/imports/${started.importId}`;
    const { body: record } = await api('GET', path);
    const many = {
      ...record,
      status: 'succeeded',
      failed: 150,
      errors: Array.from({ length: 100 }, (_, i) => ({
        row: i + 1,
        message: 'title is missing.',
        severity: 'error',
      })),
    };
    await page.route(`**${path}`, (route) =>
      route.fulfill({ contentType: 'application/json', body: JSON.stringify(many) }),
    );
    try {
      await page.getByRole('button', { name: `Show the progress of import ${started.importId}` }).click();
      await page.locator('.import-progress .problems.error summary', { hasText: '150' }).waitFor();
      expect(await page.locator('.import-progress .problems.error summary').textContent()).toBe(
        'The first 100 of 150 errors (rows not imported)',
      );
    } finally {
      await page.unroute(`**${path}`);
    }
  });

  it('keeps a small detected box clickable inside a larger one, and the keyboard on best score first', async () => {
    // The API's order is by score: here the small box first, then a larger one around it.
    const objects = [
      { box: [20, 20, 100, 100], label: 'small thing', score: 0.9 },
      { box: [0, 0, 320, 192], label: 'whole thing', score: 0.8 },
    ];
    await answerDetectWith(objects);
    try {
      await page.goto(`${stack.url}/#/feeds/demo/try`);
      await page.getByRole('heading', { level: 1, name: 'Demo catalogue' }).waitFor();
      await page.locator('#try-file').setInputFiles(QUERY_IMAGE);
      const small = page.getByRole('button', { name: 'Search the small thing (90%)' });
      await small.waitFor();
      const where = (await small.boundingBox())!;
      // A click where the small box is, as a mouse would: the larger box must not catch it.
      await page.mouse.click(where.x + where.width / 2, where.y + where.height / 2);
      await page.getByRole('heading', { name: 'Results for the small thing (90%) crop' }).waitFor();
      expect(
        await page.locator('.overlay .box').evaluateAll((boxes) => boxes.map((b) => b.textContent)),
      ).toEqual(['small thing 90%', 'whole thing 80%']);
    } finally {
      await page.unroute('**/api/v1/detect');
    }
  });

  it('draws the labels of boxes sharing a corner apart, on the image', async () => {
    // Three boxes from the image's top-left corner (a shelf, a row on it, its first item) and one at
    // its right edge: drawn at each top-left corner, the first three labels covered one another.
    const objects = [
      { box: [0, 0, 60, 60], label: 'bottle', score: 0.9 },
      { box: [0, 0, 160, 90], label: 'cup', score: 0.8 },
      { box: [0, 0, 320, 192], label: 'dining table', score: 0.7 },
      { box: [280, 100, 320, 140], label: 'cell phone', score: 0.6 },
    ];
    await answerDetectWith(objects);
    try {
      // (Through another page: the test before left this one with the same file chosen. The products
      // page's own grid, not the results grid of the page before.)
      await page.goto(`${stack.url}/#/feeds/demo/products`);
      await page.locator('.grid.products[data-count="24"]').waitFor();
      await page.goto(`${stack.url}/#/feeds/demo/try`);
      await page.locator('#try-key option').waitFor({ state: 'attached' });
      await page.locator('#try-file').setInputFiles(QUERY_IMAGE);
      await page.locator('.overlay .box[data-index="3"]').waitFor();
      const { labels, image } = await page.evaluate(() => {
        const rect = (e: Element) => {
          const r = e.getBoundingClientRect();
          return { left: r.left, top: r.top, right: r.right, bottom: r.bottom };
        };
        return {
          labels: [...document.querySelectorAll('.overlay .box-label')].map(rect),
          image: rect(document.querySelector('.frame img')!),
        };
      });
      type Rect = (typeof labels)[number];
      const overlap = (a: Rect, b: Rect) =>
        a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
      expect(labels).toHaveLength(4);
      for (const [i, a] of labels.entries()) {
        expect(a.left >= image.left && a.right <= image.right, `label ${i} across`).toBe(true);
        expect(a.top >= image.top && a.bottom <= image.bottom, `label ${i} down`).toBe(true);
        for (const b of labels.slice(i + 1)) expect(overlap(a, b), `label ${i} overlaps another`).toBe(false);
      }
    } finally {
      await page.unroute('**/api/v1/detect');
    }
  });

  it('gives the keyboard its place back after a page of products (not the top of the page)', async () => {
    await page.goto(`${stack.url}/#/feeds/demo/products`);
    await page.getByRole('heading', { level: 1, name: 'Demo catalogue' }).waitFor();
    await page.locator('.grid.products[data-count="24"]').waitFor();
    await page.getByRole('button', { name: 'Next →' }).focus();
    await page.keyboard.press('Enter');
    await page.locator('.pager', { hasText: 'Page 2' }).waitFor();
    // The last page: "Next" is disabled, so the focus is on "Previous", Enter goes back.
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('← Previous');
    await page.keyboard.press('Enter');
    await page.locator('.pager', { hasText: 'Page 1' }).waitFor();
    expect(await page.evaluate(() => document.activeElement?.textContent)).toBe('Next →');
  });

  it('shows why a search id for testing could not be created, not nothing', async () => {
    await api('POST', '/admin/v1/feeds', { feedId: 'no-keys', name: 'No keys' });
    await page.goto(`${stack.url}/#/feeds/no-keys/try`);
    await page.getByRole('heading', { level: 1, name: 'No keys' }).waitFor();
    const error = { status: 500, code: 'internal', message: 'Something broke.', details: [] };
    await page.route('**/admin/v1/feeds/no-keys/keys', (route) =>
      route.request().method() === 'POST'
        ? route.fulfill({ status: 500, contentType: 'application/json', body: JSON.stringify({ error }) })
        : route.continue(),
    );
    try {
      await page.getByRole('button', { name: 'Create a search id for testing' }).click();
      await page.getByText('Could not create the search id: Something broke.').waitFor();
    } finally {
      await page.unroute('**/admin/v1/feeds/no-keys/keys');
    }
    await page.getByRole('button', { name: 'Create a search id for testing' }).click();
    await page.getByLabel('Search id').waitFor();
  });

  it("creates an enterprise feed on the plan's default limit, not a pinned 10,000", async () => {
    await page.goto(`${stack.url}/#/`);
    await page.getByRole('heading', { name: 'Feeds', exact: true }).waitFor();
    await page.getByLabel('Name', { exact: true }).fill('Big shop');
    await page.getByLabel('Feed id (optional)').fill('big-shop');
    await page.getByLabel('Plan').selectOption('enterprise');
    await page.getByRole('button', { name: 'Create feed' }).click();
    await page.getByRole('heading', { name: 'API Keys' }).waitFor();
    expect((await api('GET', '/admin/v1/feeds/big-shop')).body).toMatchObject({
      plan: 'enterprise',
      hourlyLimit: ENTERPRISE_DEFAULT,
    });
  });

  it("gives a feed moved to enterprise the plan's default limit, not its former plan's", async () => {
    const reference = await api('POST', '/admin/v1/feeds', { name: 'Reference', plan: 'enterprise' });
    await api('POST', '/admin/v1/feeds', { feedId: 'moving-up', name: 'Moving up', plan: 'pro' });
    await page.goto(`${stack.url}/#/feeds/moving-up/general`);
    await page.getByRole('heading', { level: 1, name: 'Moving up' }).waitFor();
    await page.locator('#feed-plan').selectOption('enterprise');
    expect(await page.locator('#feed-limit').inputValue()).toBe('');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByText('Settings saved').waitFor();
    const moved = (await api('GET', '/admin/v1/feeds/moving-up')).body;
    expect(moved).toMatchObject({ plan: 'enterprise', hourlyLimit: reference.body.hourlyLimit });
    expect(moved.hourlyLimit).not.toBe(1000);
    // On the default, the field is empty (not the default's number, as if set), and the default's number
    // typed in pins it as the feed's own
    await page.reload();
    await page.getByRole('heading', { level: 1, name: 'Moving up' }).waitFor();
    expect(await page.locator('#feed-limit').inputValue()).toBe('');
    await page.locator('#feed-limit').fill(String(moved.hourlyLimit));
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByText('Settings saved').waitFor();
    expect((await api('GET', '/admin/v1/feeds/moving-up')).body).toMatchObject({
      hourlyLimit: moved.hourlyLimit,
      customHourlyLimit: true,
    });
    // An enterprise feed's own limit survives a round trip of the plan through Pro before Save
    await api('POST', '/admin/v1/feeds', {
      feedId: 'custom-limit',
      name: 'Custom limit',
      plan: 'enterprise',
      hourlyLimit: 50_000,
    });
    await page.goto(`${stack.url}/#/feeds/custom-limit/general`);
    // (Only the hash changed: the previous feed's page stays until this one is drawn.)
    await page.getByRole('heading', { level: 1, name: 'Custom limit' }).waitFor();
    await page.locator('#feed-plan').selectOption('pro');
    await page.locator('#feed-plan').selectOption('enterprise');
    expect(await page.locator('#feed-limit').inputValue()).toBe('50000');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByText('Settings saved').waitFor();
    expect((await api('GET', '/admin/v1/feeds/custom-limit')).body.hourlyLimit).toBe(50_000);
    // A typo the number field cannot read is refused, not saved as "the default"
    await page.locator('#feed-limit').click();
    await page.locator('#feed-limit').press('ControlOrMeta+a');
    await page.locator('#feed-limit').pressSequentially('5-');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByText('The hourly limit must be a whole number, or empty for the default.').waitFor();
    expect((await api('GET', '/admin/v1/feeds/custom-limit')).body.hourlyLimit).toBe(50_000);
  });

  /**
   * Creates a feed named `name` from the Feeds page while each POST of it goes to `answer` with its
   * number (1, 2, ...); resolves with the Idempotency-Keys the page sent, once it shows the feed.
   */
  async function createFeedThrough(name: string, answer: (route: Route, n: number) => Promise<void>) {
    await page.goto(`${stack.url}/#/`);
    await page.getByRole('heading', { name: 'Feeds', exact: true }).waitFor();
    const keys: (string | undefined)[] = [];
    await page.route('**/admin/v1/feeds', async (route) => {
      if (route.request().method() !== 'POST') return route.continue();
      keys.push(route.request().headers()['idempotency-key']);
      return answer(route, keys.length);
    });
    try {
      await page.getByLabel('Name', { exact: true }).fill(name);
      await page.getByRole('button', { name: 'Create feed' }).click();
      await page.getByRole('heading', { name: 'API Keys' }).waitFor({ timeout: 15_000 });
    } finally {
      await page.unroute('**/admin/v1/feeds');
    }
    const { feeds } = (await api('GET', '/admin/v1/feeds')).body;
    return { keys, made: feeds.filter((feed: { name: string }) => feed.name === name) };
  }

  it('makes one feed when the answer to its creation is lost, and lands on it (sent again with its key)', async () => {
    // The first POST reaches the server, which creates the feed; its answer never reaches the page.
    const { keys, made } = await createFeedThrough('Lost answer shop', async (route, n) => {
      if (n > 1) return route.continue();
      await route.fetch();
      await route.abort('connectionreset');
    });
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(keys[1]).toBe(keys[0]);
    expect(made).toHaveLength(1);
    expect(page.url()).toContain(`#/feeds/${made[0].feedId}/keys`);
  });

  it('waits for a create whose first try is still running (409 idempotency_key_in_use), not an error', async () => {
    // Four answers say the first try still runs (a slow cold start holds the key), then it has finished.
    const { keys, made } = await createFeedThrough('Slow first try shop', async (route, n) => {
      if (n > 4) return route.continue();
      const error = { status: 409, code: 'idempotency_key_in_use', message: 'Still running.', details: [] };
      await route.fulfill({
        status: 409,
        contentType: 'application/json',
        headers: { 'Retry-After': '1' },
        body: JSON.stringify({ error, requestId: 'r' }),
      });
    });
    expect(keys).toHaveLength(5);
    expect(new Set(keys).size).toBe(1);
    expect(made).toHaveLength(1);
  });

  it('saves no domain edit over a change another tab saved after the page loaded (412), and asks to reload', async () => {
    const domainsOf = async () => (await api('GET', '/admin/v1/feeds/two-tabs')).body.domains;
    const refusal = page.locator('section[aria-labelledby="domains-h"] .alert.error, .alert.error').first();
    await api('POST', '/admin/v1/feeds', {
      feedId: 'two-tabs',
      name: 'Two tabs',
      domains: ['a.example.com'],
    });
    await page.goto(`${stack.url}/#/feeds/two-tabs/domains`);
    await page.locator('li[data-domain="a.example.com"]').waitFor();
    // Another tab saves a domain; this page still shows the list it loaded.
    await api('PATCH', '/admin/v1/feeds/two-tabs', { domains: ['a.example.com', 'other.example.com'] });
    await page.getByLabel('Add a domain').fill('mine.example.com');
    await page.getByRole('button', { name: 'Add domain' }).click();
    await refusal.waitFor();
    expect(await refusal.textContent()).toMatch(
      /changed elsewhere since the page loaded.*precondition_failed/s,
    );
    expect(await domainsOf()).toEqual(['a.example.com', 'other.example.com']);

    await page.reload();
    await page.locator('li[data-domain="other.example.com"]').waitFor();
    await page.getByLabel('Add a domain').fill('mine.example.com');
    await page.getByRole('button', { name: 'Add domain' }).click();
    await page.locator('li[data-domain="mine.example.com"]').waitFor();
    expect(await domainsOf()).toEqual(['a.example.com', 'other.example.com', 'mine.example.com']);

    // Another tab leaves one domain: removing it here, unconfirmed, would open the feed to every origin.
    await api('PATCH', '/admin/v1/feeds/two-tabs', { domains: ['mine.example.com'] });
    await page.getByRole('button', { name: 'Remove mine.example.com' }).click();
    await refusal.waitFor();
    expect(await domainsOf()).toEqual(['mine.example.com']);
    await page.reload();
    await page.getByRole('button', { name: 'Remove mine.example.com' }).click();
    await page
      .getByRole('button', { name: /^Confirm: remove mine\.example\.com, the last domain/ })
      .waitFor();
    expect(await domainsOf()).toEqual(['mine.example.com']);
  });

  it('deletes a feed once its id is typed to confirm', async () => {
    await api('POST', '/admin/v1/feeds', { feedId: 'to-delete', name: 'To delete' });
    await page.goto(`${stack.url}/#/feeds/to-delete/general`);
    await page.getByRole('heading', { level: 1, name: 'To delete' }).waitFor();
    const remove = page.getByRole('button', { name: 'Delete this feed' });
    await remove.waitFor();
    expect(await remove.isDisabled()).toBe(true);
    await page.getByLabel('Type to-delete to confirm').fill('to-delet');
    expect(await remove.isDisabled()).toBe(true);
    await page.getByLabel('Type to-delete to confirm').fill('to-delete');
    await page.evaluate(() => sessionStorage.setItem('vps.import.to-delete', 'imp_of_the_old_feed'));
    await remove.click();
    await page.getByRole('heading', { name: 'Feeds', exact: true }).waitFor();
    // A feed created again under the id does not show the old one's last import
    expect(await page.evaluate(() => sessionStorage.getItem('vps.import.to-delete'))).toBeNull();
    expect((await api('GET', '/admin/v1/feeds/to-delete')).status).toBe(404);
    expect(await page.locator('tr[data-feed-id="to-delete"]').count()).toBe(0);
  });

  it('keeps a long unbroken feed name inside the page, in the list and on the feed', async () => {
    const long = `${'Ünïcødé'.repeat(28)}end`;
    await api('POST', '/admin/v1/feeds', { feedId: 'long-name', name: long });
    const fits = () =>
      page.evaluate(() => document.documentElement.scrollWidth <= document.documentElement.clientWidth);
    await page.goto(`${stack.url}/#/`);
    await page.reload();
    await page.locator('tr[data-feed-id="long-name"]').waitFor();
    expect(await fits()).toBe(true);
    await page.locator('tr[data-feed-id="long-name"] a').click();
    await page.getByRole('heading', { level: 1, name: long }).waitFor();
    expect(await fits()).toBe(true);
  });

  it('says why it asks to sign in again when the admin token is refused on a feed page', async () => {
    await page.goto(`${stack.url}/#/feeds/demo/general`);
    await page.getByRole('heading', { level: 1, name: 'Demo catalogue' }).waitFor();
    // The server now has another token (restarted with another ADMIN_TOKEN, say).
    await page.evaluate(() => sessionStorage.setItem('vps.adminToken', 'adm_replaced-0000000000'));
    await page.getByRole('link', { name: 'Usage' }).click();
    await page.getByRole('heading', { name: 'Sign in' }).waitFor();
    await page.getByText('The admin token was refused; sign in again.').waitFor();
    await page.getByLabel('Admin token').fill(stack.adminToken);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Feeds', exact: true }).waitFor();
    expect(await page.getByText('The admin token was refused; sign in again.').count()).toBe(0);
  });

  it('loads no page resource that is missing (a favicon request was a 404 on every page)', () => {
    expect(missing).toEqual([]);
  });

  it('serves the API reference page', async () => {
    await page.goto(`${stack.url}/docs`);
    await page.getByRole('heading', { name: /Visual product search/ }).waitFor();
    expect(await page.locator('section.op').count()).toBeGreaterThan(10);
    await shot('10-docs', false);
  });
});
