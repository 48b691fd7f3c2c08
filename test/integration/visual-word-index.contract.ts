import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { VisualWordDocument, VisualWordIndex } from '#lib/ports.ts';
import { SLICE_SPAN } from '#lib/vision/local-features/visual-words.ts';

/** One adapter under test; `reopen` (adapters that persist) returns a fresh instance over the same storage. */
export interface VisualWordIndexSubject {
  index: VisualWordIndex;
  reopen?: () => Promise<VisualWordIndex>;
  close: () => Promise<void>;
}

/**
 * A word from a small number: spread over the eight slices and over the 32 bits, so the words exercise
 * the slice tag and the whole bit range (`wordTerm` pads to 8 hex digits).
 */
export function word(n: number): number {
  const slice = n % 8;
  return slice * SLICE_SPAN + ((n * 2_654_435_761) % 2 ** 32);
}

/** Distinct words, ascending, as the port wants them. */
export function wordList(numbers: number[]): Float64Array {
  return Float64Array.from(new Set(numbers.map(word))).sort();
}

export function words(...numbers: number[]): Float64Array {
  return wordList(numbers);
}

/** Numbers from `from` (inclusive) to `to` (exclusive). */
export function range(from: number, to: number): number[] {
  return Array.from({ length: to - from }, (_, i) => from + i);
}

export function wordDoc(
  feedId: string,
  productId: string,
  numbers: number[],
  options: { image?: number; itemGroupId?: string } = {},
): VisualWordDocument {
  return {
    id: `${feedId}/${productId}/${options.image ?? 0}`,
    feedId,
    productId,
    itemGroupId: options.itemGroupId ?? productId,
    words: wordList(numbers),
  };
}

/**
 * The behaviour every `VisualWordIndex` adapter owes the domain (the local index defines it). Scores are
 * compared only within a query, since adapters weigh words by different idf formulas.
 */
export function describeVisualWordIndexContract(
  name: string,
  factory: () => Promise<VisualWordIndexSubject>,
  options: { persistent?: boolean } = {},
): void {
  describe(`VisualWordIndex contract: ${name}`, () => {
    let subject: VisualWordIndexSubject;
    let index: VisualWordIndex;

    beforeEach(async () => {
      subject = await factory();
      index = subject.index;
    });

    afterEach(async () => {
      await subject.close();
    });

    it('returns nothing for a feed without images, or before anything was written', async () => {
      // Act
      const before = await index.search({ feedId: 'f1', words: words(1, 2, 3), k: 10 });
      await index.upsert([wordDoc('f2', 'p1', [1, 2, 3])]);
      const after = await index.search({ feedId: 'f1', words: words(1, 2, 3), k: 10 });

      // Assess
      expect(before).toEqual([]);
      expect(after).toEqual([]);
    });

    it('ranks an image sharing many words above one sharing few, and leaves out images sharing none', async () => {
      // Prepare
      await index.upsert([
        wordDoc('f1', 'few', [1, 100, 101, 102]),
        wordDoc('f1', 'many', [1, 2, 3, 4, 5, 200, 201]),
        wordDoc('f1', 'none', [300, 301, 302]),
      ]);

      // Act
      const hits = await index.search({ feedId: 'f1', words: words(1, 2, 3, 4, 5, 6), k: 10 });

      // Assess
      expect(hits.map((hit) => hit.id)).toEqual(['f1/many/0', 'f1/few/0']);
      expect(hits[0]).toEqual({
        id: 'f1/many/0',
        productId: 'many',
        itemGroupId: 'many',
        score: expect.any(Number),
      });
      expect(hits[0]!.score).toBeGreaterThan(hits[1]!.score);
      expect(hits[1]!.score).toBeGreaterThan(0);
    });

    it('weighs a word every image has less than a rare one, and breaks ties by id', async () => {
      // Prepare: every image has word 7; only "rare" also has word 8.
      await index.upsert([
        wordDoc('f1', 'd', [7, 10]),
        wordDoc('f1', 'rare', [7, 8]),
        wordDoc('f1', 'b', [7, 11]),
        wordDoc('f1', 'c', [7, 12]),
      ]);

      // Act
      const hits = await index.search({ feedId: 'f1', words: words(7, 8), k: 10 });

      // Assess
      expect(hits.map((hit) => hit.id)).toEqual(['f1/rare/0', 'f1/b/0', 'f1/c/0', 'f1/d/0']);
      const common = hits[1]!.score;
      const rare = hits[0]!.score - common;
      expect(hits.slice(1).map((hit) => hit.score)).toEqual([common, common, common]);
      expect(rare).toBeGreaterThan(common);
    });

    it('honours k, cutting ties at the k-th place by id', async () => {
      // Prepare
      await index.upsert([
        wordDoc('f1', 'best', [1, 2, 3, 50]),
        wordDoc('f1', 'tie-c', [1, 51]),
        wordDoc('f1', 'tie-a', [1, 52]),
        wordDoc('f1', 'tie-b', [1, 53]),
      ]);

      // Act
      const two = await index.search({ feedId: 'f1', words: words(1, 2, 3), k: 2 });
      const none = await index.search({ feedId: 'f1', words: words(1, 2, 3), k: 0 });
      const empty = await index.search({ feedId: 'f1', words: new Float64Array(0), k: 5 });

      // Assess
      expect(two.map((hit) => hit.id)).toEqual(['f1/best/0', 'f1/tie-a/0']);
      expect(none).toEqual([]);
      expect(empty).toEqual([]);
    });

    it('keeps feeds apart', async () => {
      // Prepare
      await index.upsert([
        wordDoc('f1', 'p1', [1, 2]),
        wordDoc('f2', 'p1', [1, 2, 3]),
        wordDoc('f2', 'p2', [1]),
      ]);

      // Act
      const f1 = await index.search({ feedId: 'f1', words: words(1, 2, 3), k: 10 });
      const f2 = await index.search({ feedId: 'f2', words: words(1, 2, 3), k: 10 });

      // Assess
      expect(f1.map((hit) => hit.id)).toEqual(['f1/p1/0']);
      expect(f2.map((hit) => hit.id)).toEqual(['f2/p1/0', 'f2/p2/0']);
    });

    it('replaces a document by id on upsert', async () => {
      // Prepare
      await index.upsert([wordDoc('f1', 'p1', [1, 2, 3], { itemGroupId: 'old' }), wordDoc('f1', 'p2', [9])]);

      // Act
      await index.upsert([wordDoc('f1', 'p1', [4, 5, 6], { itemGroupId: 'new' })]);

      // Assess
      expect(await index.search({ feedId: 'f1', words: words(1, 2, 3), k: 10 })).toEqual([]);
      const hits = await index.search({ feedId: 'f1', words: words(4, 5), k: 10 });
      expect(hits.map(({ id, productId, itemGroupId }) => ({ id, productId, itemGroupId }))).toEqual([
        { id: 'f1/p1/0', productId: 'p1', itemGroupId: 'new' },
      ]);
    });

    it('deletes the images of the given products but those it is told to keep', async () => {
      // Prepare
      await index.upsert([
        wordDoc('f1', 'p1', [1, 2], { image: 0 }),
        wordDoc('f1', 'p1', [1, 3], { image: 1 }),
        wordDoc('f1', 'p2', [1, 4]),
      ]);

      // Act
      await index.deleteProducts('f1', ['p1', 'p2'], ['f1/p1/1']);

      // Assess
      const hits = await index.search({ feedId: 'f1', words: words(1), k: 10 });
      expect(hits.map((hit) => hit.id)).toEqual(['f1/p1/1']);
    });

    it('deletes every image of the given products, in their feed only', async () => {
      // Prepare
      await index.upsert([
        wordDoc('f1', 'p1', [1, 2], { image: 0 }),
        wordDoc('f1', 'p1', [1, 3], { image: 1 }),
        wordDoc('f1', 'p2', [1, 4]),
        wordDoc('f1', 'p3', [1, 5]),
        wordDoc('f2', 'p1', [1, 2]),
      ]);

      // Act
      await index.deleteProducts('f1', ['p1', 'p3', 'unknown']);
      await index.deleteProducts('f1', []);

      // Assess
      expect((await index.search({ feedId: 'f1', words: words(1), k: 10 })).map((hit) => hit.id)).toEqual([
        'f1/p2/0',
      ]);
      expect((await index.search({ feedId: 'f2', words: words(1), k: 10 })).map((hit) => hit.id)).toEqual([
        'f2/p1/0',
      ]);
    });

    it('deletes a whole feed, leaving the others', async () => {
      // Prepare
      await index.upsert([wordDoc('f1', 'p1', [1]), wordDoc('f1', 'p2', [1, 2]), wordDoc('f2', 'p1', [1])]);

      // Act
      await index.deleteFeed('f1');
      await index.deleteFeed('never-written');

      // Assess
      expect(await index.search({ feedId: 'f1', words: words(1, 2), k: 10 })).toEqual([]);
      expect((await index.search({ feedId: 'f2', words: words(1, 2), k: 10 })).map((hit) => hit.id)).toEqual([
        'f2/p1/0',
      ]);
      await index.upsert([wordDoc('f1', 'p3', [2])]);
      expect((await index.search({ feedId: 'f1', words: words(1, 2), k: 10 })).map((hit) => hit.id)).toEqual([
        'f1/p3/0',
      ]);
    });

    it('leaves out the excluded item groups', async () => {
      // Prepare
      await index.upsert([
        wordDoc('f1', 'p1', [1, 2, 3], { itemGroupId: 'g1' }),
        wordDoc('f1', 'p2', [1, 2], { itemGroupId: 'g1' }),
        wordDoc('f1', 'p3', [1], { itemGroupId: 'g2' }),
        wordDoc('f1', 'p4', [1], { itemGroupId: 'g3' }),
      ]);

      // Act
      const hits = await index.search({
        feedId: 'f1',
        words: words(1, 2, 3),
        k: 10,
        excludeItemGroupIds: ['g1', 'g3', 'g1'],
      });
      const none = await index.search({
        feedId: 'f1',
        words: words(1, 2, 3),
        k: 10,
        excludeItemGroupIds: [],
      });

      // Assess
      expect(hits.map((hit) => hit.id)).toEqual(['f1/p3/0']);
      expect(none.map((hit) => hit.id)).toEqual(['f1/p1/0', 'f1/p2/0', 'f1/p3/0', 'f1/p4/0']);
    });

    it('handles catalogue-sized word lists', async () => {
      // Prepare: images of 6,000 words, a query of 8,000 (1,000 keypoints × 8 slices) sharing 600 with
      // "near", 60 with "far".
      await index.upsert([
        wordDoc('f1', 'near', [...range(0, 600), ...range(100_000, 105_400)]),
        wordDoc('f1', 'far', [...range(0, 60), ...range(200_000, 205_940)]),
      ]);

      // Act
      const hits = await index.search({ feedId: 'f1', words: wordList(range(0, 8000)), k: 5 });

      // Assess
      expect(hits.map((hit) => hit.id)).toEqual(['f1/near/0', 'f1/far/0']);
      expect(hits[0]!.score).toBeGreaterThan(5 * hits[1]!.score);
    });

    if (options.persistent)
      it('keeps its documents across a reopen after flush', async () => {
        // Prepare
        await index.upsert([
          wordDoc('f1', 'p1', [1, 2, 3]),
          wordDoc('f1', 'p2', [1, 2]),
          wordDoc('f2', 'p3', [1]),
        ]);
        await index.deleteProducts('f1', ['p2']);
        await index.upsert([wordDoc('f1', 'p4', [1])]);
        await index.flush();

        // Act
        if (!subject.reopen) throw new Error('a persistent subject must provide reopen()');
        const reopened = await subject.reopen();

        // Assess
        const f1 = await reopened.search({ feedId: 'f1', words: words(1, 2, 3), k: 10 });
        expect(f1.map((hit) => hit.id)).toEqual(['f1/p1/0', 'f1/p4/0']);
        const f2 = await reopened.search({ feedId: 'f2', words: words(1), k: 10 });
        expect(f2.map(({ id, productId, itemGroupId }) => ({ id, productId, itemGroupId }))).toEqual([
          { id: 'f2/p3/0', productId: 'p3', itemGroupId: 'p3' },
        ]);
      });
  });
}
