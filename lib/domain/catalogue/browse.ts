import { requireFeed } from '#lib/domain/admin/feeds.ts';
import { adminProductView, type Product } from '#lib/domain/products.ts';
import type { FeedStore, ProductStore } from '#lib/ports.ts';

/** Admin products browser. Steps: check the feed, read one page in product_id order, pass the cursor on. */
export async function listProducts(
  deps: { feeds: FeedStore; products: ProductStore },
  feedId: string,
  query: { limit: number; cursor?: string | undefined },
): Promise<{ products: ReturnType<typeof adminProductView>[]; cursor?: string }> {
  await requireFeed(deps.feeds, feedId);
  const page: { items: Product[]; cursor?: string } = await deps.products.page(
    feedId,
    query.limit,
    query.cursor,
  );
  return { products: page.items.map(adminProductView), ...(page.cursor ? { cursor: page.cursor } : {}) };
}
