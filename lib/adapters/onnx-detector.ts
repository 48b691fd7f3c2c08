/**
 * Detector on the converted NanoDet-m 416 graph (onnxruntime): COCO objects with boxes in pixels of the
 * submitted image after EXIF orientation. The image is letterboxed (aspect kept, padded right/bottom with
 * the mean colour, which normalises to zero), so model coordinates map back by a per-axis scale.
 */
import type { DetectedObject, Detector } from '#lib/ports.ts';
import { openImage, rgbLetterbox, rgbToNormalisedBgrPlanes, type Box } from '#lib/vision/image-input.ts';
import { DETECTOR_SPEC } from '#lib/vision/model-specs.ts';
import { decodeLevels, perClassNms, type HeadLevel } from '#lib/vision/nanodet-decode.ts';
import { floatTensor, outputData, type InferenceSession } from '#lib/vision/onnx-session.ts';

export interface DetectorOptions {
  /** Minimum class score reported (0.35 suits an API answer; evaluations use ~0.05 to trace the PR curve). */
  scoreThreshold: number;
  /** Boxes of the same class overlapping more than this are merged into the best one. */
  iouThreshold: number;
  maxDetections: number;
}

export const DEFAULT_DETECTOR_OPTIONS: DetectorOptions = {
  scoreThreshold: 0.35,
  iouThreshold: 0.5,
  maxDetections: 100,
};

const MEAN_RGB = {
  r: Math.round(DETECTOR_SPEC.meanBgr[2]),
  g: Math.round(DETECTOR_SPEC.meanBgr[1]),
  b: Math.round(DETECTOR_SPEC.meanBgr[0]),
};

const round2 = (value: number): number => Math.round(value * 100) / 100;

export class OnnxDetector implements Detector {
  private readonly options: DetectorOptions;

  constructor(
    private readonly session: InferenceSession,
    options: Partial<DetectorOptions> = {},
  ) {
    this.options = { ...DEFAULT_DETECTOR_OPTIONS, ...options };
  }

  /**
   * Objects by descending score (at least `options.scoreThreshold`, else the detector's own). Throws
   * InvalidImageError on undecodable / oversized / unsupported input.
   */
  async detect(image: Buffer, options: { scoreThreshold?: number } = {}): Promise<DetectedObject[]> {
    const size = DETECTOR_SPEC.inputSize;
    const oriented = await openImage(image);
    const { rgb, scaleX, scaleY } = await rgbLetterbox(oriented, size, MEAN_RGB);
    const input = rgbToNormalisedBgrPlanes(rgb, DETECTOR_SPEC.meanBgr, DETECTOR_SPEC.stdBgr);
    const outputs = await this.session.run({
      [DETECTOR_SPEC.inputName]: floatTensor(input, [1, 3, size, size]),
    });
    const levels: HeadLevel[] = DETECTOR_SPEC.strides.map((stride, i) => ({
      stride,
      classScores: outputData(outputs, DETECTOR_SPEC.classOutputs[i]!),
      boxLogits: outputData(outputs, DETECTOR_SPEC.boxOutputs[i]!),
    }));
    const candidates = decodeLevels(levels, {
      inputSize: size,
      classCount: DETECTOR_SPEC.labels.length,
      bins: DETECTOR_SPEC.binsPerSide,
      scoreThreshold: options.scoreThreshold ?? this.options.scoreThreshold,
    });
    const kept = perClassNms(candidates, this.options.iouThreshold, this.options.maxDetections);
    return kept.map(({ box, classIndex, score }) => ({
      box: toImagePixels(box, scaleX, scaleY, oriented.width, oriented.height),
      label: DETECTOR_SPEC.labels[classIndex]!,
      score: Math.round(score * 1e4) / 1e4,
    }));
  }
}

function toImagePixels(box: Box, scaleX: number, scaleY: number, width: number, height: number): Box {
  const clamp = (value: number, max: number): number => round2(Math.min(max, Math.max(0, value)));
  return [
    clamp(box[0] * scaleX, width),
    clamp(box[1] * scaleY, height),
    clamp(box[2] * scaleX, width),
    clamp(box[3] * scaleY, height),
  ];
}
