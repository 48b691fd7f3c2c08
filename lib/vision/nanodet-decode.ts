/**
 * Decoding NanoDet's GFL head. For every cell of the stride-8/16/32 grids the model gives 80 sigmoid class
 * scores and, per box side (left, top, right, bottom), a distribution over 11 distance bins. The distance is
 * the expectation of that distribution (softmax, Σ p·bin) times the stride, measured from the cell centre
 * ((col + 0.5)·stride, (row + 0.5)·stride). Then per-class non-maximum suppression.
 */
import type { Box } from './image-input.ts';

export interface Candidate {
  box: Box;
  classIndex: number;
  score: number;
}

export interface HeadLevel {
  stride: number;
  /** [cells × classes] sigmoid scores, cells row-major over the (inputSize/stride)² grid. */
  classScores: Float32Array;
  /** [cells × 4·bins] raw logits, sides in order left, top, right, bottom. */
  boxLogits: Float32Array;
}

export interface DecodeOptions {
  inputSize: number;
  classCount: number;
  bins: number;
  scoreThreshold: number;
}

/** Expected bin index of a softmax over logits[offset .. offset+bins). */
export function expectedBin(logits: Float32Array, offset: number, bins: number): number {
  let max = -Infinity;
  for (let k = 0; k < bins; k += 1) max = Math.max(max, logits[offset + k]!);
  let total = 0;
  let weighted = 0;
  for (let k = 0; k < bins; k += 1) {
    const p = Math.exp(logits[offset + k]! - max);
    total += p;
    weighted += p * k;
  }
  return weighted / total;
}

/** All (cell, class) pairs scoring at least the threshold, with their boxes in model-input pixels. */
export function decodeLevels(levels: readonly HeadLevel[], options: DecodeOptions): Candidate[] {
  const { inputSize, classCount, bins, scoreThreshold } = options;
  const candidates: Candidate[] = [];
  for (const { stride, classScores, boxLogits } of levels) {
    const columns = Math.ceil(inputSize / stride);
    const cells = classScores.length / classCount;
    for (let cell = 0; cell < cells; cell += 1) {
      let box: Box | undefined;
      for (let c = 0; c < classCount; c += 1) {
        const score = classScores[cell * classCount + c]!;
        if (score < scoreThreshold) continue;
        if (!box) {
          const cx = ((cell % columns) + 0.5) * stride;
          const cy = (Math.floor(cell / columns) + 0.5) * stride;
          const base = cell * 4 * bins;
          const [left, top, right, bottom] = [0, 1, 2, 3].map(
            (side) => expectedBin(boxLogits, base + side * bins, bins) * stride,
          ) as Box;
          box = [cx - left, cy - top, cx + right, cy + bottom];
        }
        candidates.push({ box, classIndex: c, score });
      }
    }
  }
  return candidates;
}

export function intersectionOverUnion(a: Box, b: Box): number {
  const width = Math.min(a[2], b[2]) - Math.max(a[0], b[0]);
  const height = Math.min(a[3], b[3]) - Math.max(a[1], b[1]);
  if (width <= 0 || height <= 0) return 0;
  const intersection = width * height;
  const union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - intersection;
  return union > 0 ? intersection / union : 0;
}

/** Greedy NMS within each class; returns the kept candidates by descending score, at most `limit`. */
export function perClassNms(
  candidates: readonly Candidate[],
  iouThreshold: number,
  limit: number,
): Candidate[] {
  const sorted = [...candidates].sort((a, b) => b.score - a.score);
  const keptByClass = new Map<number, Candidate[]>();
  const kept: Candidate[] = [];
  for (const candidate of sorted) {
    const sameClass = keptByClass.get(candidate.classIndex) ?? [];
    if (sameClass.some((other) => intersectionOverUnion(other.box, candidate.box) > iouThreshold)) continue;
    sameClass.push(candidate);
    keptByClass.set(candidate.classIndex, sameClass);
    kept.push(candidate);
    if (kept.length === limit) break;
  }
  return kept;
}
