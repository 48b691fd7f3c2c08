import type { Container } from '#lib/container.ts';
import type { Feed } from '#lib/domain/feeds.ts';

/** The search id stubPublicStores knows, bound to feed "shop". */
export const STUB_SEARCH_ID = 'vps_3hV8rQm0yJt2cW9pXb4LkN1sZa6DfGe7';

/**
 * Stores of a public endpoint's checks, stubbed in `c`: STUB_SEARCH_ID is a key of feed "shop" (free plan,
 * any origin, `feed` over that), the rate limit admits every request, and each metered answer goes to
 * `record` (nothing by default).
 */
export function stubPublicStores(
  c: Container,
  options: { feed?: Partial<Feed>; record?: (entry: { outcome: string }) => Promise<void> } = {},
): void {
  const now = '2026-11-22T10:00:00.000Z';
  c.keys = {
    get: async (searchId: string) =>
      searchId === STUB_SEARCH_ID
        ? { searchId, feedId: 'shop', name: 'k', createdAt: now, feedCreatedAt: now }
        : undefined,
    touch: async () => undefined,
  } as unknown as Container['keys'];
  c.feeds = {
    get: async () => ({
      feedId: 'shop',
      name: 'Shop',
      plan: 'free',
      domains: [],
      requireOrigin: false,
      createdAt: now,
      updatedAt: now,
      ...options.feed,
    }),
  } as unknown as Container['feeds'];
  c.usage = {
    consume: async () => ({
      allowed: true,
      limit: 100,
      remaining: 99,
      resetSeconds: 60,
      retryAfterSeconds: 0,
    }),
    record: options.record ?? (async () => undefined),
  } as unknown as Container['usage'];
}
