/**
 * Activation statistics for the 8-bit regional graph (layers/models.ts REGIONAL_RECIPE): the float graph
 * is converted with every activation that quantisation will touch exposed as an output, run over a fixed
 * set of training images at the regional pass's own raster, and the min/max of each activation is kept
 * (its uint8 range) with the mean of each of its channels (the bias correction of the convolutions that
 * read it, layers/convert/tf-to-onnx.ts `correctedBias`).
 *
 * `npm run calibrate:layer` writes layers/calibration/regional-ranges.json (committed; the layer build
 * reads it, and its hash is part of the build fingerprint). `--check` writes nothing and exits 1 when the
 * result differs from the committed ranges. The images are the learned projection's training sources
 * (pinned Debian packages, disjoint from every evaluation set; layers/projection/data.ts): wallpapers and
 * photos of places as scenes, and full-frame photos of one subject as products.
 *
 * Why min/max: percentile-like ranges (the mean of each image's extremes, or their 10th/90th percentiles)
 * left the windows no closer to the float graph's (mean cosine 0.985–0.986 on 20 scene queries, 8-bit
 * weights), and the full pipeline keeps its recall within a few queries (docs/quality.md).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import ort from 'onnxruntime-node';
import sharp from 'sharp';
import { openImage, rgbFilled, writeRgbUnit } from '#lib/vision/image-input.ts';
import { REGIONAL_SPEC } from '#lib/vision/model-specs.ts';
import { regionalRasterSize } from '#lib/vision/regional.ts';
import { convertTfjsGraph } from '../convert/tf-to-onnx.ts';
import { readTfjsGraph } from '../convert/tfjs-graph.ts';
import { REGIONAL_RECIPE } from '../models.ts';
import { loadTrainingSources, TRAIN_PACKAGES, type SourceImage } from '../projection/data.ts';
import { sha256 } from '../sources.ts';

const root = join(import.meta.dirname, '../..');
export const CALIBRATION_FILE = join(root, REGIONAL_RECIPE.calibration!);

/** How many images of each kind calibrate: evenly spread over the sorted sources. */
const SCENES = 32;
const SUBJECTS = 32;
/** Ranges are stored to this many significant digits: float noise between CPUs stays below it. */
const DIGITS = 5;

export interface Calibration {
  /** What was measured, for the reader of the JSON. */
  method: string;
  dataSources: typeof TRAIN_PACKAGES;
  /**
   * The decoder that rasterised them (sharp and its libvips): an upgrade may move the extremes a little,
   * which the reproducibility test would report; this says which versions the committed ranges saw.
   */
  decoder: { sharp: string; vips: string };
  /** The calibration images, by their stable source name, with their content hash. */
  images: { name: string; sha256: string }[];
  /** TF tensor reference → [min, max] over every image. */
  ranges: Record<string, [number, number]>;
  /** TF tensor reference → the mean of each channel over every position of every image. */
  means: Record<string, number[]>;
}

function evenly<T>(items: readonly T[], count: number): T[] {
  if (items.length <= count) return [...items];
  return Array.from({ length: count }, (_, i) => items[Math.floor((i * items.length) / count)]!);
}

function rounded(value: number): number {
  return Number(value.toPrecision(DIGITS));
}

/** The calibration images: scenes (wallpapers, places) and single-subject photos of the training set. */
export function calibrationImages(): SourceImage[] {
  const sources = loadTrainingSources();
  return [...evenly(sources.backgrounds, SCENES), ...evenly(sources.photos, SUBJECTS)];
}

/** Runs the float regional graph over `images` and returns each quantised activation's range. */
export async function calibrate(images: readonly SourceImage[]): Promise<Calibration> {
  const source = REGIONAL_RECIPE.load(root);
  const graph = readTfjsGraph(source.model, source.weightBytes);
  // The recipe's conversion is the float graph; the build adds the quantisation from these ranges.
  const bytes = convertTfjsGraph(graph, {
    ...REGIONAL_RECIPE.conversion,
    exposeActivations: true,
    producer: 'layers/calibration/calibrate.ts',
    metadata: {},
  });
  // One thread: the same sums in the same order on every run.
  const session = await ort.InferenceSession.create(Buffer.from(bytes), {
    executionProviders: ['cpu'],
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
  });
  const activationNames = session.outputNames.filter(
    (name) => name !== REGIONAL_SPEC.outputName && name !== REGIONAL_SPEC.projectedOutputName,
  );
  const low = new Map<string, number>();
  const high = new Map<string, number>();
  const sums = new Map<string, Float64Array>();
  const counts = new Map<string, number>();
  const projection = new ort.Tensor('float32', new Float32Array(REGIONAL_SPEC.channels), [
    REGIONAL_SPEC.channels,
    1,
  ]);
  for (const image of images) {
    const oriented = await openImage(image.bytes);
    const size = regionalRasterSize(oriented.width, oriented.height);
    const rgb = await rgbFilled(oriented.pipeline.clone(), size.width, size.height);
    const input = new Float32Array(size.width * size.height * 3);
    writeRgbUnit(rgb, input, 0);
    const outputs = await session.run({
      [REGIONAL_SPEC.inputName]: new ort.Tensor('float32', input, [1, size.height, size.width, 3]),
      [REGIONAL_SPEC.projectionInputName]: projection,
    });
    for (const name of activationNames) {
      let min = low.get(name) ?? Number.POSITIVE_INFINITY;
      let max = high.get(name) ?? Number.NEGATIVE_INFINITY;
      // NHWC: the channel is the last axis.
      const output = outputs[name]!;
      const channels = output.dims[output.dims.length - 1]!;
      const data = output.data as Float32Array;
      let sum = sums.get(name);
      if (!sum) sums.set(name, (sum = new Float64Array(channels)));
      for (let i = 0; i < data.length; i += 1) {
        const value = data[i]!;
        if (value < min) min = value;
        if (value > max) max = value;
        sum[i % channels]! += value;
      }
      low.set(name, min);
      high.set(name, max);
      counts.set(name, (counts.get(name) ?? 0) + data.length / channels);
    }
  }
  return {
    method: `min/max of each activation entering a Conv or an Add, and the mean of each of its channels; float graph, one intra-op thread, each image at the regional raster (${REGIONAL_SPEC.preprocessing})`,
    dataSources: TRAIN_PACKAGES,
    decoder: { sharp: sharp.versions.sharp ?? 'unknown', vips: sharp.versions.vips },
    images: images.map(({ name, bytes: content }) => ({ name, sha256: sha256(content) })),
    ranges: Object.fromEntries(
      activationNames.sort().map((name) => [name, [rounded(low.get(name)!), rounded(high.get(name)!)]]),
    ),
    means: Object.fromEntries(
      activationNames.map((name) => [
        name,
        Array.from(sums.get(name)!, (sum) => rounded(sum / counts.get(name)!)),
      ]),
    ),
  };
}

export function committedCalibration(): Calibration {
  return JSON.parse(readFileSync(CALIBRATION_FILE, 'utf8')) as Calibration;
}

/**
 * Largest difference between two calibrations, relative to each activation's range width: of the range
 * ends, and of the channel means. Infinite when they do not cover the same activations and channels.
 */
export function calibrationDrift(a: Calibration, b: Calibration): number {
  const names = new Set([...Object.keys(a.ranges), ...Object.keys(b.ranges)]);
  let drift = 0;
  for (const name of names) {
    const [x, y] = [a.ranges[name], b.ranges[name]];
    const [meansA, meansB] = [a.means?.[name], b.means?.[name]];
    if (!x || !y || !meansA || !meansB || meansA.length !== meansB.length) return Number.POSITIVE_INFINITY;
    const width = Math.max(x[1] - x[0], 1e-6);
    drift = Math.max(drift, Math.abs(x[0] - y[0]) / width, Math.abs(x[1] - y[1]) / width);
    meansA.forEach((mean, c) => {
      drift = Math.max(drift, Math.abs(mean - meansB[c]!) / width);
    });
  }
  return drift;
}

/** Indented JSON with every list of numbers on one line (a range, or one activation's channel means). */
export function formatted(calibration: Calibration): string {
  return `${JSON.stringify(calibration, null, 2).replace(/\[\s+(-?[\d.e+-]+(?:,\s+-?[\d.e+-]+)*)\s+\]/g, (_, numbers: string) => `[${numbers.split(/,\s+/).join(', ')}]`)}\n`;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const { values } = parseArgs({ options: { check: { type: 'boolean', default: false } } });
  const started = performance.now();
  const result = await calibrate(calibrationImages());
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  if (values.check) {
    const drift = calibrationDrift(result, committedCalibration());
    console.error(`calibrate:layer: ${seconds} s, largest drift from the committed calibration ${drift}`);
    process.exit(drift <= 1e-3 ? 0 : 1);
  }
  writeFileSync(CALIBRATION_FILE, formatted(result));
  console.error(
    `calibrate:layer: ${Object.keys(result.ranges).length} activations over ${result.images.length} images, ${seconds} s`,
  );
}
