import { describe, expect, it } from 'vitest';
import {
  infoNceLossAndGradient,
  infoNceQueryLossAndGradient,
  projectRows,
} from '#layers/projection/contrastive.ts';
import { pcaWhitening, symmetricEigen } from '#layers/projection/linalg.ts';
import { seededRandom } from '#layers/projection/views.ts';
import { applyProjection, decodeProjection, encodeProjection } from '#lib/vision/projection.ts';

function randomArray(length: number, random: () => number): Float64Array {
  return Float64Array.from({ length }, () => random() * 2 - 1);
}

/** Each entry of `gradient` against the central finite difference of `loss` in that entry of `matrix`. */
function expectFiniteDifferences(
  loss: (matrix: Float64Array) => number,
  matrix: Float64Array,
  gradient: Float64Array,
): void {
  const h = 1e-6;
  for (let k = 0; k < matrix.length; k += 1) {
    const plus = Float64Array.from(matrix);
    const minus = Float64Array.from(matrix);
    plus[k]! += h;
    minus[k]! -= h;
    const numeric = (loss(plus) - loss(minus)) / (2 * h);
    expect(Math.abs(numeric - gradient[k]!)).toBeLessThan(1e-6 * Math.max(1, Math.abs(numeric)));
  }
}

describe('contrastive projection gradient', () => {
  it('matches central finite differences of the InfoNCE loss', () => {
    const random = seededRandom(3);
    const [d, outDim, queries, packshots] = [6, 4, 5, 3];
    const matrix = randomArray(outDim * d, random);
    const q = randomArray(queries * d, random);
    const p = randomArray(packshots * d, random);
    const targets = Int32Array.from([0, 1, 2, 1, 0]);
    const temperature = 0.3;
    const loss = (m: Float64Array) => infoNceLossAndGradient(m, outDim, d, q, targets, p, temperature);
    expectFiniteDifferences((m) => loss(m).loss, matrix, loss(matrix).gradient);
  });

  it('matches finite differences for the queries alone against fixed targets (the window projection)', () => {
    const random = seededRandom(5);
    const [d, outDim, queries, targetsCount] = [6, 4, 5, 3];
    const matrix = randomArray(outDim * d, random);
    const q = randomArray(queries * d, random);
    // Unit target vectors, as the fixed projection's packshots are.
    const fixed = randomArray(targetsCount * outDim, random);
    for (let j = 0; j < targetsCount; j += 1) {
      const row = fixed.subarray(j * outDim, (j + 1) * outDim);
      const norm = Math.hypot(...row);
      row.forEach((value, o) => (row[o] = value / norm));
    }
    const targets = Int32Array.from([2, 0, 1, 1, 2]);
    const temperature = 0.2;
    const loss = (m: Float64Array) =>
      infoNceQueryLossAndGradient(m, outDim, d, q, targets, fixed, temperature);
    expectFiniteDifferences((m) => loss(m).loss, matrix, loss(matrix).gradient);
  });

  it('projects rows to unit vectors', () => {
    const random = seededRandom(5);
    const { y } = projectRows(randomArray(3 * 4, random), 3, randomArray(2 * 4, random), 4);
    for (let i = 0; i < 2; i += 1)
      expect(Math.hypot(y[i * 3]!, y[i * 3 + 1]!, y[i * 3 + 2]!)).toBeCloseTo(1, 12);
  });
});

describe('projection linear algebra', () => {
  it('decomposes a symmetric matrix into descending eigenpairs that rebuild it', () => {
    const random = seededRandom(11);
    const d = 7;
    const b = randomArray(d * d, random);
    const matrix = new Float64Array(d * d);
    for (let i = 0; i < d; i += 1)
      for (let j = 0; j < d; j += 1)
        for (let k = 0; k < d; k += 1) matrix[i * d + j]! += b[i * d + k]! * b[j * d + k]!;
    const { values, vectors } = symmetricEigen(matrix, d);
    for (let i = 1; i < d; i += 1) expect(values[i]!).toBeLessThanOrEqual(values[i - 1]!);
    for (let i = 0; i < d; i += 1)
      for (let j = 0; j < d; j += 1) {
        let rebuilt = 0;
        for (let k = 0; k < d; k += 1) rebuilt += values[k]! * vectors[k * d + i]! * vectors[k * d + j]!;
        expect(rebuilt).toBeCloseTo(matrix[i * d + j]!, 9);
      }
  });

  it('whitens: projected training rows have identity covariance (ε = 0)', () => {
    const random = seededRandom(13);
    const [n, d, outDim] = [200, 5, 3];
    const rows = new Float64Array(n * d);
    for (let i = 0; i < n; i += 1)
      for (let k = 0; k < d; k += 1) rows[i * d + k] = (random() - 0.5) * (k + 1) + 0.2 * rows[i * d]!;
    const { mean, matrix } = pcaWhitening(rows, d, outDim, 0);
    const cov = new Float64Array(outDim * outDim);
    for (let i = 0; i < n; i += 1) {
      const z = Array.from({ length: outDim }, (_, o) => {
        let sum = 0;
        for (let k = 0; k < d; k += 1) sum += matrix[o * d + k]! * (rows[i * d + k]! - mean[k]!);
        return sum;
      });
      for (let a = 0; a < outDim; a += 1)
        for (let b = 0; b < outDim; b += 1) cov[a * outDim + b]! += (z[a]! * z[b]!) / n;
    }
    for (let a = 0; a < outDim; a += 1)
      for (let b = 0; b < outDim; b += 1) expect(cov[a * outDim + b]).toBeCloseTo(a === b ? 1 : 0, 6);
  });
});

describe('projection at run time', () => {
  const mean = [0.5, -0.25, 0];
  const matrix = [1, 0, 0, 0, 2, 1];
  const projection = decodeProjection(encodeProjection(mean, matrix), 3, 2);

  it('round-trips the float32 weight file and names its version by the bytes', () => {
    expect(Array.from(projection.mean)).toEqual(mean);
    expect(Array.from(projection.matrix)).toEqual(matrix);
    expect(projection.version).toMatch(/^[0-9a-f]{8}$/);
    expect(decodeProjection(encodeProjection(mean, [1, 0, 0, 0, 2, 2]), 3, 2).version).not.toBe(
      projection.version,
    );
    expect(() => decodeProjection(encodeProjection(mean, matrix), 3, 3)).toThrow(/bytes/);
  });

  it('centres, projects and L2-normalises to the output dimension', () => {
    const y = applyProjection(projection, Float32Array.from([1.5, 0.75, 1]));
    // x − μ = (1, 1, 1); W·(x − μ) = (1, 3); normalised by √10.
    expect(y).toHaveLength(2);
    expect(y[0]).toBeCloseTo(1 / Math.sqrt(10), 6);
    expect(y[1]).toBeCloseTo(3 / Math.sqrt(10), 6);
    expect(() => applyProjection(projection, new Float32Array(4))).toThrow(RangeError);
  });
});
