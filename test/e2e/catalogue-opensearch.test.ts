import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  VISUAL_WORD_FILTER_CLAUSES,
  VISUAL_WORD_MAX_QUERY_TERMS,
} from '#lib/adapters/opensearch-visual-word-index.ts';
import { type FakeOpenSearch, startFakeOpenSearch } from '#test/support/fake-opensearch.ts';
import { startTestStack, type TestStack } from '#test/support/local-stack.ts';

/**
 * The same catalogue path with VECTOR_INDEX=opensearch (the AWS configuration), against the HTTP fake of
 * OpenSearch's REST API: the container opens one index per model version and search, related products and
 * removals go through it.
 */
let opensearch: FakeOpenSearch;
let stack: TestStack;
let searchId: string;
let feedId: string;

const photo = (name: string) =>
  readFile(new URL(`../../demo/images/${name}.webp`, import.meta.url)).then((b) => b.toString('base64'));

function feed(ids: string[]): string {
  const items = ids
    .map(
      (id) =>
        `<item><g:id>${id}</g:id><title>${id}</title><g:image_link>${stack.url}/demo/images/${id}.webp</g:image_link><g:color>${id.startsWith('tools') ? 'silver' : 'blue'}</g:color></item>`,
    )
    .join('');
  return `<rss xmlns:g="http://base.google.com/ns/1.0"><channel>${items}</channel></rss>`;
}

async function importFeed(ids: string[]) {
  const started = await stack.admin('POST', `/admin/v1/feeds/${feedId}/imports`, {
    format: 'xml',
    content: feed(ids),
  });
  await stack.importsIdle();
  return (await stack.admin('GET', `/admin/v1/feeds/${feedId}/imports/${started.body.importId}`)).body;
}

beforeAll(async () => {
  // The domain raises the clause limit for visual-word queries (one clause per word); the fake enforces it.
  opensearch = await startFakeOpenSearch({
    maxClauseCount: VISUAL_WORD_MAX_QUERY_TERMS + VISUAL_WORD_FILTER_CLAUSES,
  });
  stack = await startTestStack({
    DEMO_SEED: 'false',
    VECTOR_INDEX: 'opensearch',
    OPENSEARCH_URL: opensearch.url,
  });
  feedId = (await stack.admin('POST', '/admin/v1/feeds', { name: 'OS', plan: 'pro' })).body.feedId;
  searchId = (await stack.admin('POST', `/admin/v1/feeds/${feedId}/keys`, {})).body.searchId;
}, 60_000);

afterAll(async () => {
  await stack?.stop();
  await opensearch?.close();
});

const call = (path: string, body: Record<string, unknown>) =>
  stack.call('POST', path, { body, headers: { authorization: `Bearer ${searchId}` } });

describe('catalogue on the OpenSearch vector index', () => {
  it('imports, searches, filters related products and removes unlisted products', async () => {
    // Prepare
    const ids = ['tools-wrench', 'tools-plier2', 'others-bucket', 'others-pan'];
    expect(await importFeed(ids)).toMatchObject({ status: 'succeeded', embedded: 4 });
    // Act / Assess: search by a product's own photo.
    const search = await call('/api/v1/search/image', { imageData: await photo('others-pan'), limit: 10 });
    expect(search.status).toBe(200);
    expect(search.body[0]).toMatchObject({ product_id: 'others-pan' });
    expect(search.body[0].score).toBeGreaterThan(0.99);
    // Related by product id, with a filter, excluding the reference.
    const related = await call('/api/v1/related', {
      productId: 'tools-wrench',
      filters: [{ key: 'color', value: 'Silver' }],
    });
    expect(related.body.map((p: { product_id: string }) => p.product_id)).toEqual(['tools-plier2']);
    // A full re-import without the bucket removes it from the index.
    expect(await importFeed(ids.filter((id) => id !== 'others-bucket'))).toMatchObject({
      removed: 1,
      skipped: 3,
    });
    const after = await call('/api/v1/search/image', { imageData: await photo('others-bucket'), limit: 10 });
    expect(after.body.map((p: { product_id: string }) => p.product_id)).not.toContain('others-bucket');
    expect(opensearch.requests.some((r) => r.path.includes('_search'))).toBe(true);
    // The keypoint shortlist queried the visual-word index beside the k-NN index (it swallows a failing
    // word index: check the answers, not just the requests).
    const wordSearches = opensearch.requests.filter((r) => r.path === '/products-visual-words-v1/_search');
    expect(wordSearches.length).toBeGreaterThan(0);
    expect(wordSearches.map((r) => r.status)).toEqual(wordSearches.map(() => 200));
  });
});
