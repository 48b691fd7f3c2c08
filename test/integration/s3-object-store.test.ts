import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ObjectStoreFeatureStore } from '#lib/adapters/object-store-feature-store.ts';
import { createS3Client, S3ObjectStore } from '#lib/adapters/s3-object-store.ts';
import { mapLimit } from '#lib/ingest/concurrency.ts';
import { startTestStores } from '#test/support/embedded-stores.ts';

let store: S3ObjectStore;
let stop: () => Promise<void>;

beforeAll(async () => {
  const started = await startTestStores();
  stop = started.stop;
  store = new S3ObjectStore(createS3Client(started.config), started.config.assetsBucket);
});

afterAll(async () => {
  await stop?.();
});

describe('S3ObjectStore against the S3-protocol server', () => {
  it('round-trips bytes exactly, lists by prefix and deletes', async () => {
    const bytes = Buffer.from(Array.from({ length: 70_000 }, (_, i) => i % 251));
    await store.put('feeds/a/file.xml', '<rss/>', 'application/xml');
    await store.put('feeds/a/image.bin', bytes);
    await store.put('other/x', 'x');

    expect((await store.get('feeds/a/image.bin'))?.equals(bytes)).toBe(true);
    expect((await store.get('feeds/a/file.xml'))?.toString()).toBe('<rss/>');
    expect((await store.list('feeds/a/')).sort()).toEqual(['feeds/a/file.xml', 'feeds/a/image.bin']);

    await store.delete('feeds/a/file.xml');
    expect(await store.get('feeds/a/file.xml')).toBeUndefined();
  });

  it('keeps the features of products named "." and ".." inside their own feed', async () => {
    // Product ".." of every feed used to share features/0.gvlf (the store's files resolve the dots).
    const features = new ObjectStoreFeatureStore(store, { cacheItems: 0 });
    const set = (x: number) => ({
      width: 10,
      height: 10,
      points: Float32Array.from([x, x]),
      descriptors: new Uint32Array(8).fill(x),
    });
    const record = (x: number) => ({ original: set(x), mirrored: set(x) });
    await features.put({ feedId: 'dots-e', productId: '..', imageIndex: 0 }, record(1));
    await features.put({ feedId: 'dots-f', productId: '..', imageIndex: 0 }, record(2));
    await features.put({ feedId: 'dots-e', productId: '.', imageIndex: 0 }, record(3));

    const read = await features.getMany([
      { feedId: 'dots-e', productId: '..', imageIndex: 0 },
      { feedId: 'dots-f', productId: '..', imageIndex: 0 },
      { feedId: 'dots-e', productId: '.', imageIndex: 0 },
    ]);
    expect(read.map((found) => found?.original.points[0])).toEqual([1, 2, 3]);
    await features.deleteFeed('dots-e');
    await features.deleteFeed('dots-f');
    expect(await store.list('features/')).toEqual([]);
  });

  it('deletes many objects across DeleteObjects batches, absent keys included, and nothing else', async () => {
    const keys = Array.from({ length: 1003 }, (_, i) => `many/k${i}`);
    await mapLimit(keys, 32, (key) => store.put(key, 'x'));
    await store.put('many-kept/k0', 'x');

    await store.deleteMany([...keys, 'many/never-stored']);

    expect(await store.list('many/')).toEqual([]);
    expect(await store.list('many-kept/')).toEqual(['many-kept/k0']);
    await store.deleteMany([]);
  });

  it('lists a page of at most 1000 keys at a time, and goes on past the keys deleted meanwhile', async () => {
    const keys = Array.from({ length: 1005 }, (_, i) => `paged/k${String(i).padStart(4, '0')}`);
    await mapLimit(keys, 32, (key) => store.put(key, 'x'));

    const sizes: number[] = [];
    for await (const page of store.listPages('paged/')) {
      sizes.push(page.length);
      await store.deleteMany(page);
    }

    expect(sizes).toEqual([1000, 5]);
    expect(await store.list('paged/')).toEqual([]);
  });

  it('fails a deletion when S3 lists keys it could not delete (its answer is 200 all the same)', async () => {
    const refusing = { send: async () => ({ Errors: [{ Key: 'a', Code: 'AccessDenied', Message: 'no' }] }) };
    const failing = new S3ObjectStore(refusing as never, 'bucket');
    await expect(failing.deleteMany(['a', 'b'])).rejects.toThrow(
      'Could not delete 1 of 2 objects (a: AccessDenied no).',
    );
  });

  it('returns undefined for a missing object', async () => {
    expect(await store.get('missing/key')).toBeUndefined();
  });
});
