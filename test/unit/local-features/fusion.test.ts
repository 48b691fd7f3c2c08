import { describe, expect, it } from 'vitest';
import { fusedScore, rerankCandidates } from '#lib/vision/local-features/fusion.ts';

describe('rerankCandidates', () => {
  it('puts verified candidates first by inliers, then the rest by calibrated score', () => {
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
    // a's 4 inliers are within chance, so e's cosine leads; c's 9 do not make up for its lower cosine
    expect(ranked.map((r) => r.id)).toEqual(['d', 'b', 'e', 'a', 'c']);
    expect(ranked.map((r) => r.verified)).toEqual([true, true, false, false, false]);
  });

  it('lets inliers under the verification threshold outrank a slightly higher cosine', () => {
    // Prepare: the item with 8 inliers and a stranger with none, a little more similar overall
    const shortlist = [
      { id: 'stranger', globalScore: 0.62, inliers: 0 },
      { id: 'item', globalScore: 0.58, inliers: 8 },
    ];
    // Act
    const ranked = rerankCandidates(shortlist);
    // Assess
    expect(ranked.map((r) => r.id)).toEqual(['item', 'stranger']);
    expect(ranked.every((r) => !r.verified)).toBe(true);
    expect(ranked[0]!.score).toBe(fusedScore(shortlist[1]!));
  });

  it('does not let inliers within chance (7 or fewer) push a more similar candidate down', () => {
    // Prepare: a smooth product with no keypoints to verify, and a textured stranger with 7 chance inliers
    const shortlist = [
      { id: 'stranger', globalScore: 0.58, inliers: 7 },
      { id: 'smooth', globalScore: 0.6, inliers: 0 },
    ];
    // Act
    const ranked = rerankCandidates(shortlist);
    // Assess: the order of their cosines; the stranger's own score counts its inliers, so it is capped
    // down to the smooth product's
    expect(ranked.map((r) => r.id)).toEqual(['smooth', 'stranger']);
    expect(fusedScore(shortlist[0]!)).toBeGreaterThan(fusedScore(shortlist[1]!));
    expect(ranked[1]!.score).toBe(ranked[0]!.score);
  });

  it('keeps verified candidates in inlier order whatever their cosines', () => {
    // Prepare: a verified candidate that looks far more alike, and one with one inlier more
    const shortlist = [
      { id: 'alike', globalScore: 0.9, inliers: 12 },
      { id: 'more inliers', globalScore: 0.4, inliers: 13 },
    ];
    // Act
    const ranked = rerankCandidates(shortlist);
    // Assess
    expect(fusedScore(shortlist[0]!)).toBeGreaterThan(fusedScore(shortlist[1]!));
    expect(ranked.map((r) => r.id)).toEqual(['more inliers', 'alike']);
  });

  it('orders by global score where the calibrated scores tie', () => {
    // Prepare: both under the cosine floor with no inliers, so both have the same calibrated score
    const shortlist = [
      { id: 'lower', globalScore: 0.2, inliers: 0 },
      { id: 'higher', globalScore: 0.3, inliers: 0 },
    ];
    // Act
    const ranked = rerankCandidates(shortlist);
    // Assess
    expect(ranked[0]!.score).toBe(ranked[1]!.score);
    expect(ranked.map((r) => r.id)).toEqual(['higher', 'lower']);
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
