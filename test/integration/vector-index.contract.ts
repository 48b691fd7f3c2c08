import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { VectorDocument, VectorHit, VectorIndex, VectorQuery } from '#lib/ports.ts';

/** Dimension of every contract vector: small enough to reason about, large enough for real graphs. */
export const CONTRACT_DIMENSION = 8;

/** One adapter under test; `reopen` (adapters that persist) returns a fresh instance over the same storage. */
export interface VectorIndexSubject {
  index: VectorIndex;
  reopen?: () => Promise<VectorIndex>;
  close: () => Promise<void>;
}

/** L2-normalised vector from leading components (the rest zero). */
export function unit(...components: number[]): Float32Array {
  const vector = new Float32Array(CONTRACT_DIMENSION);
  vector.set(components);
  const norm = Math.hypot(...vector);
  return vector.map((value) => value / norm);
}

/** Deterministic pseudo-random L2-normalised vector (mulberry32). */
export function randomUnit(seed: number, dimension = CONTRACT_DIMENSION): Float32Array {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296 - 0.5;
  };
  const vector = Float32Array.from({ length: dimension }, next);
  const norm = Math.hypot(...vector);
  return vector.map((value) => value / norm);
}

export function doc(
  feedId: string,
  productId: string,
  vector: Float32Array,
  options: { image?: number; itemGroupId?: string; fields?: Record<string, string[]> } = {},
): VectorDocument {
  return {
    id: `${feedId}/${productId}/${options.image ?? 0}`,
    feedId,
    productId,
    itemGroupId: options.itemGroupId ?? productId,
    vector,
    fields: options.fields ?? {},
  };
}

/**
 * The behaviour every `VectorIndex` adapter owes the domain. Each adapter's test file calls this with a
 * factory that yields a fresh, empty index per test.
 */
export function describeVectorIndexContract(
  name: string,
  factory: () => Promise<VectorIndexSubject>,
  options: { persistent?: boolean } = {},
): void {
  describe(`VectorIndex contract: ${name}`, () => {
    let subject: VectorIndexSubject;
    let index: VectorIndex;

    beforeEach(async () => {
      subject = await factory();
      index = subject.index;
    });

    afterEach(async () => {
      await subject.close();
    });

    it('returns the nearest documents first with their cosine similarity', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'far', unit(-1, 0)),
        doc('f1', 'exact', unit(1, 0)),
        doc('f1', 'orthogonal', unit(0, 1)),
        doc('f1', 'close', unit(0.8, 0.6)),
      ]);

      // Act
      const hits = await index.search({ feedId: 'f1', vector: unit(1, 0), k: 4 });

      // Assess
      expect(hits.map((hit) => hit.productId)).toEqual(['exact', 'close', 'orthogonal', 'far']);
      expect(hits.map((hit) => hit.similarity)).toEqual([
        expect.closeTo(1, 5),
        expect.closeTo(0.8, 5),
        expect.closeTo(0, 5),
        expect.closeTo(-1, 5),
      ]);
      expect(hits[0]).toEqual({
        id: 'f1/exact/0',
        productId: 'exact',
        itemGroupId: 'exact',
        similarity: expect.any(Number),
      });
    });

    it('breaks similarity ties by productId', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'p-c', unit(1, 1)),
        doc('f1', 'p-a', unit(1, 1)),
        doc('f1', 'p-b', unit(1, 1)),
      ]);

      // Act
      const hits = await index.search({ feedId: 'f1', vector: unit(1, 0), k: 3 });

      // Assess
      expect(hits.map((hit) => hit.productId)).toEqual(['p-a', 'p-b', 'p-c']);
    });

    it('never returns documents of another feed', async () => {
      // Prepare
      await index.upsert([
        doc('feed-a', 'a1', unit(1, 0)),
        doc('feed-b', 'b1', unit(1, 0.1)),
        doc('feed-b', 'b2', unit(0, 1)),
      ]);

      // Act
      const hitsA = await index.search({ feedId: 'feed-a', vector: unit(1, 0), k: 10 });
      const hitsB = await index.search({ feedId: 'feed-b', vector: unit(1, 0), k: 10 });

      // Assess
      expect(hitsA.map((hit) => hit.id)).toEqual(['feed-a/a1/0']);
      expect(hitsB.map((hit) => hit.id)).toEqual(['feed-b/b1/0', 'feed-b/b2/0']);
    });

    it('applies filters with AND across keys and OR within a key', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'nike-red', unit(1, 0), { fields: { brand: ['nike'], color: ['red'] } }),
        doc('f1', 'adidas-red', unit(0.9, 0.1), { fields: { brand: ['adidas'], color: ['red', 'white'] } }),
        doc('f1', 'nike-blue', unit(0.8, 0.2), { fields: { brand: ['nike'], color: ['blue'] } }),
        doc('f1', 'puma-red', unit(0.7, 0.3), { fields: { brand: ['puma'], color: ['red'] } }),
        doc('f1', 'unbranded-red', unit(0.6, 0.4), { fields: { color: ['red'] } }),
      ]);

      // Act
      const hits = await index.search({
        feedId: 'f1',
        vector: unit(1, 0),
        k: 10,
        filter: { brand: ['nike', 'adidas'], color: ['red'] },
      });

      // Assess
      expect(hits.map((hit) => hit.productId)).toEqual(['nike-red', 'adidas-red']);
    });

    it('filters on metadata fields', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'cotton', unit(1, 0), { fields: { 'metadata.fabric': ['cotton'], brand: ['acme'] } }),
        doc('f1', 'wool', unit(1, 0.1), { fields: { 'metadata.fabric': ['wool'], brand: ['acme'] } }),
        doc('f1', 'plain', unit(1, 0.2), { fields: { brand: ['acme'] } }),
      ]);

      // Act
      const hits = await index.search({
        feedId: 'f1',
        vector: unit(1, 0),
        k: 10,
        filter: { 'metadata.fabric': ['wool'] },
      });

      // Assess
      expect(hits.map((hit) => hit.productId)).toEqual(['wool']);
    });

    it('takes field names like Object.prototype members as plain names', async () => {
      // Prepare: JSON.parse makes `__proto__` an own key, as a parsed request body would
      const fields = (json: string) => JSON.parse(json) as Record<string, string[]>;
      await index.upsert([
        doc('f1', 'a', unit(1, 0), { fields: fields('{"__proto__":["x"],"color":["red"]}') }),
        doc('f1', 'b', unit(1, 0.1), { fields: fields('{"constructor":["y"],"color":["red"]}') }),
        doc('f1', 'c', unit(1, 0.2), { fields: { color: ['red'] } }),
        // (So that `color` is no wider than `constructor`: rows without a `constructor` of their own meet it.)
        doc('f1', 'd', unit(1, 0.3), { fields: { constructor: ['y'] } }),
        doc('f1', 'e', unit(1, 0.4), { fields: { constructor: ['y'] } }),
      ]);
      const answers = async (searched: VectorIndex) => {
        const ids = async (filter: Record<string, string[]>) =>
          (await searched.search({ feedId: 'f1', vector: unit(1, 0), k: 10, filter })).map(
            (hit) => hit.productId,
          );
        return [
          await ids(fields('{"__proto__":["x"]}')),
          await ids({ constructor: ['y'] }),
          await ids({ color: ['red'], constructor: ['y'] }),
          await ids({ color: ['red'], toString: ['z'] }),
          await ids({ color: ['red'], hasOwnProperty: ['z'] }),
        ];
      };
      const expected = [['a'], ['b', 'd', 'e'], ['b'], [], []];

      // Act and assess (and after a reopen, for adapters that load what they saved)
      expect(await answers(index)).toEqual(expected);
      if (options.persistent && subject.reopen) {
        await index.flush();
        expect(await answers(await subject.reopen())).toEqual(expected);
      }
    });

    it('returns nothing when no document matches the filter', async () => {
      // Prepare
      await index.upsert([doc('f1', 'p1', unit(1, 0), { fields: { brand: ['nike'] } })]);

      // Act
      const hits = await index.search({
        feedId: 'f1',
        vector: unit(1, 0),
        k: 10,
        filter: { brand: ['puma'] },
      });

      // Assess
      expect(hits).toEqual([]);
    });

    it('leaves out excluded item groups', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'shirt-s', unit(1, 0), { itemGroupId: 'shirt' }),
        doc('f1', 'shirt-m', unit(1, 0.05), { itemGroupId: 'shirt' }),
        doc('f1', 'dress', unit(1, 0.1), { itemGroupId: 'dress' }),
        doc('f1', 'hat', unit(1, 0.2), { itemGroupId: 'hat' }),
      ]);

      // Act
      const hits = await index.search({
        feedId: 'f1',
        vector: unit(1, 0),
        k: 10,
        excludeItemGroupIds: ['shirt', 'hat'],
      });

      // Assess
      expect(hits.map((hit) => hit.productId)).toEqual(['dress']);
    });

    it('replaces a document upserted again with the same id', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'p1', unit(1, 0), { fields: { color: ['red'] } }),
        doc('f1', 'p2', unit(0, 1), { fields: { color: ['blue'] } }),
      ]);

      // Act
      await index.upsert([doc('f1', 'p1', unit(0, -1), { fields: { color: ['green'] } })]);

      // Assess
      expect(await index.count('f1')).toBe(2);
      const nearest = await index.search({ feedId: 'f1', vector: unit(0, -1), k: 1 });
      expect(nearest.map((hit) => [hit.productId, hit.similarity])).toEqual([['p1', expect.closeTo(1, 5)]]);
      expect(
        await index.search({ feedId: 'f1', vector: unit(1, 0), k: 5, filter: { color: ['red'] } }),
      ).toEqual([]);
      const green = await index.search({
        feedId: 'f1',
        vector: unit(1, 0),
        k: 5,
        filter: { color: ['green'] },
      });
      expect(green.map((hit) => hit.productId)).toEqual(['p1']);
      const stored = await index.getVectors(['f1/p1/0']);
      expect([...(stored.get('f1/p1/0') ?? [])]).toEqual([...unit(0, -1)]);
    });

    it('deletes every image of the given products and nothing else', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'p1', unit(1, 0), { image: 0 }),
        doc('f1', 'p1', unit(1, 0.1), { image: 1 }),
        doc('f1', 'p2', unit(1, 0.2)),
        doc('f1', 'p3', unit(1, 0.3)),
        doc('f2', 'p1', unit(1, 0)),
      ]);

      // Act
      await index.deleteProducts('f1', ['p1', 'p3', 'never-indexed']);

      // Assess
      expect(await index.count('f1')).toBe(1);
      expect(await index.count('f2')).toBe(1);
      const hits = await index.search({ feedId: 'f1', vector: unit(1, 0), k: 10 });
      expect(hits.map((hit) => hit.id)).toEqual(['f1/p2/0']);
      expect([...(await index.getVectors(['f1/p1/0', 'f1/p1/1', 'f2/p1/0'])).keys()]).toEqual(['f2/p1/0']);
    });

    it('deletes the images of the given products but those it is told to keep', async () => {
      // Prepare: p1's first image was just replaced in place; its second image is gone from the feed
      await index.upsert([
        doc('f1', 'p1', unit(1, 0), { image: 0 }),
        doc('f1', 'p1', unit(1, 0.1), { image: 1 }),
        doc('f1', 'p2', unit(1, 0.2), { image: 0 }),
        doc('f1', 'p2', unit(1, 0.3), { image: 1 }),
        doc('f1', 'p3', unit(1, 0.4)),
      ]);

      // Act
      await index.deleteProducts('f1', ['p1', 'p2'], ['f1/p1/0', 'f1/p2/0', 'f1/p2/1', 'f1/p3/0']);

      // Assess
      expect(await index.count('f1')).toBe(4);
      const ids = ['f1/p1/0', 'f1/p1/1', 'f1/p2/0', 'f1/p2/1', 'f1/p3/0'];
      expect([...(await index.getVectors(ids)).keys()].sort()).toEqual([
        'f1/p1/0',
        'f1/p2/0',
        'f1/p2/1',
        'f1/p3/0',
      ]);
    });

    it('deletes a whole feed and leaves other feeds alone', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'p1', unit(1, 0)),
        doc('f1', 'p2', unit(0, 1)),
        doc('f2', 'p1', unit(1, 0)),
      ]);

      // Act
      await index.deleteFeed('f1');

      // Assess
      expect(await index.count('f1')).toBe(0);
      expect(await index.search({ feedId: 'f1', vector: unit(1, 0), k: 10 })).toEqual([]);
      expect((await index.search({ feedId: 'f2', vector: unit(1, 0), k: 10 })).map((hit) => hit.id)).toEqual([
        'f2/p1/0',
      ]);
    });

    it('accepts documents of a feed again after deleting it', async () => {
      // Prepare
      await index.upsert([doc('f1', 'p1', unit(1, 0))]);
      await index.deleteFeed('f1');

      // Act
      await index.upsert([doc('f1', 'p2', unit(0, 1))]);

      // Assess
      expect(await index.count('f1')).toBe(1);
      expect(
        (await index.search({ feedId: 'f1', vector: unit(0, 1), k: 5 })).map((hit) => hit.productId),
      ).toEqual(['p2']);
    });

    it('returns the stored vectors of known ids and omits unknown ids', async () => {
      // Prepare
      const v1 = randomUnit(1);
      const v2 = randomUnit(2);
      await index.upsert([doc('f1', 'p1', v1), doc('f2', 'p2', v2)]);

      // Act
      const vectors = await index.getVectors(['f1/p1/0', 'f2/p2/0', 'f1/missing/0']);

      // Assess
      expect([...vectors.keys()].sort()).toEqual(['f1/p1/0', 'f2/p2/0']);
      expect(vectors.get('f1/p1/0')).toBeInstanceOf(Float32Array);
      expect([...(vectors.get('f1/p1/0') ?? [])]).toEqual([...v1]);
      expect([...(vectors.get('f2/p2/0') ?? [])]).toEqual([...v2]);
    });

    it('counts the documents of one feed', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'p1', unit(1, 0), { image: 0 }),
        doc('f1', 'p1', unit(1, 0), { image: 1 }),
        doc('f1', 'p2', unit(0, 1)),
        doc('f2', 'p1', unit(1, 0)),
      ]);

      // Act
      const counts = [await index.count('f1'), await index.count('f2'), await index.count('unknown')];

      // Assess
      expect(counts).toEqual([3, 1, 0]);
    });

    it('returns every document when k exceeds the feed size', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'p1', unit(1, 0)),
        doc('f1', 'p2', unit(0, 1)),
        doc('f1', 'p3', unit(-1, 0)),
      ]);

      // Act
      const hits = await index.search({ feedId: 'f1', vector: unit(1, 0), k: 50 });

      // Assess
      expect(hits.map((hit) => hit.productId)).toEqual(['p1', 'p2', 'p3']);
    });

    it('returns an empty list for an empty or unknown feed', async () => {
      // Prepare
      await index.upsert([doc('f1', 'p1', unit(1, 0))]);
      await index.deleteProducts('f1', ['p1']);

      // Act
      const emptied = await index.search({ feedId: 'f1', vector: unit(1, 0), k: 10 });
      const unknown = await index.search({ feedId: 'nobody', vector: unit(1, 0), k: 10 });

      // Assess
      expect(emptied).toEqual([]);
      expect(unknown).toEqual([]);
    });

    it('answers several queries at once, each exactly as search does, in query order', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'shirt-s', unit(1, 0), {
          itemGroupId: 'shirt',
          fields: { color: ['red'], brand: ['acme'] },
        }),
        doc('f1', 'shirt-m', unit(1, 0.05), { itemGroupId: 'shirt', fields: { color: ['red'] } }),
        doc('f1', 'dress', unit(0.8, 0.6), { fields: { color: ['blue'], brand: ['acme'] } }),
        doc('f1', 'hat', unit(0, 1), { fields: { color: ['red'], brand: ['other'] } }),
        doc('f1', 'boot', unit(-1, 0.2), { fields: { color: ['black'] } }),
        doc('f2', 'coat', unit(1, 0)),
        doc('f2', 'scarf', unit(0.3, 1)),
      ]);
      const queries: VectorQuery[] = [
        { feedId: 'f1', vector: unit(1, 0), k: 3 },
        { feedId: 'f1', vector: unit(0, 1), k: 1 },
        { feedId: 'f1', vector: unit(1, 0), k: 10, filter: { color: ['red'], brand: ['acme', 'other'] } },
        { feedId: 'f1', vector: unit(1, 0.1), k: 10, excludeItemGroupIds: ['shirt', 'hat'] },
        { feedId: 'f2', vector: unit(0, 1), k: 5 },
        { feedId: 'nobody', vector: unit(1, 0), k: 5 },
        { feedId: 'f1', vector: unit(1, 0), k: 0 },
        { feedId: 'f1', vector: unit(1, 0), k: 10, filter: { color: ['green'] } },
        { feedId: 'f1', vector: unit(1, 0), k: 3 },
        // Filtered with groups left out (the search's twin lookup under a related query's filters)
        {
          feedId: 'f1',
          vector: unit(1, 0),
          k: 10,
          filter: { color: ['red'] },
          excludeItemGroupIds: ['shirt'],
        },
      ];
      const expected: VectorHit[][] = [];
      for (const query of queries) expected.push(await index.search(query));

      // Act
      const lists = await index.searchMany(queries);

      // Assess
      expect(lists).toEqual(expected);
      expect(lists.map((hits) => hits.map((hit) => hit.productId))).toEqual([
        ['shirt-s', 'shirt-m', 'dress'],
        ['hat'],
        ['shirt-s', 'hat'],
        ['dress', 'boot'],
        ['scarf', 'coat'],
        [],
        [],
        [],
        ['shirt-s', 'shirt-m', 'dress'],
        ['hat'],
      ]);
    });

    it('answers no queries with no lists', async () => {
      // Prepare
      await index.upsert([doc('f1', 'p1', unit(1, 0))]);

      // Act
      const lists = await index.searchMany([]);

      // Assess
      expect(lists).toEqual([]);
    });

    it('answers several queries with empty lists before anything is indexed', async () => {
      // Act
      const lists = await index.searchMany([
        { feedId: 'f1', vector: unit(1, 0), k: 5 },
        { feedId: 'f2', vector: unit(0, 1), k: 5, filter: { color: ['red'] } },
      ]);

      // Assess
      expect(lists).toEqual([[], []]);
    });

    it('answers several queries with empty lists once every product of the feed is deleted', async () => {
      // Prepare
      await index.upsert([doc('f1', 'p1', unit(1, 0)), doc('f1', 'p2', unit(0, 1))]);
      await index.deleteProducts('f1', ['p1', 'p2']);

      // Act
      const lists = await index.searchMany([
        { feedId: 'f1', vector: unit(1, 0), k: 5 },
        { feedId: 'f1', vector: unit(0, 1), k: 5 },
      ]);

      // Assess
      expect(lists).toEqual([[], []]);
    });

    it('rejects several queries when one vector has the wrong dimension', async () => {
      // Prepare
      await index.upsert([doc('f1', 'p1', unit(1, 0))]);
      const wrong = new Float32Array(CONTRACT_DIMENSION + 1).fill(0.1);

      // Act
      const lists = index.searchMany([
        { feedId: 'f1', vector: unit(1, 0), k: 5 },
        { feedId: 'f1', vector: wrong, k: 5 },
      ]);

      // Assess
      await expect(lists).rejects.toThrow();
    });

    it('rejects vectors of the wrong dimension', async () => {
      // Prepare
      const wrong = new Float32Array(CONTRACT_DIMENSION + 1).fill(0.1);

      // Act
      const upsert = index.upsert([doc('f1', 'p1', wrong)]);

      // Assess
      await expect(upsert).rejects.toThrow();
      expect(await index.count('f1')).toBe(0);
    });

    it('finds the exact filtered top 10 among a few hundred documents', async () => {
      // Prepare
      const documents = Array.from({ length: 400 }, (_, i) =>
        doc('f1', `p${String(i).padStart(3, '0')}`, randomUnit(1000 + i), {
          fields: { color: [i % 10 === 0 ? 'red' : 'blue'], size: [i % 3 === 0 ? 's' : 'm'] },
        }),
      );
      await index.upsert(documents);
      const query = randomUnit(7);
      const dot = (a: Float32Array): number => a.reduce((sum, value, i) => sum + value * (query[i] ?? 0), 0);
      const expected = documents
        .filter((document) => document.fields.color?.[0] === 'red')
        .sort((a, b) => dot(b.vector) - dot(a.vector))
        .slice(0, 10)
        .map((document) => document.id);

      // Act
      const hits = await index.search({ feedId: 'f1', vector: query, k: 10, filter: { color: ['red'] } });

      // Assess
      expect(hits.map((hit) => hit.id)).toEqual(expected);
    });

    it('reads a query vector that is a view into a larger buffer', async () => {
      // Prepare
      await index.upsert([
        doc('f1', 'p1', unit(1, 0), { fields: { color: ['red'] } }),
        doc('f1', 'p2', unit(0, 1), { fields: { color: ['red'] } }),
      ]);
      const batch = new Float32Array(CONTRACT_DIMENSION * 2);
      batch.set(unit(1, 0), 0);
      batch.set(unit(0, 1), CONTRACT_DIMENSION);
      const second = batch.subarray(CONTRACT_DIMENSION);

      // Act
      const filtered = await index.search({ feedId: 'f1', vector: second, k: 1, filter: { color: ['red'] } });
      const unfiltered = await index.search({ feedId: 'f1', vector: second, k: 1 });

      // Assess
      expect(filtered.map((hit) => hit.productId)).toEqual(['p2']);
      expect(unfiltered.map((hit) => hit.productId)).toEqual(['p2']);
    });

    it('serves concurrent writes from one process without losing any', async () => {
      // Prepare
      const batches = Array.from({ length: 10 }, (_, b) =>
        Array.from({ length: 20 }, (_, i) => doc('f1', `p${b}-${i}`, randomUnit(b * 100 + i))),
      );

      // Act
      await Promise.all([
        ...batches.map((batch) => index.upsert(batch)),
        index.search({ feedId: 'f1', vector: unit(1, 0), k: 5 }),
      ]);
      await index.deleteProducts('f1', ['p0-0', 'p9-19']);

      // Assess
      expect(await index.count('f1')).toBe(198);
    });

    // Only adapters that keep state in process memory have a reopen to test; the others write durably, and a
    // registered-but-skipped test would hide that the case does not apply.
    if (options.persistent)
      it('keeps its documents across a reopen after flush', async () => {
        // Prepare
        await index.upsert([
          doc('f1', 'p1', unit(1, 0), { fields: { brand: ['nike'] } }),
          doc('f1', 'p2', unit(0, 1), { fields: { brand: ['puma'] } }),
          doc('f2', 'p3', unit(1, 1)),
        ]);
        await index.deleteProducts('f1', ['p2']);
        await index.upsert([doc('f1', 'p4', unit(1, 0.5), { fields: { brand: ['nike'] } })]);
        await index.flush();

        // Act
        if (!subject.reopen) throw new Error('a persistent subject must provide reopen()');
        const reopened = await subject.reopen();

        // Assess
        expect(await reopened.count('f1')).toBe(2);
        expect(await reopened.count('f2')).toBe(1);
        const hits = await reopened.search({
          feedId: 'f1',
          vector: unit(1, 0),
          k: 10,
          filter: { brand: ['nike'] },
        });
        expect(hits.map((hit) => hit.productId)).toEqual(['p1', 'p4']);
        expect([...((await reopened.getVectors(['f2/p3/0'])).get('f2/p3/0') ?? [])]).toEqual([...unit(1, 1)]);
      });
  });
}
