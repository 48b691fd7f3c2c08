import { describe, expect, it, vi } from 'vitest';
import { CachingKeyStore } from '#lib/adapters/caching-stores.ts';
import type { SearchKey } from '#lib/domain/keys.ts';
import type { KeyStore } from '#lib/ports.ts';

function fakeKeyStore(): KeyStore & { reads: number; keys: Map<string, SearchKey> } {
  const keys = new Map<string, SearchKey>();
  const store = {
    reads: 0,
    keys,
    async create(key: SearchKey) {
      keys.set(key.searchId, { ...key });
    },
    async get(searchId: string) {
      store.reads++;
      const key = keys.get(searchId);
      return key ? { ...key } : undefined;
    },
    async listByFeed(feedId: string) {
      return [...keys.values()].filter((k) => k.feedId === feedId);
    },
    async revoke(searchId: string, at: Date) {
      const key = keys.get(searchId);
      if (key) key.revokedAt = at.toISOString();
    },
    async touch() {},
    async delete(searchId: string) {
      keys.delete(searchId);
    },
    async deleteByFeed(feedId: string) {
      for (const [id, key] of keys) if (key.feedId === feedId) keys.delete(id);
    },
  };
  return store;
}

const key: SearchKey = { searchId: 'k', feedId: 'f', name: 'web', createdAt: '2026-11-22T00:00:00Z' };

describe('CachingKeyStore', () => {
  it('serves repeated lookups from memory within the TTL', async () => {
    const inner = fakeKeyStore();
    await inner.create(key);
    const cached = new CachingKeyStore(inner, 5000);

    await cached.get('k');
    await cached.get('k');

    expect(inner.reads).toBe(1);
  });

  it('sees a revocation made through it at once', async () => {
    const inner = fakeKeyStore();
    await inner.create(key);
    const cached = new CachingKeyStore(inner, 5000);
    await cached.get('k');

    await cached.revoke('k', new Date('2026-11-22T01:00:00Z'));

    expect((await cached.get('k'))?.revokedAt).toBe('2026-11-22T01:00:00.000Z');
  });

  it('sees a change made elsewhere once the TTL has passed', async () => {
    vi.useFakeTimers();
    try {
      const inner = fakeKeyStore();
      await inner.create(key);
      const cached = new CachingKeyStore(inner, 5000);
      await cached.get('k');
      await inner.revoke('k', new Date());

      expect((await cached.get('k'))?.revokedAt).toBeUndefined();
      vi.advanceTimersByTime(5001);
      expect((await cached.get('k'))?.revokedAt).toEqual(expect.any(String));
    } finally {
      vi.useRealTimers();
    }
  });

  it('does not cache with a TTL of zero', async () => {
    const inner = fakeKeyStore();
    const cached = new CachingKeyStore(inner, 0);
    await cached.get('missing');
    await inner.create(key);
    expect(await cached.get('k')).toBeDefined();
    expect(inner.reads).toBe(2);
  });
});
