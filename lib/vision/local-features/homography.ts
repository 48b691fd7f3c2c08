/**
 * RANSAC homography estimation over matched keypoints, in plain TypeScript: on re-ranking's small match
 * sets (tens of pairs) a call into OpenCV's wasm costs more than the whole estimate here, and a seeded PRNG
 * makes inlier counts reproducible run to run.
 *
 * Each hypothesis is the exact homography through a 4-point sample, in Hartley-normalised coordinates.
 * It is the same matrix the 4-point DLT (h33 = 1, an 8×8 linear system) gives, computed in closed form as
 * square→quad(target) · (square→quad(source))⁻¹ instead of eliminating the 8×8 system (measured 1.2–1.5×
 * faster per call on sets of 8–32 random matches, identical inlier counts). Samples with nearly collinear
 * triples or an orientation flip between the images are rejected before solving. The best hypothesis is
 * refitted by least squares (normal equations of the DLT system) on its inliers and kept if it explains
 * more matches.
 */
import { seededRandom } from '#lib/vision/seeded-random.ts';

export interface RansacOptions {
  /** Reprojection error (px, in the candidate image) under which a match is an inlier. Default 5. */
  threshold?: number;
  /** Hypothesis budget; fewer are drawn once the adaptive bound for `confidence` is met. Default 500. */
  maxIterations?: number;
  /** Probability of having drawn an all-inlier sample at which sampling stops. Default 0.995. */
  confidence?: number;
  /** PRNG seed; the same seed and matches give the same result. */
  seed?: number;
}

export interface HomographyFit {
  /** Matches consistent with the best homography (0 when fewer than 4 matches or all samples degenerate). */
  inliers: number;
  /** Row-major 3×3 matrix mapping query pixels to candidate pixels, when one was found. */
  homography?: Float64Array;
}

const SAMPLE = 4;
const DEFAULT_SEED = 0x2545f491;
/** Largest area magnification (either way) a plausible query→catalogue homography has. */
const MAX_AREA_SCALE = 64;
/** Twice the area (px²) below which three sample points count as collinear. */
const MIN_DOUBLE_AREA_PX = 16;

interface Normalisation {
  cx: number;
  cy: number;
  scale: number;
}

/** Hartley normalisation: centroid to the origin, mean distance √2. */
function normalise(xs: Float64Array, ys: Float64Array): Normalisation {
  const n = xs.length;
  let cx = 0;
  let cy = 0;
  for (let i = 0; i < n; i++) {
    cx += xs[i]!;
    cy += ys[i]!;
  }
  cx /= n;
  cy /= n;
  let meanDistance = 0;
  for (let i = 0; i < n; i++) meanDistance += Math.hypot(xs[i]! - cx, ys[i]! - cy);
  meanDistance /= n;
  const scale = meanDistance > 0 ? Math.SQRT2 / meanDistance : 1;
  for (let i = 0; i < n; i++) {
    xs[i] = (xs[i]! - cx) * scale;
    ys[i] = (ys[i]! - cy) * scale;
  }
  return { cx, cy, scale };
}

/**
 * Solves the n×n system in `m` (row-major, n rows of n+1 with the right-hand side last) by Gaussian
 * elimination with partial pivoting; the solution is left in `out`. Returns false when singular.
 */
function solve(m: Float64Array, n: number, out: Float64Array): boolean {
  const w = n + 1;
  for (let col = 0; col < n; col++) {
    let pivot = col;
    let largest = Math.abs(m[col * w + col]!);
    for (let r = col + 1; r < n; r++) {
      const v = Math.abs(m[r * w + col]!);
      if (v > largest) {
        largest = v;
        pivot = r;
      }
    }
    if (largest < 1e-12) return false;
    if (pivot !== col) {
      for (let k = col; k < w; k++) {
        const t = m[col * w + k]!;
        m[col * w + k] = m[pivot * w + k]!;
        m[pivot * w + k] = t;
      }
    }
    const diag = m[col * w + col]!;
    for (let r = col + 1; r < n; r++) {
      const f = m[r * w + col]! / diag;
      if (f === 0) continue;
      for (let k = col; k < w; k++) m[r * w + k] = m[r * w + k]! - f * m[col * w + k]!;
    }
  }
  for (let r = n - 1; r >= 0; r--) {
    let sum = m[r * w + n]!;
    for (let k = r + 1; k < n; k++) sum -= m[r * w + k]! * out[k]!;
    out[r] = sum / m[r * w + r]!;
  }
  return true;
}

/**
 * Projective map of the unit square onto the quad (p0, p1, p2, p3) = (0,0), (1,0), (1,1), (0,1) →
 * written row-major into `out` at `offset` (Heckbert's closed form). Returns false for a degenerate quad.
 */
function squareToQuad(
  xs: Float64Array,
  ys: Float64Array,
  i0: number,
  i1: number,
  i2: number,
  i3: number,
  out: Float64Array,
  offset: number,
): boolean {
  const x0 = xs[i0]!;
  const y0 = ys[i0]!;
  const x1 = xs[i1]!;
  const y1 = ys[i1]!;
  const x2 = xs[i2]!;
  const y2 = ys[i2]!;
  const x3 = xs[i3]!;
  const y3 = ys[i3]!;
  const dx1 = x1 - x2;
  const dx2 = x3 - x2;
  const dx3 = x0 - x1 + x2 - x3;
  const dy1 = y1 - y2;
  const dy2 = y3 - y2;
  const dy3 = y0 - y1 + y2 - y3;
  const den = dx1 * dy2 - dx2 * dy1;
  if (Math.abs(den) < 1e-12) return false;
  const g = (dx3 * dy2 - dx2 * dy3) / den;
  const h = (dx1 * dy3 - dx3 * dy1) / den;
  out[offset] = x1 - x0 + g * x1;
  out[offset + 1] = x3 - x0 + h * x3;
  out[offset + 2] = x0;
  out[offset + 3] = y1 - y0 + g * y1;
  out[offset + 4] = y3 - y0 + h * y3;
  out[offset + 5] = y0;
  out[offset + 6] = g;
  out[offset + 7] = h;
  out[offset + 8] = 1;
  return true;
}

/**
 * The homography taking sample points `s` of (sx, sy) to the same points of (tx, ty), as its first eight
 * entries with h33 = 1, in `out`; `m` is 18 numbers of scratch. Returns false when degenerate.
 */
function fourPointHomography(
  sx: Float64Array,
  sy: Float64Array,
  tx: Float64Array,
  ty: Float64Array,
  s: Int32Array,
  m: Float64Array,
  out: Float64Array,
): boolean {
  if (!squareToQuad(sx, sy, s[0]!, s[1]!, s[2]!, s[3]!, m, 0)) return false;
  if (!squareToQuad(tx, ty, s[0]!, s[1]!, s[2]!, s[3]!, m, 9)) return false;
  // Adjugate of A (source map) stands in for its inverse: the scale cancels when h33 is set to 1.
  const a = m[0]!;
  const b = m[1]!;
  const c = m[2]!;
  const d = m[3]!;
  const e = m[4]!;
  const f = m[5]!;
  const g = m[6]!;
  const h = m[7]!;
  const i = m[8]!;
  const A0 = e * i - f * h;
  const A1 = c * h - b * i;
  const A2 = b * f - c * e;
  const A3 = f * g - d * i;
  const A4 = a * i - c * g;
  const A5 = c * d - a * f;
  const A6 = d * h - e * g;
  const A7 = b * g - a * h;
  const A8 = a * e - b * d;
  let result8 = 0;
  for (let r = 0; r < 3; r++) {
    const b0 = m[9 + 3 * r]!;
    const b1 = m[10 + 3 * r]!;
    const b2 = m[11 + 3 * r]!;
    const v0 = b0 * A0 + b1 * A3 + b2 * A6;
    const v1 = b0 * A1 + b1 * A4 + b2 * A7;
    const v2 = b0 * A2 + b1 * A5 + b2 * A8;
    if (r < 2) {
      out[3 * r] = v0;
      out[3 * r + 1] = v1;
      out[3 * r + 2] = v2;
    } else {
      out[6] = v0;
      out[7] = v1;
      result8 = v2;
    }
  }
  if (Math.abs(result8) < 1e-12) return false;
  for (let k = 0; k < 8; k++) out[k] = out[k]! / result8;
  return true;
}

/** Writes the two DLT rows (with right-hand sides) of correspondence (x, y) → (u, v) at `offset`. */
function writeRows(m: Float64Array, offset: number, x: number, y: number, u: number, v: number): void {
  m[offset] = x;
  m[offset + 1] = y;
  m[offset + 2] = 1;
  m[offset + 3] = 0;
  m[offset + 4] = 0;
  m[offset + 5] = 0;
  m[offset + 6] = -u * x;
  m[offset + 7] = -u * y;
  m[offset + 8] = u;
  m[offset + 9] = 0;
  m[offset + 10] = 0;
  m[offset + 11] = 0;
  m[offset + 12] = x;
  m[offset + 13] = y;
  m[offset + 14] = 1;
  m[offset + 15] = -v * x;
  m[offset + 16] = -v * y;
  m[offset + 17] = v;
}

/** Twice the signed area of triangle (a, b, c). */
function doubleArea(xs: Float64Array, ys: Float64Array, a: number, b: number, c: number): number {
  return (xs[b]! - xs[a]!) * (ys[c]! - ys[a]!) - (ys[b]! - ys[a]!) * (xs[c]! - xs[a]!);
}

const TRIPLES = [
  [0, 1, 2],
  [0, 1, 3],
  [0, 2, 3],
  [1, 2, 3],
] as const;

/**
 * Estimates a homography from query points to candidate points over the matched pairs and counts inliers.
 *
 * @param source query keypoints, x/y interleaved
 * @param target candidate keypoints, x/y interleaved
 * @param pairs `[queryIndex, candidateIndex, …]` as produced by the matcher
 */
export function ransacHomography(
  source: Float32Array,
  target: Float32Array,
  pairs: Int32Array,
  options: RansacOptions = {},
): HomographyFit {
  const n = pairs.length / 2;
  if (n < SAMPLE) return { inliers: 0 };
  const threshold = options.threshold ?? 5;
  const maxIterations = options.maxIterations ?? 500;
  const confidence = options.confidence ?? 0.995;
  const random = seededRandom(options.seed ?? DEFAULT_SEED);

  const sx = new Float64Array(n);
  const sy = new Float64Array(n);
  const tx = new Float64Array(n);
  const ty = new Float64Array(n);
  for (let k = 0; k < n; k++) {
    const qi = pairs[2 * k]!;
    const cj = pairs[2 * k + 1]!;
    sx[k] = source[2 * qi]!;
    sy[k] = source[2 * qi + 1]!;
    tx[k] = target[2 * cj]!;
    ty[k] = target[2 * cj + 1]!;
  }
  const ns = normalise(sx, sy);
  const nt = normalise(tx, ty);
  // Errors are measured in the normalised candidate frame, an isotropic scaling of its pixels.
  const threshold2 = (threshold * nt.scale) ** 2;
  const minAreaSource = MIN_DOUBLE_AREA_PX * ns.scale * ns.scale;
  const minAreaTarget = MIN_DOUBLE_AREA_PX * nt.scale * nt.scale;

  const quads = new Float64Array(18);
  const h = new Float64Array(8);
  const bestH = new Float64Array(8);
  const sample = new Int32Array(SAMPLE);
  const inlierMask = new Uint8Array(n);
  let best = 0;
  let iterations = maxIterations;

  // Local area scale (determinant of the linear part) in pixels, from the normalised one: products are
  // seen from at most ~8× closer or farther, so a map that shrinks or grows area beyond 64× is a chance fit
  // of clustered matches (measured: it is what lifts unrelated pairs to ~10 "inliers").
  const areaFactor = (ns.scale / nt.scale) ** 2;
  const plausible = (hh: Float64Array): boolean => {
    const det = (hh[0]! * hh[4]! - hh[1]! * hh[3]!) * areaFactor;
    return det > 1 / MAX_AREA_SCALE && det < MAX_AREA_SCALE;
  };

  const countInliers = (hh: Float64Array, mask?: Uint8Array): number => {
    let count = 0;
    for (let k = 0; k < n; k++) {
      const x = sx[k]!;
      const y = sy[k]!;
      const w = hh[6]! * x + hh[7]! * y + 1;
      let inlier = 0;
      if (w > 1e-9) {
        const ex = (hh[0]! * x + hh[1]! * y + hh[2]!) / w - tx[k]!;
        const ey = (hh[3]! * x + hh[4]! * y + hh[5]!) / w - ty[k]!;
        if (ex * ex + ey * ey < threshold2) inlier = 1;
      }
      count += inlier;
      if (mask) mask[k] = inlier;
    }
    return count;
  };

  for (let it = 0; it < iterations; it++) {
    // Draw 4 distinct matches.
    for (let s = 0; s < SAMPLE; s++) {
      let pick: number;
      do pick = Math.floor(random() * n);
      while ((s > 0 && sample[0] === pick) || (s > 1 && sample[1] === pick) || (s > 2 && sample[2] === pick));
      sample[s] = pick;
    }
    let degenerate = false;
    for (const [a, b, c] of TRIPLES) {
      const as = doubleArea(sx, sy, sample[a]!, sample[b]!, sample[c]!);
      const at = doubleArea(tx, ty, sample[a]!, sample[b]!, sample[c]!);
      // Collinear points leave the DLT underdetermined; a sign change means the map folds the plane,
      // which no view of a flat or convex product does (mirrored views are matched as their own set).
      if (Math.abs(as) < minAreaSource || Math.abs(at) < minAreaTarget || as * at < 0) {
        degenerate = true;
        break;
      }
    }
    if (degenerate) continue;
    if (!fourPointHomography(sx, sy, tx, ty, sample, quads, h) || !plausible(h)) continue;
    const count = countInliers(h);
    if (count > best) {
      best = count;
      bestH.set(h);
      const allInlierSample = (count / n) ** SAMPLE;
      if (allInlierSample >= 1) break;
      const needed = Math.ceil(Math.log(1 - confidence) / Math.log(1 - allInlierSample));
      iterations = Math.min(maxIterations, Math.max(it + 1, needed));
    }
  }
  if (best < SAMPLE) return { inliers: 0 };

  // Least-squares refit on the inliers (normal equations of the same linear system), kept if it explains more.
  countInliers(bestH, inlierMask);
  const normal = new Float64Array(8 * 9);
  const rows = new Float64Array(18);
  for (let k = 0; k < n; k++) {
    if (!inlierMask[k]) continue;
    writeRows(rows, 0, sx[k]!, sy[k]!, tx[k]!, ty[k]!);
    for (let o = 0; o < 18; o += 9) {
      for (let r = 0; r < 8; r++) {
        const rv = rows[o + r]!;
        if (rv === 0) continue;
        for (let c = 0; c < 9; c++) normal[r * 9 + c] = normal[r * 9 + c]! + rv * rows[o + c]!;
      }
    }
  }
  if (solve(normal, 8, h) && plausible(h)) {
    const refitted = countInliers(h);
    if (refitted > best) {
      best = refitted;
      bestH.set(h);
    }
  }
  return { inliers: best, homography: denormalise(bestH, ns, nt) };
}

/** H = T_target⁻¹ · Hn · T_source, scaled so that H[8] = 1. */
function denormalise(hn: Float64Array, s: Normalisation, t: Normalisation): Float64Array {
  const Ts = [s.scale, 0, -s.scale * s.cx, 0, s.scale, -s.scale * s.cy, 0, 0, 1];
  const TtInv = [1 / t.scale, 0, t.cx, 0, 1 / t.scale, t.cy, 0, 0, 1];
  const Hn = [...hn, 1];
  const mul = (a: readonly number[], b: readonly number[]): number[] => {
    const out = new Array<number>(9).fill(0);
    for (let r = 0; r < 3; r++)
      for (let c = 0; c < 3; c++)
        for (let k = 0; k < 3; k++) out[r * 3 + c]! += a[r * 3 + k]! * b[k * 3 + c]!;
    return out;
  };
  const H = mul(TtInv, mul(Hn, Ts));
  const h22 = H[8]!;
  return Float64Array.from(H, (v) => v / h22);
}
