import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { OPERATION_DOCS } from '#lib/http/openapi.ts';
import { type LocalStack, startLocalStack } from '#lib/local/stack.ts';

/**
 * The public endpoints' real answers, over HTTP on the demo catalogue, against the response schemas the
 * OpenAPI document publishes (GET /openapi.json): a client generated from the document must accept what
 * the service sends, products without a sale price (null) included.
 */
let stack: LocalStack;
let dataDir: string;
let photo: string;

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'vps-openapi-'));
  stack = await startLocalStack({ ...process.env, LOG_LEVEL: 'silent', PORT: '0', DATA_DIR: dataDir });
  await stack.importsIdle();
  photo = (await readFile(new URL('../../demo/images/tools-hammer3.webp', import.meta.url))).toString(
    'base64',
  );
});

afterAll(async () => {
  await stack?.close();
  await rm(dataDir, { recursive: true, force: true });
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
