import { describe, expect, it } from 'vitest';
import { featuresKey, ObjectStoreFeatureStore } from '#lib/adapters/object-store-feature-store.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';
import { MemoryObjectStore } from './catalogue/fakes.ts';

function features(x: number): LocalFeatures {
  const set = {
    width: 100,
    height: 80,
    points: Float32Array.from([x, 2]),
    descriptors: new Uint32Array(8).fill(x),
  };
  return { original: set, mirrored: set };
}

/** Counts reads of the underlying store. */
class CountingStore extends MemoryObjectStore {
  reads = 0;
  override async get(key: string) {
    this.reads += 1;
    return super.get(key);
  }
}

describe('ObjectStoreFeatureStore', () => {
  it('round-trips features through the binary record and answers undefined for missing or corrupt ones', async () => {
    // Prepare
    const objects = new MemoryObjectStore();
    const store = new ObjectStoreFeatureStore(objects, { cacheItems: 0 });
    const ref = { feedId: 'f', productId: 'a', imageIndex: 1 };
    await store.put(ref, features(7));
    await objects.put(featuresKey({ ...ref, productId: 'bad' }), Buffer.from('not a record'));
    // Act
    const [found, missing, corrupt] = await store.getMany([
      ref,
      { ...ref, productId: 'none' },
      { ...ref, productId: 'bad' },
    ]);
    // Assess
    expect(found?.original.points[0]).toBe(7);
    expect(found?.mirrored?.descriptors[3]).toBe(7);
    expect(missing).toBeUndefined();
    expect(corrupt).toBeUndefined();
  });

  it('serves repeated reads from a bounded LRU until the entry is older than the TTL', async () => {
    // Prepare
    let now = 0;
    const objects = new CountingStore();
    const writer = new ObjectStoreFeatureStore(objects, { cacheItems: 0 });
    const refs = ['a', 'b', 'c'].map((productId) => ({ feedId: 'f', productId, imageIndex: 0 }));
    for (const [i, ref] of refs.entries()) await writer.put(ref, features(i));
    const store = new ObjectStoreFeatureStore(objects, { cacheItems: 2, ttlMs: 1000, now: () => now });
    // Act / Assess: a and b cached; c evicts a (least recently used)
    await store.getMany([refs[0]!, refs[1]!]);
    await store.getMany([refs[1]!]);
    expect(objects.reads).toBe(2);
    await store.getMany([refs[2]!]);
    await store.getMany([refs[1]!]);
    expect(objects.reads).toBe(3);
    await store.getMany([refs[0]!]);
    expect(objects.reads).toBe(4);
    now = 1001;
    await store.getMany([refs[0]!]);
    expect(objects.reads).toBe(5);
  });

  it('bounds the cache by the bytes of its records too, freed again as records are deleted', async () => {
    // Prepare: records of 80 bytes (2 points and a descriptor, twice), one of 8,080; room for 200 bytes
    const objects = new CountingStore();
    const writer = new ObjectStoreFeatureStore(objects, { cacheItems: 0 });
    const refs = ['a', 'b', 'c', 'd'].map((productId) => ({ feedId: 'f', productId, imageIndex: 0 }));
    for (const [i, ref] of refs.entries()) await writer.put(ref, features(i));
    const big = { feedId: 'f', productId: 'big', imageIndex: 0 };
    const bigSet = {
      width: 10,
      height: 10,
      points: new Float32Array(2 * 101),
      descriptors: new Uint32Array(8 * 101),
    };
    await writer.put(big, { original: bigSet, mirrored: bigSet });
    const store = new ObjectStoreFeatureStore(objects, { cacheItems: 100, cacheBytes: 200 });
    const readsOf = async (...wanted: typeof refs) => {
      const before = objects.reads;
      await store.getMany(wanted);
      return objects.reads - before;
    };
    // Act / Assess: two records fit, a third pushes out the least recently used
    expect(await readsOf(refs[0]!, refs[1]!)).toBe(2);
    expect(await readsOf(refs[0]!, refs[1]!)).toBe(0);
    expect(await readsOf(refs[2]!)).toBe(1);
    expect(await readsOf(refs[1]!, refs[2]!)).toBe(0);
    expect(await readsOf(refs[0]!)).toBe(1);
    // A record larger than the bound is read each time and pushes nothing out
    expect(await readsOf(big)).toBe(1);
    expect(await readsOf(big)).toBe(1);
    expect(await readsOf(refs[0]!, refs[2]!)).toBe(0);
    // A deleted record gives its bytes back: two others then fit beside the one left
    await store.deleteProducts('f', ['a']);
    expect(await readsOf(refs[3]!)).toBe(1);
    expect(await readsOf(refs[2]!, refs[3]!)).toBe(0);
  });

  it('does not cache what a read brought back while this process replaced or deleted the record', async () => {
    // Prepare: reads that take a while, so that a write lands while one is in flight
    class SlowReads extends MemoryObjectStore {
      override async get(key: string) {
        const value = await super.get(key);
        await new Promise((resolve) => setTimeout(resolve, 30));
        return value;
      }
    }
    const objects = new SlowReads();
    const [ref, other] = ['a', 'b'].map((productId) => ({ feedId: 'f', productId, imageIndex: 0 }));
    const writer = new ObjectStoreFeatureStore(objects, { cacheItems: 0 });
    await writer.put(ref!, features(1));
    await writer.put(other!, features(1));
    const store = new ObjectStoreFeatureStore(objects, { cacheItems: 10, ttlMs: 60_000 });
    // Act: a read of version 1 in flight while version 2 is written; another while the record is deleted
    const replacedRead = store.getMany([ref!]);
    await store.put(ref!, features(2));
    const deletedRead = store.getMany([other!]);
    await store.deleteProducts('f', ['b']);
    const inFlight = [await replacedRead, await deletedRead];
    // Assess: the reads answered what they read; the cache holds what the store holds
    expect(inFlight.map(([found]) => found?.original.points[0])).toEqual([1, 1]);
    expect((await store.getMany([ref!]))[0]?.original.points[0]).toBe(2);
    expect(await store.getMany([other!])).toEqual([undefined]);
  });

  it('deletes every image of a product, and only that product (ids are encoded in keys)', async () => {
    const objects = new MemoryObjectStore();
    const store = new ObjectStoreFeatureStore(objects, { cacheItems: 10 });
    for (const [productId, imageIndex] of [
      ['a', 0],
      ['a', 1],
      ['a/b', 0],
    ] as const)
      await store.put({ feedId: 'f', productId, imageIndex }, features(1));
    await store.deleteProducts('f', ['a']);
    expect([...objects.objects.keys()]).toEqual([
      featuresKey({ feedId: 'f', productId: 'a/b', imageIndex: 0 }),
    ]);
    expect(await store.getMany([{ feedId: 'f', productId: 'a', imageIndex: 0 }])).toEqual([undefined]);
  });

  it('keeps the images it is told to keep, and deletes a whole feed', async () => {
    const objects = new MemoryObjectStore();
    const store = new ObjectStoreFeatureStore(objects, { cacheItems: 10 });
    for (const imageIndex of [0, 1, 2])
      await store.put({ feedId: 'f', productId: 'a', imageIndex }, features(1));
    await store.put({ feedId: 'g', productId: 'a', imageIndex: 0 }, features(1));

    await store.deleteProducts('f', ['a'], [{ feedId: 'f', productId: 'a', imageIndex: 1 }]);
    expect([...objects.objects.keys()].sort()).toEqual(
      [
        featuresKey({ feedId: 'f', productId: 'a', imageIndex: 1 }),
        featuresKey({ feedId: 'g', productId: 'a', imageIndex: 0 }),
      ].sort(),
    );

    await store.deleteFeed('f');
    expect([...objects.objects.keys()]).toEqual([
      featuresKey({ feedId: 'g', productId: 'a', imageIndex: 0 }),
    ]);
    expect(await store.getMany([{ feedId: 'f', productId: 'a', imageIndex: 1 }])).toEqual([undefined]);
  });

  it("stops a feed's deletion between slices once its signal aborts, keeping the rest", async () => {
    const objects = new MemoryObjectStore();
    const store = new ObjectStoreFeatureStore(objects, { cacheItems: 0 });
    for (let i = 0; i < 1500; i += 1)
      await objects.put(featuresKey({ feedId: 'f', productId: `p${i}`, imageIndex: 0 }), 'x');
    const stop = new AbortController();
    const deleteMany = objects.deleteMany.bind(objects);
    objects.deleteMany = async (keys) => {
      await deleteMany(keys);
      stop.abort();
    };

    await expect(store.deleteFeed('f', { signal: stop.signal })).rejects.toThrow();

    expect(objects.objects.size).toBe(500);
  });
});
