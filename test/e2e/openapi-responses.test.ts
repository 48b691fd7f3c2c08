import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { OPERATION_DOCS } from '#lib/http/openapi.ts';
import { stringKeywordProblems } from '#test/support/json-schema-strings.ts';
import { startTestStack, type TestStack } from '#test/support/local-stack.ts';

/**
 * The public endpoints' real answers, over HTTP on the demo catalogue, against the response schemas the
 * OpenAPI document publishes (GET /openapi.json): a client generated from the document must accept what
 * the service sends, products without a sale price (null) included, and the admin API's imports.
 */
let stack: TestStack;
let photo: string;

beforeAll(async () => {
  stack = await startTestStack();
  await stack.importsIdle();
  photo = (await readFile(new URL('../../demo/images/tools-hammer3.webp', import.meta.url))).toString(
    'base64',
  );
});

afterAll(async () => {
  await stack?.stop();
});

async function post(path: string, body: Record<string, unknown>): Promise<unknown> {
  const response = await fetch(`${stack.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.demo.searchId}` },
    body: JSON.stringify(body),
  });
  expect(response.status, path).toBe(200);
  return response.json();
}

function expectDocumented(operation: string, body: unknown): void {
  const schema = OPERATION_DOCS[operation]!.response.zod as z.ZodType;
  const result = schema.safeParse(body);
  expect(result.success ? [] : result.error.issues, operation).toEqual([]);
}

describe('public answers against the OpenAPI document', () => {
  it('match the documented schemas, null prices included', async () => {
    // Act: related products by id list the whole demo catalogue; the others search with a photo.
    const related = (await post('/api/v1/related', { productId: 'hammer-claw', limit: 50 })) as {
      sale_price: unknown;
    }[];
    const searched = await post('/api/v1/search/image', { imageData: photo, limit: 20 });
    const detected = await post('/api/v1/detect', { imageData: photo, action: 'OD+SEARCH' });
    const root = await post('/', { imageData: photo, limit: 20, offset: 0, feedId: stack.demo.searchId });

    // Assert: the catalogue has products without a sale price, and they are in the answers checked.
    expect(related.some((product) => product.sale_price === null)).toBe(true);
    expectDocumented('Related', related);
    expectDocumented('SearchImage', searched);
    expectDocumented('Detect', detected);
    expectDocumented('RootSearch', root);
  });
});

describe('admin import answers against the OpenAPI document', () => {
  it('match the documented schemas, rows failed and products imported with warnings included', async () => {
    // Prepare: a feed whose file has a product missing an additional image and a left-out metadata
    // name (warnings), and a row without a title (an error)
    const feed = await stack.admin('POST', '/admin/v1/feeds', { name: 'Documented imports', plan: 'pro' });
    const image = (name: string) => `${stack.url}/demo/images/${name}.webp`;
    const rows = [
      {
        id: 'warned',
        title: 'Hammer',
        image_link: image('tools-hammer3'),
        additional_image_link: image('missing-back-view'),
        'metadata.Campaign Name': 'winter',
      },
      { id: 'untitled', image_link: image('tools-hammer5') },
    ];
    const path = `/admin/v1/feeds/${feed.body.feedId}/imports`;
    // Act
    const started = await stack.admin('POST', path, {
      format: 'jsonl',
      content: rows.map((row) => JSON.stringify(row)).join('\n'),
    });
    await stack.importsIdle();
    const one = await stack.admin('GET', `${path}/${started.body.importId}`);
    const listed = await stack.admin('GET', `${path}?limit=5`);
    // Assess
    expect([started.status, one.status, listed.status]).toEqual([202, 200, 200]);
    expectDocumented('AdminStartImport', started.body);
    expectDocumented('AdminGetImport', one.body);
    expectDocumented('AdminListImports', listed.body);
    expect(one.body).toMatchObject({ status: 'succeeded', embedded: 1, failed: 1 });
    // The products browser: the imported product (with vectors), and a page of the demo feed with a cursor.
    const products = await stack.admin('GET', `/admin/v1/feeds/${feed.body.feedId}/products`);
    const demoPage = await stack.admin('GET', `/admin/v1/feeds/${stack.demo.feedId}/products?limit=2`);
    expectDocumented('AdminListProducts', products.body);
    expectDocumented('AdminListProducts', demoPage.body);
    expect(products.body.products).toMatchObject([{ product_id: 'warned', vector_count: 1 }]);
    expect(demoPage.body.cursor).toEqual(expect.any(String));
    expect(
      one.body.errors.map((error: { row: number; severity: string }) => [error.row, error.severity]),
    ).toEqual([
      [1, 'warning'],
      [1, 'warning'],
      [2, 'error'],
    ]);
  });
});

describe('admin feed answers against the OpenAPI document', () => {
  it('take the domain entries the document lets a client send, and answer their stored form', async () => {
    // Prepare: entries the server normalises, which the request schemas' pattern of the stored form refused
    type Items = Record<string, unknown>;
    const doc = (await (await fetch(`${stack.url}/openapi.json`)).json()) as {
      components: { schemas: Record<string, { properties: { domains: { items: Items } } }> };
    };
    const items = (name: string) => doc.components.schemas[name]!.properties.domains.items;
    const sent = [
      'https://shop.example.com:8443',
      'Shop2.Example.com.',
      'bücher.example',
      'https://192.0.2.10',
    ];
    // Act
    const created = await stack.admin('POST', '/admin/v1/feeds', {
      name: 'Documented domains',
      domains: sent,
    });
    const changed = await stack.admin('PATCH', `/admin/v1/feeds/${created.body.feedId}`, {
      domains: sent.slice(0, 2),
    });
    // Assess
    for (const entry of sent) {
      expect(stringKeywordProblems(items('CreateFeedRequest'), entry), entry).toEqual([]);
      expect(stringKeywordProblems(items('UpdateFeedRequest'), entry), entry).toEqual([]);
    }
    expect([created.status, changed.status]).toEqual([201, 200]);
    expectDocumented('AdminCreateFeed', created.body);
    expectDocumented('AdminUpdateFeed', changed.body);
    expect(created.body.domains).toEqual([
      'shop.example.com',
      'shop2.example.com',
      'xn--bcher-kva.example',
      '192.0.2.10',
    ]);
    for (const stored of [...created.body.domains, ...changed.body.domains] as string[])
      expect(stringKeywordProblems(items('Feed'), stored), stored).toEqual([]);
  });
});

describe('answers against the headers the OpenAPI document declares', () => {
  it('carry every header declared for their status: WWW-Authenticate on a 401, Vary on each', async () => {
    // Prepare: the document as a client reads it
    const doc = (await (await fetch(`${stack.url}/openapi.json`)).json()) as {
      paths: Record<string, Record<string, { responses: Record<string, { headers?: object }> }>>;
    };
    const declared = (path: string, method: string, status: number) =>
      Object.keys(doc.paths[path]![method]!.responses[String(status)]!.headers ?? {});
    const send = (path: string, method: string, headers: Record<string, string>, body?: unknown) =>
      fetch(`${stack.url}${path}`, {
        method,
        headers: { 'content-type': 'application/json', ...headers },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
    const origin = { origin: 'https://shop.example.com' };
    const overSize = { note: 'x'.repeat(7 * 1024 * 1024) };
    // Act
    const answers = [
      ['/api/v1/related', 'post', await send('/api/v1/related', 'POST', {}, { productId: 'hammer-claw' })],
      [
        '/api/v1/related',
        'post',
        await send('/api/v1/related', 'POST', bearer(stack.demo.searchId), { productId: 'hammer-claw' }),
      ],
      ['/admin/v1/feeds', 'get', await send('/admin/v1/feeds', 'GET', bearer('not-the-admin-token'))],
      ['/admin/v1/feeds', 'get', await send('/admin/v1/feeds', 'GET', bearer(stack.adminToken))],
      // Answered before the handler, as the gateway answers them: any origin (public), no Vary
      ['/api/v1/related', 'post', await send('/api/v1/related', 'POST', origin, overSize)],
      [
        '/admin/v1/feeds',
        'post',
        await send('/admin/v1/feeds', 'POST', { ...origin, ...bearer(stack.adminToken) }, overSize),
      ],
    ] as const;
    // Assess
    expect(answers.map(([, , response]) => response.status)).toEqual([401, 200, 401, 200, 413, 413]);
    for (const [path, method, response] of answers) {
      const names = declared(path, method, response.status);
      const where = `${method} ${path} ${response.status}`;
      expect(names.includes('Vary'), where).toBe(response.status !== 413);
      expect(response.headers.get('vary') !== null, where).toBe(response.status !== 413);
      for (const name of names) expect(response.headers.get(name), `${where}: ${name}`).not.toBeNull();
    }
    const [publicTooLarge, adminTooLarge] = answers.slice(4).map(([, , response]) => response);
    expect(publicTooLarge!.headers.get('access-control-allow-origin')).toBe('*');
    expect(adminTooLarge!.headers.get('access-control-allow-origin')).toBeNull();
  });
});
