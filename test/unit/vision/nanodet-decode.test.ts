import { describe, expect, it } from 'vitest';
import {
  decodeLevels,
  expectedBin,
  intersectionOverUnion,
  perClassNms,
  type Candidate,
} from '#lib/vision/nanodet-decode.ts';

const BINS = 11;

/** Logits that put (almost) all probability on one bin. */
function peakedSide(bin: number): number[] {
  return Array.from({ length: BINS }, (_, k) => (k === bin ? 30 : 0));
}

describe('expectedBin', () => {
  it('returns the bin holding all the probability mass', () => {
    expect(expectedBin(Float32Array.from(peakedSide(4)), 0, BINS)).toBeCloseTo(4, 6);
  });

  it('returns the mean bin of a uniform distribution', () => {
    expect(expectedBin(new Float32Array(BINS), 0, BINS)).toBeCloseTo(5, 6);
  });

  it('interpolates between two equally likely bins', () => {
    const logits = Float32Array.from({ length: BINS }, (_, k) => (k === 2 || k === 3 ? 20 : 0));
    expect(expectedBin(logits, 0, BINS)).toBeCloseTo(2.5, 5);
  });
});

describe('decodeLevels', () => {
  it('measures box sides from the cell centre in units of the stride', () => {
    // Prepare: a 32-px input, stride 8 → 4×4 grid; cell (row 1, col 2) scores class 1.
    const classCount = 2;
    const cells = 16;
    const classScores = new Float32Array(cells * classCount);
    const cell = 1 * 4 + 2;
    classScores[cell * classCount + 1] = 0.9;
    const boxLogits = new Float32Array(cells * 4 * BINS);
    boxLogits.set([...peakedSide(1), ...peakedSide(2), ...peakedSide(3), ...peakedSide(0)], cell * 4 * BINS);

    // Act
    const candidates = decodeLevels([{ stride: 8, classScores, boxLogits }], {
      inputSize: 32,
      classCount,
      bins: BINS,
      scoreThreshold: 0.5,
    });

    // Assess: centre (2.5·8, 1.5·8) = (20, 12); left 8, top 16, right 24, bottom 0.
    expect(candidates).toHaveLength(1);
    expect(candidates[0]!.classIndex).toBe(1);
    expect(candidates[0]!.score).toBeCloseTo(0.9, 6);
    candidates[0]!.box.forEach((value, i) => expect(value).toBeCloseTo([12, -4, 44, 12][i]!, 4));
  });

  it('drops scores under the threshold', () => {
    const classScores = Float32Array.from({ length: 16 * 3 }, () => 0.2);
    const boxLogits = new Float32Array(16 * 4 * BINS);
    expect(
      decodeLevels([{ stride: 8, classScores, boxLogits }], {
        inputSize: 32,
        classCount: 3,
        bins: BINS,
        scoreThreshold: 0.3,
      }),
    ).toEqual([]);
  });
});

describe('intersectionOverUnion', () => {
  it('is 1 for identical boxes, 0 for disjoint ones and 1/3 for half-overlapping squares', () => {
    expect(intersectionOverUnion([0, 0, 10, 10], [0, 0, 10, 10])).toBe(1);
    expect(intersectionOverUnion([0, 0, 10, 10], [20, 20, 30, 30])).toBe(0);
    expect(intersectionOverUnion([0, 0, 10, 10], [5, 0, 15, 10])).toBeCloseTo(1 / 3, 10);
  });
});

describe('perClassNms', () => {
  const candidate = (box: Candidate['box'], classIndex: number, score: number): Candidate => ({
    box,
    classIndex,
    score,
  });

  it('keeps the best of overlapping boxes of one class', () => {
    const kept = perClassNms([candidate([0, 0, 10, 10], 0, 0.6), candidate([1, 0, 11, 10], 0, 0.9)], 0.5, 10);
    expect(kept).toEqual([candidate([1, 0, 11, 10], 0, 0.9)]);
  });

  it('keeps overlapping boxes of different classes', () => {
    const kept = perClassNms([candidate([0, 0, 10, 10], 0, 0.6), candidate([0, 0, 10, 10], 1, 0.9)], 0.5, 10);
    expect(kept.map(({ classIndex }) => classIndex)).toEqual([1, 0]);
  });

  it('keeps boxes of one class that overlap less than the threshold', () => {
    const kept = perClassNms([candidate([0, 0, 10, 10], 0, 0.6), candidate([5, 0, 15, 10], 0, 0.9)], 0.5, 10);
    expect(kept).toHaveLength(2);
  });

  it('stops at the limit, best first', () => {
    const many = Array.from({ length: 5 }, (_, i) => candidate([i * 20, 0, i * 20 + 10, 10], 0, i / 10));
    expect(perClassNms(many, 0.5, 2).map(({ score }) => score)).toEqual([0.4, 0.3]);
  });
});
