import { describe, expect, it } from 'vitest';
import { ransacHomography } from '#lib/vision/local-features/homography.ts';

const TRUE_H = [1.1, 0.2, 30, -0.15, 0.95, 12, 0.0004, -0.0002, 1];

function project(h: ArrayLike<number>, x: number, y: number): [number, number] {
  const w = h[6]! * x + h[7]! * y + h[8]!;
  return [(h[0]! * x + h[1]! * y + h[2]!) / w, (h[3]! * x + h[4]! * y + h[5]!) / w];
}

/** `inliers` correspondences under TRUE_H (with ±1 px noise) followed by `outliers` random ones. */
function correspondences(inliers: number, outliers: number, seed = 11) {
  let state = seed;
  const random = (): number => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
  const n = inliers + outliers;
  const source = new Float32Array(2 * n);
  const target = new Float32Array(2 * n);
  const pairs = new Int32Array(2 * n);
  for (let k = 0; k < n; k++) {
    const x = random() * 400;
    const y = random() * 300;
    source[2 * k] = x;
    source[2 * k + 1] = y;
    const [u, v] = k < inliers ? project(TRUE_H, x, y) : [random() * 500, random() * 400];
    target[2 * k] = u + (k < inliers ? random() * 2 - 1 : 0);
    target[2 * k + 1] = v + (k < inliers ? random() * 2 - 1 : 0);
    // Pairs deliberately index the points in a different order from storage.
    pairs[2 * k] = k;
    pairs[2 * k + 1] = k;
  }
  return { source, target, pairs };
}

describe('ransacHomography', () => {
  it('recovers the homography and counts the inliers among 50 % outliers', () => {
    // Prepare
    const { source, target, pairs } = correspondences(40, 40);
    // Act
    const fit = ransacHomography(source, target, pairs);
    // Assess: the 40 true correspondences, plus at most a couple of outliers landing within 5 px by chance
    expect(fit.inliers).toBeGreaterThanOrEqual(40);
    expect(fit.inliers).toBeLessThanOrEqual(42);
    for (const [x, y] of [
      [0, 0],
      [400, 300],
      [200, 50],
    ] as const) {
      const [u, v] = project(fit.homography!, x, y);
      const [tu, tv] = project(TRUE_H, x, y);
      expect(Math.hypot(u - tu, v - tv)).toBeLessThan(2);
    }
  });

  it('reproduces the exact homography from four exact correspondences', () => {
    // Prepare: the corners of a 400×300 image and their images under TRUE_H
    const corners = [0, 0, 400, 0, 400, 300, 0, 300];
    const source = new Float32Array(corners);
    const target = new Float32Array(8);
    for (let k = 0; k < 4; k++) target.set(project(TRUE_H, corners[2 * k]!, corners[2 * k + 1]!), 2 * k);
    // Act
    const fit = ransacHomography(source, target, new Int32Array([0, 0, 1, 1, 2, 2, 3, 3]));
    // Assess
    expect(fit.inliers).toBe(4);
    for (const [k, value] of TRUE_H.entries()) expect(fit.homography![k]).toBeCloseTo(value, 4);
  });

  it('finds no model in random correspondences', () => {
    // Prepare
    const { source, target, pairs } = correspondences(0, 60);
    // Act
    const fit = ransacHomography(source, target, pairs);
    // Assess: 4 points always fit, a few more by chance, never a consistent majority
    expect(fit.inliers).toBeLessThan(8);
  });

  it('gives the same result for the same seed', () => {
    // Prepare
    const { source, target, pairs } = correspondences(15, 45);
    // Act
    const runs = [1, 2, 3].map(() => ransacHomography(source, target, pairs, { seed: 42 }));
    // Assess
    expect(runs[1]).toEqual(runs[0]);
    expect(runs[2]).toEqual(runs[0]);
  });

  it('returns zero inliers for fewer than four matches and for collinear points', () => {
    // Prepare
    const { source, target, pairs } = correspondences(3, 0);
    const line = new Float32Array(Array.from({ length: 20 }, (_, k) => (k % 2 === 0 ? k * 10 : k * 5)));
    const linePairs = new Int32Array(Array.from({ length: 20 }, (_, k) => k >> 1));
    // Act / Assess
    expect(ransacHomography(source, target, pairs).inliers).toBe(0);
    expect(ransacHomography(line, line, linePairs).inliers).toBe(0);
  });
});
