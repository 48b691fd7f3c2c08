import type { Feed } from '#lib/domain/feeds.ts';
import type { SearchKey } from '#lib/domain/keys.ts';
import type { FeedStore, KeyStore } from '#lib/ports.ts';

/**
 * Short-lived in-process caches in front of the two lookups every public request makes. Changes made
 * through the same process invalidate at once; other processes (other Lambda functions) see a change
 * within `ttlMs`. That bound is the documented propagation delay of a revocation or a domain edit.
 */
class TtlCache<V> {
  private readonly entries = new Map<string, { value: V; expires: number }>();
  constructor(
    private readonly ttlMs: number,
    private readonly maxEntries = 10_000,
  ) {}

  async get(key: string, load: () => Promise<V>): Promise<V> {
    const hit = this.entries.get(key);
    if (hit && hit.expires > Date.now()) return hit.value;
    const value = await load();
    if (this.ttlMs > 0) {
      if (this.entries.size >= this.maxEntries) this.entries.clear();
      this.entries.set(key, { value, expires: Date.now() + this.ttlMs });
    }
    return value;
  }

  peek(key: string): V | undefined {
    const hit = this.entries.get(key);
    return hit && hit.expires > Date.now() ? hit.value : undefined;
  }

  delete(key: string): void {
    this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
  }
}

export class CachingKeyStore implements KeyStore {
  private readonly cache: TtlCache<SearchKey | undefined>;
  constructor(
    private readonly inner: KeyStore,
    ttlMs: number,
  ) {
    this.cache = new TtlCache(ttlMs);
  }

  get(searchId: string) {
    return this.cache.get(searchId, () => this.inner.get(searchId));
  }
  create(key: SearchKey) {
    this.cache.delete(key.searchId);
    return this.inner.create(key);
  }
  listByFeed(feedId: string) {
    return this.inner.listByFeed(feedId);
  }
  async revoke(searchId: string, at: Date) {
    await this.inner.revoke(searchId, at);
    this.cache.delete(searchId);
  }
  async touch(searchId: string, at: Date) {
    await this.inner.touch(searchId, at);
    // Keep the cached copy's lastUsedAt current so the touch throttle does not re-fire every request.
    const cached = this.cache.peek(searchId);
    if (cached) cached.lastUsedAt = at.toISOString();
  }
  async delete(searchId: string) {
    await this.inner.delete(searchId);
    this.cache.delete(searchId);
  }
  async deleteByFeed(feedId: string) {
    await this.inner.deleteByFeed(feedId);
    this.cache.clear();
  }
}

export class CachingFeedStore implements FeedStore {
  private readonly cache: TtlCache<Feed | undefined>;
  constructor(
    private readonly inner: FeedStore,
    ttlMs: number,
  ) {
    this.cache = new TtlCache(ttlMs);
  }

  get(feedId: string, options?: { fresh?: boolean }) {
    if (options?.fresh) return this.inner.get(feedId, options);
    return this.cache.get(feedId, () => this.inner.get(feedId));
  }
  async create(feed: Feed) {
    await this.inner.create(feed);
    this.cache.delete(feed.feedId);
  }
  list() {
    return this.inner.list();
  }
  async put(feed: Feed, expectedUpdatedAt?: string | null) {
    await this.inner.put(feed, expectedUpdatedAt);
    this.cache.delete(feed.feedId);
  }
  async markDeleting(feedId: string, at: Date, createdAt?: string, updatedAt?: string | null) {
    await this.inner.markDeleting(feedId, at, createdAt, updatedAt);
    this.cache.delete(feedId);
  }
  async delete(feedId: string, createdAt?: string) {
    await this.inner.delete(feedId, createdAt);
    this.cache.delete(feedId);
  }
}
