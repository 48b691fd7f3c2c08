/**
 * The contrastive objective and its hand-written gradient. The head is y = normalise(W·(x − μ)), W of
 * shape D×d. For each query view i (pasted, cropped) of object t(i), InfoNCE over the packshots p_j of the
 * objects in the batch (the catalogue side of a search):
 *
 *   ℓ_i = −s_{i,t(i)}/τ + log Σ_j exp(s_ij/τ),   s_ij = y_i · y(p_j)
 *
 * averaged over queries. Gradient: ∂ℓ/∂y_i = (Σ_j a_ij y(p_j) − y(p_t))/τ and ∂ℓ/∂y(p_j) = Σ_i (a_ij − [j = t(i)]) y_i/τ
 * (a = softmax row), through the normalisation ∂/∂z = (g − y (y·g))/‖z‖, and ∂/∂W = Σ ∂/∂z ⊗ (x − μ).
 * All sums run in a fixed order in Float64, so a run is bit-reproducible.
 */

export interface Projected {
  /** Unit vectors y, n×D. */
  y: Float64Array;
  /** ‖W·c‖ per row. */
  norms: Float64Array;
}

/** y = normalise(W·c) for each row c of `centred` (n×d). */
export function projectRows(
  matrix: Float64Array,
  outDim: number,
  centred: Float64Array,
  d: number,
): Projected {
  const n = centred.length / d;
  const y = new Float64Array(n * outDim);
  const norms = new Float64Array(n);
  for (let i = 0; i < n; i += 1) {
    const c = i * d;
    let sum = 0;
    for (let o = 0; o < outDim; o += 1) {
      const w = o * d;
      let z = 0;
      for (let k = 0; k < d; k += 1) z += matrix[w + k]! * centred[c + k]!;
      y[i * outDim + o] = z;
      sum += z * z;
    }
    const norm = Math.sqrt(sum) || 1;
    norms[i] = norm;
    for (let o = 0; o < outDim; o += 1) y[i * outDim + o]! /= norm;
  }
  return { y, norms };
}

/**
 * Mean InfoNCE loss of the queries against the packshots, and its gradient with respect to W (D×d).
 * `targets[i]` is the packshot row of query i.
 */
export function infoNceLossAndGradient(
  matrix: Float64Array,
  outDim: number,
  d: number,
  queries: Float64Array,
  targets: Int32Array,
  packshots: Float64Array,
  temperature: number,
): { loss: number; gradient: Float64Array } {
  const np = packshots.length / d;
  const q = projectRows(matrix, outDim, queries, d);
  const p = projectRows(matrix, outDim, packshots, d);
  const gp = new Float64Array(np * outDim);
  const { loss, gq } = softmaxGradients(q.y, p.y, outDim, targets, temperature, gp);
  const gradient = new Float64Array(outDim * d);
  accumulate(gradient, outDim, d, q, gq, queries);
  accumulate(gradient, outDim, d, p, gp, packshots);
  return { loss, gradient };
}

/**
 * The InfoNCE loss of unit query rows `qy` against unit target rows `py` (mean over the queries), and
 * its gradient with respect to the query rows; with `gp`, also the gradient with respect to the target
 * rows, added into it. Sums run in a fixed order (the trained bytes depend on it).
 */
function softmaxGradients(
  qy: Float64Array,
  py: Float64Array,
  outDim: number,
  targets: Int32Array,
  temperature: number,
  gp?: Float64Array,
): { loss: number; gq: Float64Array } {
  const nq = qy.length / outDim;
  const np = py.length / outDim;
  const gq = new Float64Array(nq * outDim);
  const logits = new Float64Array(np);
  let loss = 0;
  for (let i = 0; i < nq; i += 1) {
    let max = -Infinity;
    for (let j = 0; j < np; j += 1) {
      let s = 0;
      for (let o = 0; o < outDim; o += 1) s += qy[i * outDim + o]! * py[j * outDim + o]!;
      logits[j] = s / temperature;
      if (logits[j]! > max) max = logits[j]!;
    }
    let partition = 0;
    for (let j = 0; j < np; j += 1) {
      logits[j] = Math.exp(logits[j]! - max);
      partition += logits[j]!;
    }
    const t = targets[i]!;
    loss += -Math.log(logits[t]! / partition);
    for (let j = 0; j < np; j += 1) {
      const coefficient = (logits[j]! / partition - (j === t ? 1 : 0)) / (temperature * nq);
      if (coefficient === 0) continue;
      for (let o = 0; o < outDim; o += 1) {
        gq[i * outDim + o]! += coefficient * py[j * outDim + o]!;
        if (gp) gp[j * outDim + o]! += coefficient * qy[i * outDim + o]!;
      }
    }
  }
  return { loss: loss / nq, gq };
}

/** gradient += Σ_rows (g − y (y·g))/‖z‖ ⊗ c. */
function accumulate(
  gradient: Float64Array,
  outDim: number,
  d: number,
  projected: Projected,
  gy: Float64Array,
  centred: Float64Array,
): void {
  const n = centred.length / d;
  const gz = new Float64Array(outDim);
  for (let i = 0; i < n; i += 1) {
    let dot = 0;
    for (let o = 0; o < outDim; o += 1) dot += projected.y[i * outDim + o]! * gy[i * outDim + o]!;
    for (let o = 0; o < outDim; o += 1)
      gz[o] = (gy[i * outDim + o]! - projected.y[i * outDim + o]! * dot) / projected.norms[i]!;
    const c = i * d;
    for (let o = 0; o < outDim; o += 1) {
      const g = gz[o]!;
      if (g === 0) continue;
      const w = o * d;
      for (let k = 0; k < d; k += 1) gradient[w + k]! += g * centred[c + k]!;
    }
  }
}

/**
 * InfoNCE of the queries against fixed target vectors (unit rows, n×D, not trained), and its gradient
 * with respect to W only: the window projection (train.ts) learns to map windows next to the packshots
 * as the already trained projection places them, so the catalogue's vectors do not move.
 */
export function infoNceQueryLossAndGradient(
  matrix: Float64Array,
  outDim: number,
  d: number,
  queries: Float64Array,
  targets: Int32Array,
  fixed: Float64Array,
  temperature: number,
): { loss: number; gradient: Float64Array } {
  const q = projectRows(matrix, outDim, queries, d);
  const { loss, gq } = softmaxGradients(q.y, fixed, outDim, targets, temperature);
  const gradient = new Float64Array(outDim * d);
  accumulate(gradient, outDim, d, q, gq, queries);
  return { loss, gradient };
}
