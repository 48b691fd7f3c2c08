/**
 * What the run time must know about each converted model: file name, tensor names and shapes,
 * preprocessing. layers/build.ts writes these facts into each model's manifest, and load-vision checks
 * the manifest against them, so the build and the serving code cannot drift apart silently.
 */
import { COCO_LABELS } from './coco-labels.ts';

/**
 * Embedding: MobileNetV2-1.4 (nsfwjs "mobilenet_v2_mid"), global average of the block-16 projection.
 * Chosen over the pooled 1792-d vector on measurements in /work/shared/MODELS.md: equal retrieval on the
 * scene benchmark (R@1 0.20–0.22 vs 0.21), better self-retrieval (96 % vs 91 %), and 4× smaller vectors
 * (index memory and k-NN time scale with the dimension). The graph is cut there, which also skips the
 * 448→1792 head convolution.
 */
export const EMBEDDER_SPEC = {
  name: 'mobilenet-v2-mid-block16',
  file: 'mobilenet-v2-mid-block16.onnx',
  inputName: 'images',
  outputName: 'features',
  /** NHWC, RGB scaled to [0, 1]; the graph itself maps to [-1, 1]. */
  inputSize: 224,
  dimension: 448,
  preprocessing: 'EXIF-rotate, flatten alpha on white, resize to 224×224 (fill), RGB/255, NHWC',
} as const;

/** Detection: NanoDet-m 416, COCO-80, GFL head (class sigmoid maps + 4×11-bin side distributions). */
export const DETECTOR_SPEC = {
  name: 'nanodet-m-416',
  file: 'nanodet-m-416.onnx',
  inputName: 'image',
  inputSize: 416,
  /** BGR order, (v − mean) / std, NCHW. */
  meanBgr: [103.53, 116.28, 123.675],
  stdBgr: [57.375, 57.12, 58.395],
  strides: [8, 16, 32],
  binsPerSide: 11,
  classOutputs: ['cls_8', 'cls_16', 'cls_32'],
  boxOutputs: ['box_8', 'box_16', 'box_32'],
  labels: COCO_LABELS,
  preprocessing:
    'EXIF-rotate, flatten alpha on white, letterbox (scale longest side to 416, pad right/bottom with the mean colour), BGR, (v-mean)/std, NCHW',
} as const;

/** The manifest written next to each .onnx file by layers/build.ts. */
export interface ModelManifest {
  name: string;
  file: string;
  sha256: string;
  bytes: number;
  source: {
    package: string;
    version: string;
    /** npm integrity of the tarball, when the files came from `npm pack`. */
    integrity?: string;
    files: { path: string; sha256: string }[];
    licence: string;
  };
  /** Hash of the converter sources and recipe; a change triggers a rebuild. */
  buildFingerprint: string;
  opset: number;
  input: { name: string; shape: (number | string)[] };
  outputs: { name: string; shape: (number | string)[] }[];
  preprocessing: string;
  embeddingDimension?: number;
  labels?: readonly string[];
}
