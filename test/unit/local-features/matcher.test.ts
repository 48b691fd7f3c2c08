import { describe, expect, it } from 'vitest';
import { hammingDistance, matchDescriptorSets } from '#lib/vision/local-features/matcher.ts';
import { DESCRIPTOR_WORDS } from '#lib/vision/local-features/types.ts';
import { naiveDistance, plantNeighbour, randomDescriptors, seededWords } from './descriptors.ts';

/** Reference matcher: every pair, sorted, ratio test, optional cross-check. */
function referenceMatches(
  query: Uint32Array,
  set: Uint32Array,
  { ratio = 0.8, maxDistance = 64, crossCheck = false } = {},
): Array<[number, number]> {
  const qn = query.length / DESCRIPTOR_WORDS;
  const cn = set.length / DESCRIPTOR_WORDS;
  const out: Array<[number, number]> = [];
  for (let i = 0; i < qn; i++) {
    const distances = Array.from({ length: cn }, (_, j) => ({ j, d: naiveDistance(query, i, set, j) }));
    distances.sort((a, b) => a.d - b.d || a.j - b.j);
    const [first, second] = distances;
    if (!first || first.d > maxDistance) continue;
    if (second && !(first.d < ratio * second.d)) continue;
    if (crossCheck) {
      const nearestQuery = Array.from({ length: qn }, (_, k) => naiveDistance(query, k, set, first.j));
      if (Math.min(...nearestQuery) < first.d || nearestQuery.indexOf(first.d) !== i) continue;
    }
    out.push([i, first.j]);
  }
  return out;
}

function pairsOf(flat: Int32Array): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  for (let k = 0; k < flat.length; k += 2) out.push([flat[k]!, flat[k + 1]!]);
  return out;
}

/** A query of `n` random descriptors and a candidate set holding noisy copies of the first `planted`. */
function plantedCase(seed: number, n: number, planted: number, flips: number) {
  const next = seededWords(seed);
  const query = randomDescriptors(n, next);
  const set = randomDescriptors(n, next);
  const truth: Array<[number, number]> = [];
  for (let k = 0; k < planted; k++) {
    const target = (k * 7 + 3) % n;
    plantNeighbour(query, k, set, target, flips, next);
    truth.push([k, target]);
  }
  return { query, set, truth };
}

describe('hammingDistance', () => {
  it('equals the bit-by-bit count', () => {
    // Prepare
    const next = seededWords(1);
    const a = randomDescriptors(50, next);
    const b = randomDescriptors(50, next);
    // Act / Assess
    for (let i = 0; i < 50; i++)
      expect(hammingDistance(a, i, b, 49 - i)).toBe(naiveDistance(a, i, b, 49 - i));
    expect(hammingDistance(a, 3, a, 3)).toBe(0);
    const ones = new Uint32Array(8).fill(0xffffffff);
    expect(hammingDistance(ones, 0, new Uint32Array(8), 0)).toBe(256);
  });
});

describe('matchDescriptorSets', () => {
  it('exhaustive matching equals the reference matcher, with and without cross-check', () => {
    // Prepare: planted neighbours at distance 20 plus random descriptors, some of them chance near misses
    const { query, set } = plantedCase(2, 120, 40, 20);
    for (const crossCheck of [false, true]) {
      // Act
      const [pairs] = matchDescriptorSets(query, [set], { strategy: 'exhaustive', crossCheck });
      // Assess
      expect(pairsOf(pairs!)).toEqual(referenceMatches(query, set, { crossCheck }));
    }
  });

  it('matches each set of a batch as if it were matched alone', () => {
    // Prepare
    const a = plantedCase(3, 80, 30, 12);
    const b = plantedCase(4, 80, 10, 12);
    for (const strategy of ['exhaustive', 'hashed'] as const) {
      // Act
      const batch = matchDescriptorSets(a.query, [a.set, b.set, new Uint32Array(0)], { strategy });
      const alone = matchDescriptorSets(a.query, [b.set], { strategy });
      // Assess
      expect(pairsOf(batch[1]!)).toEqual(pairsOf(alone[0]!));
      expect(batch[2]).toHaveLength(0);
      expect(pairsOf(batch[0]!)).toEqual(expect.arrayContaining(a.truth));
    }
  });

  it('hashed matching finds every planted neighbour at distance 20 and only accepts what the reference accepts', () => {
    // Prepare
    const { query, set, truth } = plantedCase(5, 400, 100, 20);
    // Act
    const [pairs] = matchDescriptorSets(query, [set], { strategy: 'hashed' });
    // Assess: random 256-bit strings are ~128 apart, so the planted pairs are the only true matches
    expect(pairsOf(pairs!)).toEqual(truth.toSorted((x, y) => x[0] - y[0]));
    expect(referenceMatches(query, set)).toEqual(truth.toSorted((x, y) => x[0] - y[0]));
  });

  it('rejects an ambiguous match by the ratio test', () => {
    // Prepare: two candidates at distances 10 and 11 from the query descriptor
    const next = seededWords(6);
    const query = randomDescriptors(1, next);
    const set = new Uint32Array(2 * DESCRIPTOR_WORDS);
    plantNeighbour(query, 0, set, 0, 10, next);
    plantNeighbour(query, 0, set, 1, 11, next);
    for (const strategy of ['exhaustive', 'hashed'] as const) {
      // Act
      const [ambiguous] = matchDescriptorSets(query, [set], { strategy });
      const [permissive] = matchDescriptorSets(query, [set], { strategy, ratio: 0.95 });
      // Assess
      expect(ambiguous).toHaveLength(0);
      expect(pairsOf(permissive!)).toEqual([[0, 0]]);
    }
  });

  it('cross-check keeps only the query descriptor nearest to the shared candidate descriptor', () => {
    // Prepare: query descriptors 0 and 1 are both nearest to candidate 0, at distances 4 and 12
    const next = seededWords(7);
    const set = randomDescriptors(3, next);
    const query = new Uint32Array(2 * DESCRIPTOR_WORDS);
    plantNeighbour(set, 0, query, 0, 4, next);
    plantNeighbour(set, 0, query, 1, 12, next);
    for (const strategy of ['exhaustive', 'hashed'] as const) {
      // Act
      const [plain] = matchDescriptorSets(query, [set], { strategy });
      const [checked] = matchDescriptorSets(query, [set], { strategy, crossCheck: true });
      // Assess
      expect(pairsOf(plain!)).toEqual([
        [0, 0],
        [1, 0],
      ]);
      expect(pairsOf(checked!)).toEqual([[0, 0]]);
    }
  });

  it('returns no matches for an empty query or beyond the distance limit', () => {
    // Prepare
    const { query, set } = plantedCase(8, 50, 20, 30);
    // Act / Assess
    expect(matchDescriptorSets(new Uint32Array(0), [set])[0]).toHaveLength(0);
    expect(matchDescriptorSets(query, [set], { maxDistance: 20, strategy: 'exhaustive' })[0]).toHaveLength(0);
  });
});
