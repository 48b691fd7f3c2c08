/**
 * NanoDet through the full path (decode, letterbox, ONNX, GFL decode, NMS, mapping back) on a real VOC
 * photo with ground-truth boxes.
 */
import sharp from 'sharp';
import { beforeAll, describe, expect, it } from 'vitest';
import { InvalidImageError } from '#lib/domain/errors.ts';
import type { DetectedObject } from '#lib/ports.ts';
import type { LoadedVision } from '#lib/vision/load-vision.ts';
import { intersectionOverUnion } from '#lib/vision/nanodet-decode.ts';
import { fixture, sharedVision, vocDinnerTruth, type GroundTruthObject } from './vision-fixture.ts';

const IMAGE_WIDTH = 500;
const IMAGE_HEIGHT = 375;

/** Ground-truth objects covering at least 10 % of the photo, plus the clearly visible bottle. */
function mainObjects(): GroundTruthObject[] {
  return vocDinnerTruth().filter(
    ({ label, box }) =>
      label === 'bottle' || (box[2] - box[0]) * (box[3] - box[1]) >= 0.1 * IMAGE_WIDTH * IMAGE_HEIGHT,
  );
}

function bestOverlap(detections: DetectedObject[], truth: GroundTruthObject): number {
  return Math.max(
    0,
    ...detections
      .filter(({ label }) => label === truth.label)
      .map(({ box }) => intersectionOverUnion(box, truth.box)),
  );
}

describe('OnnxDetector on a real photo', () => {
  let vision: LoadedVision;
  beforeAll(async () => {
    vision = await sharedVision();
  });

  it('finds every main object with the right COCO label at IoU ≥ 0.5', async () => {
    // Prepare
    const truth = mainObjects();
    expect(truth.map(({ label }) => label).sort()).toEqual([
      'bottle',
      'dining table',
      'person',
      'person',
      'person',
    ]);

    // Act
    const detections = await vision.detector.detect(fixture('voc-dinner.jpg'));

    // Assess
    for (const object of truth)
      expect(
        bestOverlap(detections, object),
        `${object.label} ${object.box.join(',')}`,
      ).toBeGreaterThanOrEqual(0.5);
  });

  it('returns boxes inside the image, scores in [0, 1] by descending score, and COCO labels', async () => {
    const detections = await vision.detector.detect(fixture('voc-dinner.jpg'));
    expect(detections.length).toBeGreaterThan(5);
    for (const { box, score, label } of detections) {
      expect(box[0]).toBeGreaterThanOrEqual(0);
      expect(box[1]).toBeGreaterThanOrEqual(0);
      expect(box[2]).toBeLessThanOrEqual(IMAGE_WIDTH);
      expect(box[3]).toBeLessThanOrEqual(IMAGE_HEIGHT);
      expect(box[2]).toBeGreaterThan(box[0]);
      expect(box[3]).toBeGreaterThan(box[1]);
      expect(score).toBeGreaterThanOrEqual(0.35);
      expect(score).toBeLessThanOrEqual(1);
      expect(vision.manifests.detector.labels).toContain(label);
    }
    const scores = detections.map(({ score }) => score);
    expect(scores).toEqual([...scores].sort((a, b) => b - a));
  });

  it('reports weaker boxes too when a call lowers the score threshold', async () => {
    const image = fixture('voc-dinner.jpg');
    const usual = await vision.detector.detect(image);
    const more = await vision.detector.detect(image, { scoreThreshold: 0.05 });
    expect(more.length).toBeGreaterThan(usual.length);
    expect(more.slice(0, usual.length)).toEqual(usual);
    expect(more.every(({ score }) => score >= 0.05)).toBe(true);
    expect(more.some(({ score }) => score < 0.35)).toBe(true);
  });

  it('applies EXIF orientation before detecting and measures boxes in the oriented frame', async () => {
    // Prepare: pixels stored turned 90° anticlockwise with orientation 6 ("rotate 90° clockwise to show"):
    // a viewer shows the original upright 500 × 375 photo, so the ground truth is unchanged.
    const stored = await sharp(fixture('voc-dinner.jpg'))
      .rotate(-90)
      .jpeg({ quality: 95 })
      .withMetadata({ orientation: 6 })
      .toBuffer();
    expect((await sharp(stored).metadata()).width).toBe(IMAGE_HEIGHT);

    // Act
    const detections = await vision.detector.detect(stored);

    // Assess
    for (const object of mainObjects())
      expect(
        bestOverlap(detections, object),
        `${object.label} ${object.box.join(',')}`,
      ).toBeGreaterThanOrEqual(0.5);
  });

  it('maps boxes back to the submitted size when the photo is upscaled', async () => {
    const larger = await sharp(fixture('voc-dinner.jpg')).resize(1000, 750).jpeg().toBuffer();
    const detections = await vision.detector.detect(larger);
    const table = mainObjects().find(({ label }) => label === 'dining table')!;
    const scaled = {
      label: table.label,
      box: table.box.map((value) => value * 2) as GroundTruthObject['box'],
    };
    expect(bestOverlap(detections, scaled)).toBeGreaterThanOrEqual(0.5);
  });

  it('rejects undecodable bytes with InvalidImageError', async () => {
    await expect(vision.detector.detect(Buffer.from('GIF89a but not really'))).rejects.toThrow(
      InvalidImageError,
    );
  });
});
