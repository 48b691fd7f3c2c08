import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { expectError } from '#test/support/error-shape.ts';
import { startTestStack, type TestStack } from '#test/support/local-stack.ts';

/**
 * A feed deletion that outlasts its request, over HTTP: FEED_DELETE_BUDGET_MS=0 hands every deletion to
 * the import runner (in-process here, the worker in AWS), as a large feed's deletion is after 20 s.
 */
let stack: TestStack;

beforeAll(async () => {
  stack = await startTestStack({ FEED_DELETE_BUDGET_MS: '0' });
  await stack.importsIdle();
});

afterAll(async () => {
  await stack?.stop();
});

describe('DELETE /admin/v1/feeds/{feedId} handed over to the import runner', () => {
  it('answers 202, hides the feed at once, and the runner removes everything', async () => {
    const { feedId, searchId } = stack.demo;
    const before = await stack.admin('GET', `/admin/v1/feeds/${feedId}/products?limit=5`);
    expect(before.body.products.length).toBeGreaterThan(0);

    const deleted = await stack.admin('DELETE', `/admin/v1/feeds/${feedId}`);

    expect(deleted.status).toBe(202);
    expect(deleted.body).toEqual({ feedId, status: 'deleting' });
    expectError(await stack.admin('GET', `/admin/v1/feeds/${feedId}`), 404, 'feed_not_found');
    const search = await stack.call('POST', '/api/v1/related', {
      body: { productId: before.body.products[0].product_id },
      headers: { authorization: `Bearer ${searchId}` },
    });
    expectError(search, 401, 'invalid_search_id');

    await stack.importsIdle();

    expect(await stack.container.feeds.get(feedId, { fresh: true })).toBeUndefined();
    expect(await stack.container.objects.list(`features/${feedId}/`)).toEqual([]);
    expect(await stack.container.objects.list(`imports/${feedId}/`)).toEqual([]);
    expect((await stack.admin('POST', '/admin/v1/feeds', { feedId, name: 'Again' })).status).toBe(201);
    expect((await stack.admin('GET', `/admin/v1/feeds/${feedId}/products?limit=5`)).body.products).toEqual(
      [],
    );
  });
});
