/**
 * The little linear algebra the projection needs, in Float64 with a fixed summation order (so the same
 * inputs give the same bits on every run): mean, covariance, symmetric eigen-decomposition (cyclic Jacobi)
 * and PCA-whitening.
 */

/** Column means of a row-major n×d matrix. */
export function columnMeans(rows: Float32Array | Float64Array, d: number): Float64Array {
  const n = rows.length / d;
  const mean = new Float64Array(d);
  for (let i = 0; i < n; i += 1) for (let k = 0; k < d; k += 1) mean[k]! += rows[i * d + k]!;
  for (let k = 0; k < d; k += 1) mean[k]! /= n;
  return mean;
}

/** Covariance (divided by n) of the rows around `mean`, d×d row-major. */
export function covariance(rows: Float32Array | Float64Array, d: number, mean: Float64Array): Float64Array {
  const n = rows.length / d;
  const cov = new Float64Array(d * d);
  const centred = new Float64Array(d);
  for (let i = 0; i < n; i += 1) {
    for (let k = 0; k < d; k += 1) centred[k] = rows[i * d + k]! - mean[k]!;
    for (let a = 0; a < d; a += 1) {
      const ca = centred[a]!;
      if (ca === 0) continue;
      const row = a * d;
      for (let b = a; b < d; b += 1) cov[row + b]! += ca * centred[b]!;
    }
  }
  for (let a = 0; a < d; a += 1)
    for (let b = a; b < d; b += 1) {
      const value = cov[a * d + b]! / n;
      cov[a * d + b] = value;
      cov[b * d + a] = value;
    }
  return cov;
}

/**
 * Eigen-decomposition of a symmetric d×d matrix by cyclic Jacobi rotations. Returns eigenvalues in
 * descending order and the matching unit eigenvectors as rows (d×d row-major), each with its largest
 * component positive (a fixed sign, so the result does not depend on rotation order details).
 */
export function symmetricEigen(
  matrix: Float64Array,
  d: number,
): { values: Float64Array; vectors: Float64Array } {
  const a = Float64Array.from(matrix);
  const v = new Float64Array(d * d);
  for (let i = 0; i < d; i += 1) v[i * d + i] = 1;
  for (let sweep = 0; sweep < 60; sweep += 1) {
    let off = 0;
    let diagonal = 0;
    for (let p = 0; p < d; p += 1) {
      diagonal += a[p * d + p]! * a[p * d + p]!;
      for (let q = p + 1; q < d; q += 1) off += a[p * d + q]! * a[p * d + q]!;
    }
    if (off <= 1e-30 * diagonal) break;
    for (let p = 0; p < d - 1; p += 1)
      for (let q = p + 1; q < d; q += 1) {
        const apq = a[p * d + q]!;
        if (Math.abs(apq) < 1e-300) continue;
        const theta = (a[q * d + q]! - a[p * d + p]!) / (2 * apq);
        const t = Math.sign(theta || 1) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
        const c = 1 / Math.sqrt(t * t + 1);
        const s = t * c;
        // A ← Jᵀ A J on rows/columns p and q.
        for (let k = 0; k < d; k += 1) {
          const akp = a[k * d + p]!;
          const akq = a[k * d + q]!;
          a[k * d + p] = c * akp - s * akq;
          a[k * d + q] = s * akp + c * akq;
        }
        for (let k = 0; k < d; k += 1) {
          const apk = a[p * d + k]!;
          const aqk = a[q * d + k]!;
          a[p * d + k] = c * apk - s * aqk;
          a[q * d + k] = s * apk + c * aqk;
        }
        // Eigenvectors accumulate as rows: V ← Jᵀ V.
        for (let k = 0; k < d; k += 1) {
          const vpk = v[p * d + k]!;
          const vqk = v[q * d + k]!;
          v[p * d + k] = c * vpk - s * vqk;
          v[q * d + k] = s * vpk + c * vqk;
        }
      }
  }
  const order = Array.from({ length: d }, (_, i) => i).sort((i, j) => a[j * d + j]! - a[i * d + i]! || i - j);
  const values = new Float64Array(d);
  const vectors = new Float64Array(d * d);
  order.forEach((source, target) => {
    values[target] = a[source * d + source]!;
    let largest = 0;
    for (let k = 0; k < d; k += 1)
      if (Math.abs(v[source * d + k]!) > Math.abs(largest)) largest = v[source * d + k]!;
    const sign = largest < 0 ? -1 : 1;
    for (let k = 0; k < d; k += 1) vectors[target * d + k] = sign * v[source * d + k]!;
  });
  return { values, vectors };
}

/**
 * PCA-whitening: the top `outDim` principal directions of the rows, each scaled by 1/√(λ + ε·λ̄) (λ̄ the
 * mean eigenvalue; ε = 0 is plain whitening). Returns the outDim×d matrix (row-major) and the mean.
 */
export function pcaWhitening(
  rows: Float32Array | Float64Array,
  d: number,
  outDim: number,
  epsilon: number,
): { mean: Float64Array; matrix: Float64Array } {
  const mean = columnMeans(rows, d);
  const { values, vectors } = symmetricEigen(covariance(rows, d, mean), d);
  let total = 0;
  for (let i = 0; i < d; i += 1) total += Math.max(values[i]!, 0);
  const floor = (epsilon * total) / d;
  const matrix = new Float64Array(outDim * d);
  for (let i = 0; i < outDim; i += 1) {
    const scale = 1 / Math.sqrt(Math.max(values[i]!, 0) + floor + 1e-12);
    for (let k = 0; k < d; k += 1) matrix[i * d + k] = vectors[i * d + k]! * scale;
  }
  return { mean, matrix };
}
