import { describe, expect, it } from 'vitest';
import { DESCRIPTOR_WORDS, type FeatureSet } from '#lib/vision/local-features/types.ts';
import { parseWordTerm, SLICE_SPAN, visualWords, wordTerm } from '#lib/vision/local-features/visual-words.ts';
import { plantNeighbour, randomDescriptors, seededWords } from './descriptors.ts';

const set = (descriptors: Uint32Array): FeatureSet => ({
  width: 100,
  height: 100,
  points: new Float32Array((descriptors.length / DESCRIPTOR_WORDS) * 2),
  descriptors,
});

const shared = (a: Float64Array, b: Float64Array) => {
  const inA = new Set(a);
  return [...b].filter((w) => inA.has(w)).length;
};

describe('visualWords', () => {
  it('tags each 32-bit slice with its position, distinct and ascending', () => {
    const descriptors = Uint32Array.from([1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 0xffffffff]);
    const words = visualWords({ original: set(descriptors) });
    expect([...words]).toEqual([
      1,
      SLICE_SPAN + 2,
      2 * SLICE_SPAN + 3,
      3 * SLICE_SPAN + 4,
      4 * SLICE_SPAN + 5,
      5 * SLICE_SPAN + 6,
      6 * SLICE_SPAN + 7,
      7 * SLICE_SPAN + 8,
      7 * SLICE_SPAN + 0xffffffff,
    ]);
  });

  it('a near-duplicate keypoint shares words, an unrelated one none; mirrors count for catalogue images', () => {
    // Prepare: 200 catalogue descriptors; the query holds neighbours (3 bits flipped) of the first 50
    const next = seededWords(7);
    const catalogue = randomDescriptors(200, next);
    const mirror = randomDescriptors(200, next);
    const query = randomDescriptors(100, next);
    for (let i = 0; i < 50; i += 1) plantNeighbour(catalogue, i, query, i, 3, next);
    const mirrored = randomDescriptors(10, next);
    for (let i = 0; i < 10; i += 1) plantNeighbour(mirror, i, mirrored, i, 3, next);
    // Act
    const item = visualWords({ original: set(catalogue), mirrored: set(mirror) });
    const scene = visualWords({ original: set(query) });
    const stranger = visualWords({ original: set(randomDescriptors(100, next)) });
    // Assess: 3 flips touch at most 3 of 8 slices, so each neighbour keeps ≥ 5 words
    expect(shared(item, scene)).toBeGreaterThanOrEqual(50 * 5);
    expect(shared(item, stranger)).toBe(0);
    expect(shared(item, visualWords({ original: set(mirrored) }))).toBeGreaterThanOrEqual(10 * 5);
  });

  it('has a text form for term indices that parses back', () => {
    for (const word of [0, 5, SLICE_SPAN - 1, 3 * SLICE_SPAN + 0xdeadbeef, 7 * SLICE_SPAN + 0xffffffff]) {
      expect(wordTerm(word)).toMatch(/^[0-7][0-9a-f]{8}$/);
      expect(parseWordTerm(wordTerm(word))).toBe(word);
    }
    expect(parseWordTerm('8000000000')).toBeUndefined();
    expect(parseWordTerm('x')).toBeUndefined();
  });
});
