/**
 * Scores of the evaluation: detector average precision (PASCAL VOC style, all-point interpolation, IoU 0.5,
 * each ground-truth box matched at most once) and retrieval recall@k (one relevant item per query).
 */
import { intersectionOverUnion } from '#lib/vision/nanodet-decode.ts';
import type { Box } from '#lib/vision/image-input.ts';

export interface LabelledBox {
  label: string;
  box: Box;
}

export interface ScoredBox extends LabelledBox {
  score: number;
}

export interface DetectionSample {
  truth: LabelledBox[];
  detections: ScoredBox[];
}

/** AP of one class over all samples: area under the precision envelope of the score-ranked detections. */
export function averagePrecision(
  samples: readonly DetectionSample[],
  label: string,
  iouThreshold = 0.5,
): number | undefined {
  const truthCount = samples.reduce(
    (count, { truth }) => count + truth.filter((object) => object.label === label).length,
    0,
  );
  if (truthCount === 0) return undefined;
  const ranked = samples
    .flatMap(({ detections }, sample) =>
      detections.filter((d) => d.label === label).map((d) => ({ ...d, sample })),
    )
    .sort((a, b) => b.score - a.score);
  const matched = samples.map(({ truth }) => truth.map(() => false));
  let truePositives = 0;
  const precisions: number[] = [];
  const recalls: number[] = [];
  ranked.forEach((detection, rank) => {
    const truth = samples[detection.sample]!.truth;
    let best = -1;
    let bestOverlap = iouThreshold;
    truth.forEach((object, i) => {
      if (object.label !== label) return;
      const overlap = intersectionOverUnion(object.box, detection.box);
      if (overlap >= bestOverlap) [best, bestOverlap] = [i, overlap];
    });
    if (best >= 0 && !matched[detection.sample]![best]) {
      matched[detection.sample]![best] = true;
      truePositives += 1;
    }
    precisions.push(truePositives / (rank + 1));
    recalls.push(truePositives / truthCount);
  });
  let area = 0;
  let previousRecall = 0;
  for (let i = 0; i < ranked.length; i += 1) {
    const envelope = Math.max(...precisions.slice(i));
    area += (recalls[i]! - previousRecall) * envelope;
    previousRecall = recalls[i]!;
  }
  return area;
}

/** Mean AP over the classes present in the ground truth; detections of other classes are not judged. */
export function meanAveragePrecision(
  samples: readonly DetectionSample[],
  iouThreshold = 0.5,
): { mAP: number; perClass: Map<string, number> } {
  const labels = [...new Set(samples.flatMap(({ truth }) => truth.map(({ label }) => label)))].sort();
  const perClass = new Map(labels.map((label) => [label, averagePrecision(samples, label, iouThreshold)!]));
  const values = [...perClass.values()];
  return { mAP: values.reduce((sum, value) => sum + value, 0) / values.length, perClass };
}

/** Fraction of queries whose relevant item is among the first k of its ranking (rank is 0-based). */
export function recallAtK(ranks: readonly number[], k: number): number {
  return ranks.filter((rank) => rank < k).length / ranks.length;
}

/** 0-based rank of `relevant` when items are sorted by descending score (ties count against it). */
export function rankOf(scores: Float32Array | readonly number[], relevant: number): number {
  const target = scores[relevant]!;
  let rank = 0;
  for (let i = 0; i < scores.length; i += 1) if (i !== relevant && scores[i]! >= target) rank += 1;
  return rank;
}
