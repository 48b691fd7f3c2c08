import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { LocalVisualWordIndex } from '#lib/adapters/local-visual-word-index.ts';
import { describeVisualWordIndexContract } from './visual-word-index.contract.ts';

describeVisualWordIndexContract(
  'local files',
  async () => {
    const dir = await mkdtemp(join(tmpdir(), 'local-visual-word-index-'));
    return {
      index: new LocalVisualWordIndex(dir),
      reopen: async () => new LocalVisualWordIndex(dir),
      close: () => rm(dir, { recursive: true, force: true }),
    };
  },
  { persistent: true },
);

describe('local visual-word index: writes after a search, and what a reopen sees', () => {
  const doc = (id: string, words: number[], group = id) => ({
    id: `f/${id}/0`,
    feedId: 'f',
    productId: id,
    itemGroupId: group,
    words: Float64Array.from(words),
  });
  const ids = (hits: { productId: string }[]) => hits.map((hit) => hit.productId);

  it('merges replacements and deletions into the searched structure and persists the merged state', async () => {
    // Prepare: three images, searched once (so they are merged into the sorted slices)
    const dir = await mkdtemp(join(tmpdir(), 'local-visual-word-index-'));
    try {
      const index = new LocalVisualWordIndex(dir);
      await index.upsert([doc('a', [1, 2, 3]), doc('b', [2, 3, 4]), doc('c', [5, 6, 7 * 2 ** 32 + 9])]);
      expect(ids(await index.search({ feedId: 'f', words: Float64Array.from([2, 3]), k: 10 }))).toEqual([
        'a',
        'b',
      ]);
      // Act: b gets other words, a goes, d arrives; then flush and reopen
      await index.upsert([doc('b', [5, 6], 'g'), doc('d', [7 * 2 ** 32 + 9])]);
      await index.deleteProducts('f', ['a']);
      const before = await index.search({ feedId: 'f', words: Float64Array.from([2, 3, 5, 6]), k: 10 });
      await index.flush();
      const reopened = new LocalVisualWordIndex(dir);
      const after = await reopened.search({ feedId: 'f', words: Float64Array.from([2, 3, 5, 6]), k: 10 });
      const slice7 = await reopened.search({
        feedId: 'f',
        words: Float64Array.from([7 * 2 ** 32 + 9]),
        k: 10,
      });
      // Assess
      expect(ids(before)).toEqual(['b', 'c']);
      expect(before.find((hit) => hit.productId === 'b')?.itemGroupId).toBe('g');
      expect(after).toEqual(before);
      expect(ids(slice7)).toEqual(['c', 'd']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('local visual-word index: damaged files and failed writes', () => {
  const doc = (id: string, words: number[]) => ({
    id: `f/${id}/0`,
    feedId: 'f',
    productId: id,
    itemGroupId: id,
    words: Float64Array.from(words),
  });

  it('starts a feed with an unreadable file empty, keeps accepting writes and rewrites the file', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'local-visual-word-index-'));
    try {
      // Prepare: a truncated file, as a crash could leave
      await writeFile(join(dir, 'f.words'), Buffer.from([7, 0, 0, 0, 123]));
      const index = new LocalVisualWordIndex(dir);
      // Act
      const before = await index.search({ feedId: 'f', words: Float64Array.from([1]), k: 5 });
      await index.upsert([doc('a', [1, 2])]);
      await index.flush();
      const reopened = await new LocalVisualWordIndex(dir).search({
        feedId: 'f',
        words: Float64Array.from([1]),
        k: 5,
      });
      // Assess
      expect(before).toEqual([]);
      expect(reopened.map((hit) => hit.productId)).toEqual(['a']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('keeps unwritten changes after a failed flush and writes them at the next one', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'local-visual-word-index-'));
    try {
      // Prepare: the temporary file's name is taken by a folder, so the write fails
      const index = new LocalVisualWordIndex(dir);
      await index.upsert([doc('a', [1, 2])]);
      await mkdir(join(dir, 'f.words.tmp'));
      // Act
      await expect(index.flush()).rejects.toThrow();
      await rm(join(dir, 'f.words.tmp'), { recursive: true });
      await index.flush();
      const reopened = await new LocalVisualWordIndex(dir).search({
        feedId: 'f',
        words: Float64Array.from([2]),
        k: 5,
      });
      // Assess
      expect(reopened.map((hit) => hit.productId)).toEqual(['a']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('local visual-word index: top k among many scored images', () => {
  it('returns the k best of hundreds of matches, ties at the k-th place by id', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'local-visual-word-index-'));
    try {
      // Prepare: 300 images share word 1; i7 and i150 also share the rarer word 2
      const index = new LocalVisualWordIndex(dir);
      await index.upsert(
        Array.from({ length: 300 }, (_, i) => ({
          id: `f/i${String(i).padStart(3, '0')}/0`,
          feedId: 'f',
          productId: `i${i}`,
          itemGroupId: `i${i}`,
          words: Float64Array.from(i === 7 || i === 150 ? [1, 2] : [1, 3 + i]),
        })),
      );
      // Act
      const hits = await index.search({ feedId: 'f', words: Float64Array.from([1, 2]), k: 5 });
      // Assess: the two with the rare word, then the smallest ids among the 298 equal ones
      expect(hits.map((hit) => hit.productId)).toEqual(['i7', 'i150', 'i0', 'i1', 'i2']);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
