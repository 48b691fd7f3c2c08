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

/**
 * Regional matching: the same MobileNetV2-mid graph cut at the same block-16 projection, but with a free
 * input size and the spatial feature map as output (no pooling), so one pass over a larger raster gives
 * the features of every region of the query (lib/vision/regional.ts). A separate file because the
 * embedder's bytes (its sha256) version every stored vector and the learned projection.
 */
export const REGIONAL_SPEC = {
  name: 'mobilenet-v2-mid-block16-map',
  file: 'mobilenet-v2-mid-block16-map.onnx',
  inputName: 'images',
  outputName: 'feature_map',
  /**
   * The map times the window projection's matrix (transposed, channels × out), which the run time feeds
   * through `projectionInputName`: 150 cells × 448 × 256 multiply-adds cost ~16 ms in JS, ~2 in the graph.
   */
  projectedOutputName: 'projected_map',
  projectionInputName: 'projection',
  /** Cells of the map per input pixel: the block-16 output has stride 32. */
  stride: 32,
  channels: EMBEDDER_SPEC.dimension,
  preprocessing:
    'EXIF-rotate, flatten alpha on white, resize (fill) to a multiple of 32 per side, RGB/255, NHWC',
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
  /** Present when the graph was quantised to 8 bits (layers/calibration/). */
  quantization?: { scheme: string; calibration: string; calibrationSha256: string };
}
