/** Random packed descriptors for matcher tests, from a seeded generator so failures reproduce. */
import { DESCRIPTOR_WORDS } from '#lib/vision/local-features/types.ts';

export function seededWords(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    // xorshift32
    state ^= state << 13;
    state >>>= 0;
    state ^= state >>> 17;
    state ^= state << 5;
    state >>>= 0;
    return state;
  };
}

export function randomDescriptors(count: number, next: () => number): Uint32Array {
  const out = new Uint32Array(count * DESCRIPTOR_WORDS);
  for (let i = 0; i < out.length; i++) out[i] = next();
  return out;
}

/** Copy of descriptor `index` of `source` with `flips` distinct bits flipped, written at `target`. */
export function plantNeighbour(
  source: Uint32Array,
  index: number,
  destination: Uint32Array,
  target: number,
  flips: number,
  next: () => number,
): void {
  const bits = new Set<number>();
  while (bits.size < flips) bits.add(next() % (DESCRIPTOR_WORDS * 32));
  for (let w = 0; w < DESCRIPTOR_WORDS; w++)
    destination[target * DESCRIPTOR_WORDS + w] = source[index * DESCRIPTOR_WORDS + w]!;
  for (const bit of bits) {
    const w = target * DESCRIPTOR_WORDS + (bit >>> 5);
    destination[w] = (destination[w]! ^ (1 << (bit & 31))) >>> 0;
  }
}

/** Bit-by-bit Hamming distance: slow and obviously right. */
export function naiveDistance(a: Uint32Array, i: number, b: Uint32Array, j: number): number {
  let d = 0;
  for (let w = 0; w < DESCRIPTOR_WORDS; w++) {
    const x = a[i * DESCRIPTOR_WORDS + w]! ^ b[j * DESCRIPTOR_WORDS + w]!;
    for (let bit = 0; bit < 32; bit++) d += (x >>> bit) & 1;
  }
  return d;
}
