/**
 * mulberry32: a tiny, fast generator, reproducible from a 32-bit seed. Used where runs must repeat exactly
 * (RANSAC sampling, the evaluation benchmark). layers/projection/views.ts keeps its own copy on purpose: its
 * source is part of the shipped projection weights' fingerprint.
 */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
