import { describe, expect, it } from 'vitest';
import {
  emptyPostings,
  forEachEntry,
  MAX_ORDINAL_BITS,
  mergeKeyStreams,
  mergePostings,
  ordinalBitsFor,
  postingsFromKeys,
  postingsOf,
  postingsStream,
} from '#lib/adapters/word-postings.ts';

/** Sorted keys `bits · 2^ordinalBits + ordinal` of (bits, ordinal) pairs. */
const keysOf = (pairs: [bits: number, ordinal: number][], ordinalBits: number) =>
  Float64Array.from(pairs.map(([bits, ordinal]) => bits * 2 ** ordinalBits + ordinal)).sort();

const ordinalsOf = (postings: ReturnType<typeof postingsFromKeys>, bits: number) => {
  const { start, end, first } = postingsOf(postings, bits);
  return Array.from(postings.entries.subarray(start, end), (entry) => entry - first);
};

describe('word postings', () => {
  it('widens the ordinal with the number of images, from 8 bits up to the 2^20 limit', () => {
    expect(ordinalBitsFor(0)).toBe(8);
    expect(ordinalBitsFor(256)).toBe(8);
    expect(ordinalBitsFor(257)).toBe(9);
    expect(ordinalBitsFor(100_000)).toBe(17);
    expect(ordinalBitsFor(2 ** MAX_ORDINAL_BITS)).toBe(20);
    expect(() => ordinalBitsFor(2 ** MAX_ORDINAL_BITS + 1)).toThrow(/more than 1048576 images/);
  });

  it('finds the images of each word, at the edges of the word range and of the buckets', () => {
    // Prepare: words at 0, 2³² − 1, both sides of a bucket boundary (bucket = top 9 bits: 2²³ per bucket),
    // and one word shared by three images, with the largest ordinal of 9 bits
    const ordinalBits = 9;
    const pairs: [number, number][] = [
      [0, 4],
      [2 ** 32 - 1, 0],
      [2 ** 32 - 1, 511],
      [2 ** 23 - 1, 2],
      [2 ** 23, 3],
      [77_777_777, 9],
      [77_777_777, 1],
      [77_777_777, 300],
    ];
    // Act
    const postings = postingsFromKeys(keysOf(pairs, ordinalBits), ordinalBits);
    // Assess
    expect(postings.entries.length).toBe(8);
    expect(postings.buckets.length).toBe(2 ** 9 + 1);
    expect(postings.buckets[2 ** 9]).toBe(8);
    expect(ordinalsOf(postings, 0)).toEqual([4]);
    expect(ordinalsOf(postings, 2 ** 32 - 1)).toEqual([0, 511]);
    expect(ordinalsOf(postings, 2 ** 23 - 1)).toEqual([2]);
    expect(ordinalsOf(postings, 2 ** 23)).toEqual([3]);
    expect(ordinalsOf(postings, 77_777_777)).toEqual([1, 9, 300]);
    expect(ordinalsOf(postings, 77_777_778)).toEqual([]);
    expect(ordinalsOf(postings, 1)).toEqual([]);
  });

  it('gives back every (word, image) pair in order, whatever the ordinal width', () => {
    for (const ordinalBits of [8, 13, 20]) {
      // Prepare: 2,000 seeded pairs (duplicates of a word across images included)
      let seed = ordinalBits;
      const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
      const shared = Array.from({ length: 10 }, () => Math.floor(next() * 2 ** 32));
      const pairs = Array.from({ length: 2000 }, (): [number, number] => [
        next() < 0.3 ? shared[Math.floor(next() * 10)]! : Math.floor(next() * 2 ** 32),
        Math.floor(next() * 2 ** ordinalBits),
      ]);
      const keys = keysOf(pairs, ordinalBits);
      // Act
      const postings = postingsFromKeys(keys, ordinalBits);
      const visited: number[] = [];
      forEachEntry(postings, (bits, ordinal) => visited.push(bits * 2 ** ordinalBits + ordinal));
      // Assess
      expect(visited).toEqual(Array.from(keys));
      expect(postings.entries.byteLength).toBe(4 * 2000);
    }
  });

  it('answers nothing from empty postings', () => {
    expect(ordinalsOf(emptyPostings(8), 123)).toEqual([]);
  });

  it.each([
    ['many new entries (merged entry by entry)', 400 * 12],
    ['a few new entries (kept ones copied in runs)', 30],
  ])(
    'merges %s with the kept ones, renumbered, dropped or widened, as a full sort would',
    (_, addedCount) => {
      // Prepare: 300 images (9-bit ordinals) with seeded words, some shared; every 3rd image dies, and new
      // images (ordinals after the survivors, up to 600 in all: 10 bits) bring words in any order
      let seed = 11;
      const next = () => (seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
      // Words in 4 of the 1,024 buckets of 10-bit ordinals (2²² words each), so that buckets are full
      const anyWord = () => Math.floor(next() * 4) * 2 ** 22 + Math.floor(next() * 2 ** 22);
      const shared = Array.from({ length: 20 }, anyWord);
      const word = () => (next() < 0.2 ? shared[Math.floor(next() * 20)]! : anyWord());
      const oldPairs = Array.from({ length: 300 * 12 }, (_, i): [number, number] => [word(), i % 300]);
      const old = postingsFromKeys(keysOf(oldPairs, 9), 9);
      const renumbered = Int32Array.from({ length: 300 }, (_, ordinal) =>
        ordinal % 3 === 0 ? -1 : ordinal - Math.floor(ordinal / 3) - 1,
      );
      const addedPairs = Array.from({ length: addedCount }, (_, i): [number, number] => [
        word(),
        200 + (i % 400),
      ]);
      const added = {
        bits: Uint32Array.from(addedPairs, ([bits]) => bits),
        ordinals: Uint32Array.from(addedPairs, ([, ordinal]) => ordinal),
      };
      // Act
      const merged = mergePostings(old, renumbered, added, 10);
      // Assess: the same entries as sorting the survivors and the added pairs together
      const expected = keysOf(
        [
          ...oldPairs
            .filter(([, ordinal]) => renumbered[ordinal]! >= 0)
            .map(([bits, ordinal]): [number, number] => [bits, renumbered[ordinal]!]),
          ...addedPairs,
        ],
        10,
      );
      const visited: number[] = [];
      forEachEntry(merged, (bits, ordinal) => visited.push(bits * 2 ** 10 + ordinal));
      expect(merged.ordinalBits).toBe(10);
      expect(merged.buckets.at(-1)).toBe(expected.length);
      expect(visited).toEqual(Array.from(expected));
      expect(ordinalsOf(merged, shared[0]!)).toEqual(
        [...expected].filter((key) => Math.floor(key / 2 ** 10) === shared[0]).map((key) => key % 2 ** 10),
      );
    },
  );

  it('returns the same postings when nothing changed in the slice', () => {
    const old = postingsFromKeys(
      keysOf(
        [
          [5, 1],
          [9, 0],
        ],
        8,
      ),
      8,
    );
    const identity = Int32Array.from([0, 1, 2]);
    const none = { bits: new Uint32Array(0), ordinals: new Uint32Array(0) };
    expect(mergePostings(old, identity, none, 8)).toBe(old);
  });

  it('leaves out an entry whose ordinal is past the renumbering (a damaged file), merged or streamed', async () => {
    // Prepare: images 0 and 1 with word 5, and an entry of word 7 with ordinal 200 (of 2 rows); image 0 dies
    const old = postingsFromKeys(
      keysOf(
        [
          [5, 0],
          [5, 1],
          [7, 200],
        ],
        8,
      ),
      8,
    );
    const renumbered = Int32Array.from([-1, 0]);
    const none = { bits: new Uint32Array(0), ordinals: new Uint32Array(0) };
    const streamed: number[] = [];
    // Act
    const merged = mergePostings(old, renumbered, none, 8);
    await mergeKeyStreams(
      [postingsStream(old, renumbered, 9, 2)],
      9,
      async (entries) => {
        streamed.push(...entries);
      },
      4,
    );
    // Assess: image 1's word 5 alone, renumbered to 0
    const mergedKeys: number[] = [];
    forEachEntry(merged, (bits, ordinal) => mergedKeys.push(bits * 2 ** 8 + ordinal));
    expect(mergedKeys).toEqual([5 * 2 ** 8]);
    expect(merged.buckets.at(-1)).toBe(merged.entries.length);
    expect(streamed).toEqual([5 * 2 ** 9]);
  });

  it.each([1, 2, 3, 6])(
    'merges %i key streams of disjoint ordinals into one postings, whatever their blocks',
    async (count) => {
      // Prepare: `count` files' postings (8 bits), file f's images renumbered to f, f + count, f + 2 · count…
      // in the output (9 bits); odd images of the first file left out; blocks of 3 and 7 keys
      let state = count;
      const next = () => (state = (state * 1_103_515_245 + 12_345) % 2 ** 31) / 2 ** 31;
      const files = Array.from({ length: count }, () =>
        Array.from({ length: 40 + Math.floor(next() * 40) }, (_, i): [number, number] => [
          Math.floor(next() * 2 ** 32),
          i % 30,
        ]),
      );
      const renumbered = files.map((_, file) =>
        Int32Array.from({ length: 30 }, (_, ordinal) =>
          file === 0 && ordinal % 2 === 1 ? -1 : ordinal * count + file,
        ),
      );
      const streams = files.map((pairs, file) =>
        postingsStream(postingsFromKeys(keysOf(pairs, 8), 8), renumbered[file]!, 9, file % 2 === 0 ? 3 : 7),
      );
      const written: number[] = [];
      // Act
      const { buckets, count: total } = await mergeKeyStreams(
        streams,
        9,
        async (entries) => {
          await Promise.resolve();
          written.push(...entries);
        },
        5,
      );
      // Assess: the kept pairs, renumbered, in key order
      const expected = keysOf(
        files.flatMap((pairs, file) =>
          pairs
            .filter(([, ordinal]) => renumbered[file]![ordinal]! >= 0)
            .map(([bits, ordinal]): [number, number] => [bits, renumbered[file]![ordinal]!]),
        ),
        9,
      );
      const merged = { ordinalBits: 9, buckets, entries: Uint32Array.from(written) };
      const visited: number[] = [];
      forEachEntry(merged, (bits, ordinal) => visited.push(bits * 2 ** 9 + ordinal));
      expect(total).toBe(expected.length);
      expect(visited).toEqual(Array.from(expected));
    },
  );

  it.each([
    ['NaN (a damaged entry renumbered)', Number.NaN],
    ['past the bucket table (too wide for 9 bits)', 2 ** 9 * 2 ** 32],
  ])(
    'refuses a key stream with a key %s instead of writing a file that would not read back',
    async (_name, bad) => {
      // Prepare: one good key, then the bad one
      const stream = [Float64Array.from([5 * 2 ** 9, bad])];
      const written: number[] = [];
      // Act
      const merging = mergeKeyStreams(
        [async () => stream.shift()],
        9,
        async (entries) => {
          written.push(...entries);
        },
        4,
      );
      // Assess
      await expect(merging).rejects.toThrow(/1 keys fall outside the bucket table/);
    },
  );
});
