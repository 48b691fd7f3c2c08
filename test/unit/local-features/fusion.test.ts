import { describe, expect, it } from 'vitest';
import { fusedScore, rerankCandidates } from '#lib/vision/local-features/fusion.ts';

describe('rerankCandidates', () => {
  it('puts verified candidates first by inliers, then the rest by global score', () => {
    // Prepare
    const shortlist = [
      { id: 'a', globalScore: 0.9, inliers: 4 },
      { id: 'b', globalScore: 0.5, inliers: 25 },
      { id: 'c', globalScore: 0.7, inliers: 9 },
      { id: 'd', globalScore: 0.6, inliers: 60 },
      { id: 'e', globalScore: 0.95, inliers: 0 },
    ];
    // Act
    const ranked = rerankCandidates(shortlist);
    // Assess
    expect(ranked.map((r) => r.id)).toEqual(['d', 'b', 'e', 'a', 'c']);
    expect(ranked.map((r) => r.verified)).toEqual([true, true, false, false, false]);
  });

  it('gives scores in [0, 1] that never increase down the list', () => {
    // Prepare
    const shortlist = Array.from({ length: 30 }, (_, k) => ({
      globalScore: ((k * 37) % 100) / 100,
      inliers: (k * 13) % 40,
    }));
    // Act
    const scores = rerankCandidates(shortlist).map((r) => r.score);
    // Assess
    for (const [k, score] of scores.entries()) {
      expect(score).toBeGreaterThanOrEqual(0);
      expect(score).toBeLessThanOrEqual(1);
      if (k > 0) expect(score).toBeLessThanOrEqual(scores[k - 1]!);
    }
  });

  it('scores a verified match high and an unrelated image low', () => {
    // Act / Assess
    expect(fusedScore({ globalScore: 0.5, inliers: 40 })).toBeGreaterThan(0.95);
    // Unrelated: typical (5 chance inliers, median unrelated cosine) and worst seen (7 inliers, cosine 0.65)
    expect(fusedScore({ globalScore: 0.39, inliers: 5 })).toBeLessThan(0.1);
    expect(fusedScore({ globalScore: 0.65, inliers: 7 })).toBeLessThan(0.35);
    expect(fusedScore({ globalScore: 0.4, inliers: 18 })).toBeGreaterThan(0.9);
    expect(fusedScore({ globalScore: 1, inliers: 0 })).toBeLessThanOrEqual(0.51);
    expect(fusedScore({ globalScore: 0.2, inliers: 12 })).toBeCloseTo(0.5, 5);
  });
});
