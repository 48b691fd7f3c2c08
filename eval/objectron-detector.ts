/**
 * MediaPipe Objectron's 2D detector (SSD MobileNetV2 on Open Images V4, 23 product-relevant classes),
 * converted from its TFLite file (layers/convert/tflite-to-onnx.ts) and run as the project's Detector port,
 * for comparison with NanoDet (eval/objectron.ts). Pre- and post-processing follow MediaPipe's
 * object_detection_oid_v4 subgraph: the photo stretched to 300×300, RGB scaled to [-1, 1]; SSD anchors
 * (SsdAnchorsCalculator, 6 layers); box offsets decoded as (y, x, h, w) with scales 10/10/5/5 and
 * exponential sizes; per-class sigmoid scores; non-maximum suppression per class.
 */
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { readTfliteModel } from '#layers/convert/tflite-model.ts';
import { convertTfliteModel } from '#layers/convert/tflite-to-onnx.ts';
import { loadObjectronSsd, OBJECTRON_SOURCE } from '#layers/sources.ts';
import type { DetectedObject, Detector, PixelBox } from '#lib/ports.ts';
import { openImage, rgbFilled } from '#lib/vision/image-input.ts';
import { type Candidate, perClassNms } from '#lib/vision/nanodet-decode.ts';
import { createSession, floatTensor, outputData } from '#lib/vision/onnx-session.ts';

const INPUT_SIZE = 300;
const INPUT_NAME = 'image';
const BOXES = 'box_encodings';
const SCORES = 'class_predictions';
const NMS_IOU = 0.5;
const MAX_DETECTIONS = 20;

export interface Anchor {
  xCenter: number;
  yCenter: number;
  width: number;
  height: number;
}

/** MediaPipe's SsdAnchorsCalculator with the options of object_detection_oid_v4_cpu.pbtxt. */
export function ssdAnchors(): Anchor[] {
  const strides = [16, 32, 64, 128, 256, 512];
  const aspectRatios = [1, 2, 0.5, 3, 0.3333];
  const [minScale, maxScale] = [0.2, 0.95];
  const scaleOf = (layer: number) => minScale + ((maxScale - minScale) * layer) / (strides.length - 1);
  const anchors: Anchor[] = [];
  strides.forEach((stride, layer) => {
    const shapes: { scale: number; ratio: number }[] =
      layer === 0
        ? // reduce_boxes_in_lowest_layer: three predefined anchors.
          [
            { scale: 0.1, ratio: 1 },
            { scale: scaleOf(0), ratio: 2 },
            { scale: scaleOf(0), ratio: 0.5 },
          ]
        : [
            ...aspectRatios.map((ratio) => ({ scale: scaleOf(layer), ratio })),
            // interpolated_scale_aspect_ratio (1.0 by default): between this layer's scale and the next.
            {
              scale: Math.sqrt(scaleOf(layer) * (layer === strides.length - 1 ? 1 : scaleOf(layer + 1))),
              ratio: 1,
            },
          ];
    const cells = Math.ceil(INPUT_SIZE / stride);
    for (let y = 0; y < cells; y += 1)
      for (let x = 0; x < cells; x += 1)
        for (const { scale, ratio } of shapes)
          anchors.push({
            xCenter: (x + 0.5) / cells,
            yCenter: (y + 0.5) / cells,
            width: scale * Math.sqrt(ratio),
            height: scale / Math.sqrt(ratio),
          });
  });
  return anchors;
}

/** Converts the pinned TFLite file once into `.cache/model-sources/` and returns the ONNX path and labels. */
export function objectronModel(root: string): { path: string; labels: string[] } {
  const { tflite, labels } = loadObjectronSsd(root);
  const directory = join(root, '.cache/model-sources', `objectron-${OBJECTRON_SOURCE.version}`);
  const path = join(directory, `ssd-oidv4-${OBJECTRON_SOURCE.model.sha256.slice(0, 12)}.onnx`);
  if (!existsSync(path)) {
    const onnx = convertTfliteModel(readTfliteModel(tflite), {
      producer: 'vps-objectron-ssd',
      metadata: { source: `${OBJECTRON_SOURCE.package}@${OBJECTRON_SOURCE.version}` },
      inputName: INPUT_NAME,
      outputNames: [BOXES, SCORES],
    });
    mkdirSync(directory, { recursive: true });
    writeFileSync(path, onnx);
  }
  return { path, labels };
}

/** The converted detector behind the Detector port; `modelMs` sums the model runs alone. */
export async function objectronDetector(
  root: string,
  defaultThreshold = 0.3,
): Promise<Detector & { modelMs: number; runs: number }> {
  const { path, labels } = objectronModel(root);
  const session = await createSession(path);
  const anchors = ssdAnchors();
  const classes = labels.length;
  const detector = {
    modelMs: 0,
    runs: 0,
    async detect(image: Buffer, options?: { scoreThreshold?: number }): Promise<DetectedObject[]> {
      const threshold = options?.scoreThreshold ?? defaultThreshold;
      const { width, height, pipeline } = await openImage(image);
      const rgb = await rgbFilled(pipeline.clone(), INPUT_SIZE, INPUT_SIZE);
      const pixels = INPUT_SIZE * INPUT_SIZE;
      const input = new Float32Array(3 * pixels);
      for (let i = 0; i < pixels; i += 1)
        for (let c = 0; c < 3; c += 1) input[c * pixels + i] = rgb[i * 3 + c]! / 127.5 - 1;
      const started = performance.now();
      const outputs = await session.run({ [INPUT_NAME]: floatTensor(input, [1, 3, INPUT_SIZE, INPUT_SIZE]) });
      detector.modelMs += performance.now() - started;
      detector.runs += 1;
      const boxes = outputData(outputs, BOXES);
      const scores = outputData(outputs, SCORES);
      const found: Candidate[] = [];
      anchors.forEach((anchor, i) => {
        // Class 0 is the background ("???"), ignored as MediaPipe's ignore_classes does.
        let best = 1;
        for (let c = 2; c < classes; c += 1)
          if (scores[i * classes + c]! > scores[i * classes + best]!) best = c;
        const score = 1 / (1 + Math.exp(-scores[i * classes + best]!));
        if (score < threshold) return;
        const yCenter = (boxes[i * 4]! / 10) * anchor.height + anchor.yCenter;
        const xCenter = (boxes[i * 4 + 1]! / 10) * anchor.width + anchor.xCenter;
        const boxHeight = Math.exp(boxes[i * 4 + 2]! / 5) * anchor.height;
        const boxWidth = Math.exp(boxes[i * 4 + 3]! / 5) * anchor.width;
        const box: PixelBox = [
          Math.max(0, (xCenter - boxWidth / 2) * width),
          Math.max(0, (yCenter - boxHeight / 2) * height),
          Math.min(width, (xCenter + boxWidth / 2) * width),
          Math.min(height, (yCenter + boxHeight / 2) * height),
        ];
        found.push({ box, classIndex: best, score });
      });
      return perClassNms(found, NMS_IOU, MAX_DETECTIONS).map(({ box, classIndex, score }) => ({
        box,
        label: labels[classIndex]!,
        score,
      }));
    },
  };
  return detector;
}
