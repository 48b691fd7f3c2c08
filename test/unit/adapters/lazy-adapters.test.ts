import { describe, expect, it } from 'vitest';
import { LazyApiKeyRegistry, LazyVisualWordIndex } from '#lib/adapters/lazy-adapters.ts';
import type { ApiKeyRegistry, VisualWordIndex } from '#lib/ports.ts';

describe('lazy adapters', () => {
  it('builds the visual-word index on first use, once, and forwards every call to it', async () => {
    // Prepare
    const calls: string[] = [];
    let loads = 0;
    const index: VisualWordIndex = {
      upsert: async () => void calls.push('upsert'),
      deleteProducts: async (feedId, ids, except = []) =>
        void calls.push(`deleteProducts ${feedId} ${ids.join()} except ${except.join()}`),
      deleteFeed: async (feedId) => void calls.push(`deleteFeed ${feedId}`),
      search: async (query) => [{ id: `${query.feedId}/p/0`, productId: 'p', itemGroupId: 'p', score: 1 }],
      flush: async () => void calls.push('flush'),
    };
    const lazy = new LazyVisualWordIndex(async () => ((loads += 1), index));
    // Act
    const built = loads;
    await lazy.upsert([]);
    await lazy.deleteProducts('f', ['a', 'b'], ['f/a/0']);
    await lazy.deleteFeed('f');
    const hits = await lazy.search({ feedId: 'f', words: new Float64Array(), k: 1 });
    await lazy.flush();
    // Assess
    expect(built).toBe(0);
    expect(loads).toBe(1);
    expect(calls).toEqual(['upsert', 'deleteProducts f a,b except f/a/0', 'deleteFeed f', 'flush']);
    expect(hits.map((h) => h.id)).toEqual(['f/p/0']);
  });

  it('retries a failed load at the next call', async () => {
    // Prepare: the first load fails (a module that cannot load), the second succeeds
    let loads = 0;
    const unregistered: string[] = [];
    const registry: ApiKeyRegistry = {
      register: async () => undefined,
      unregister: async (searchId) => void unregistered.push(searchId),
    };
    const lazy = new LazyApiKeyRegistry(async () => {
      loads += 1;
      if (loads === 1) throw new Error('cannot load the client');
      return registry;
    });
    // Act + Assess
    await expect(lazy.unregister('vps_1')).rejects.toThrow('cannot load the client');
    await lazy.unregister('vps_2');
    await lazy.unregister('vps_3');
    expect(unregistered).toEqual(['vps_2', 'vps_3']);
    expect(loads).toBe(2);
  });
});
