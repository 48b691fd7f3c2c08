import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { beforeAll, describe, expect, it } from 'vitest';
import { InvalidImageError } from '#lib/domain/errors.ts';
import { OnnxRegionalEmbedder } from '#lib/adapters/onnx-regional-embedder.ts';
import { loadVision, type LoadedVision } from '#lib/vision/load-vision.ts';
import {
  readProjection,
  readWindowProjection,
  WINDOW_PROJECTION_SPEC,
  type Projection,
} from '#lib/vision/projection.ts';
import ort from 'onnxruntime-node';
import onnxProto from 'onnx-proto';
import { convertTfjsGraph } from '#layers/convert/tf-to-onnx.ts';
import { readTfjsGraph } from '#layers/convert/tfjs-graph.ts';
import { REGIONAL_RECIPE } from '#layers/models.ts';
import { openImage, rgbFilled, writeRgbUnit } from '#lib/vision/image-input.ts';
import { EMBEDDER_SPEC, REGIONAL_SPEC } from '#lib/vision/model-specs.ts';
import { createSession, floatTensor, outputData } from '#lib/vision/onnx-session.ts';
import { projectionInput, regionalVectors } from '#lib/vision/regional.ts';
import { ensureModels, fixture, MODEL_DIR } from './vision-fixture.ts';

const ROOT = join(import.meta.dirname, '../../..');
const DEMO_IMAGES = join(ROOT, 'demo/images');

/** The regional recipe converted as it is, without the build's 8-bit quantisation. */
function floatRegionalGraph(): Uint8Array {
  const source = REGIONAL_RECIPE.load(ROOT);
  return convertTfjsGraph(readTfjsGraph(source.model, source.weightBytes), {
    ...REGIONAL_RECIPE.conversion,
    producer: 'test',
    metadata: {},
  });
}

/**
 * The map graph's inputs for a photo filled into width×height, with the projection (or a zero matrix of
 * that many columns).
 */
async function mapInputs(photo: Buffer, width: number, height: number, projection: Projection | number) {
  const rgb = await rgbFilled((await openImage(photo)).pipeline, width, height);
  const input = new Float32Array(width * height * 3);
  writeRgbUnit(rgb, input, 0);
  const matrix =
    typeof projection === 'number'
      ? floatTensor(new Float32Array(448 * projection), [448, projection])
      : floatTensor(projectionInput(projection), [projection.inDim, projection.outDim]);
  return {
    [REGIONAL_SPEC.inputName]: floatTensor(input, [1, height, width, 3]),
    [REGIONAL_SPEC.projectionInputName]: matrix,
  };
}

function cellMean(map: Float32Array, channels: number): Float32Array {
  const mean = new Float32Array(channels);
  for (let cell = 0; cell < map.length / channels; cell += 1)
    for (let k = 0; k < channels; k += 1) mean[k]! += map[cell * channels + k]!;
  return mean;
}

function normalised(vector: Float32Array): Float32Array {
  const norm = Math.hypot(...vector);
  return vector.map((value) => value / norm);
}

/** The shipped projection, as loadVision reads it. */
function projectedWeights() {
  const embedder = JSON.parse(readFileSync(join(MODEL_DIR, `${EMBEDDER_SPEC.name}.manifest.json`), 'utf8'));
  return readProjection(MODEL_DIR, { sha256: embedder.sha256, dimension: EMBEDDER_SPEC.dimension })
    .projection;
}

function cosine(a: Float32Array, b: Float32Array): number {
  let dot = 0;
  for (let i = 0; i < a.length; i += 1) dot += a[i]! * b[i]!;
  return dot;
}

/** A demo product pasted at `fraction` of the width of the dinner photo, at (x, y). */
async function pasted(product: string, fraction: number, x: number, y: number): Promise<Buffer> {
  const photo = fixture('voc-dinner.jpg');
  const { width = 0 } = await sharp(photo).metadata();
  const object = await sharp(join(DEMO_IMAGES, product))
    .resize(Math.round(width * fraction))
    .png()
    .toBuffer();
  return sharp(photo)
    .composite([{ input: object, left: x, top: y }])
    .jpeg({ quality: 85 })
    .toBuffer();
}

/**
 * Runs `check` on a temporary copy of the built layer (its files linked, not copied); `replace` swaps one
 * file of the copy for other bytes.
 */
async function withLayerCopy(
  check: (directory: string, replace: (name: string, bytes: string | Buffer) => void) => Promise<void>,
): Promise<void> {
  const directory = mkdtempSync(join(tmpdir(), 'regional-'));
  try {
    for (const name of readdirSync(MODEL_DIR)) symlinkSync(join(MODEL_DIR, name), join(directory, name));
    await check(directory, (name, bytes) => {
      rmSync(join(directory, name), { force: true });
      writeFileSync(join(directory, name), bytes);
    });
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
}

describe('OnnxRegionalEmbedder', () => {
  let vision: LoadedVision;
  beforeAll(async () => {
    ensureModels();
    vision = await loadVision(MODEL_DIR, {}, { projection: true, regional: true });
  });

  it('returns unit vectors in the projected space, one per window of the 448-px map', async () => {
    const regions = await vision.regional!.regions(fixture('voc-dinner.jpg'));
    // voc-dinner is 500×375 → a 448×352 raster → 11×14 cells → 35 + 24 + 15 windows and the whole map
    expect(regions).toHaveLength(75);
    for (const region of regions) {
      expect(region).toHaveLength(vision.embedder.dimension);
      expect(Math.hypot(...region)).toBeCloseTo(1, 4);
    }
    expect(vision.manifests.regional?.name).toBe(REGIONAL_SPEC.name);
  });

  it('projects the windows with the window projection trained for this projection and graph', async () => {
    // Prepare: the shipped window projection, and the map the regional pass computes for a photo
    const windows = readWindowProjection(MODEL_DIR, {
      projectionSha256: vision.manifests.projection!.sha256,
      regionalSha256: vision.manifests.regional!.sha256,
      projection: projectedWeights(),
    }).projection;
    const photo = fixture('voc-dinner.jpg');
    const { map } = await vision.regional!.featureMap(photo);
    // Act
    const regions = await vision.regional!.regions(photo);
    // Assess: the windows are the window projection's, which is not the catalogue's projection
    expect(regions).toEqual(regionalVectors(map, windows));
    expect(vision.manifests.windowProjection?.name).toBe(WINDOW_PROJECTION_SPEC.name);
    expect(windows.version).not.toBe(projectedWeights().version);
  });

  it('matches a small product in a scene by the window that holds it, far above the whole photo', async () => {
    // Prepare: the multimeter at a quarter of the photo's width, bottom right
    const [product] = await vision.embedder.embed([
      readFileSync(join(DEMO_IMAGES, 'tools-multimeter2.webp')),
    ]);
    const scene = await pasted('tools-multimeter2.webp', 0.25, 330, 200);
    // Act
    const [whole] = await vision.embedder.embed([scene]);
    const regions = await vision.regional!.regions(scene);
    // Assess
    const best = Math.max(...regions.map((region) => cosine(region, product!)));
    expect(best).toBeGreaterThan(cosine(whole!, product!) + 0.2);
  });

  it('is the embedder’s network: the float graph’s 224-px map, averaged, is the embedder’s raw vector', async () => {
    // Prepare: the embedder's own preprocessing of a photo, the raw (unprojected) embedder, and the
    // regional recipe converted without its 8-bit quantisation
    const photo = fixture('voc-dinner.jpg');
    const raw = await loadVision(MODEL_DIR);
    const session = await ort.InferenceSession.create(floatRegionalGraph());
    // Act
    const outputs = await session.run(await mapInputs(photo, 224, 224, 2));
    const map = outputData(outputs, REGIONAL_SPEC.outputName);
    const [expected] = await raw.embedder.embed([photo]);
    // Assess: 7×7 cells of 448 channels, whose mean points exactly where the embedder's vector does
    expect(outputs[REGIONAL_SPEC.outputName]!.dims).toEqual([1, 7, 7, 448]);
    expect(outputs[REGIONAL_SPEC.projectedOutputName]!.dims).toEqual([1, 7, 7, 2]);
    expect(cosine(normalised(cellMean(map, 448)), expected!)).toBeGreaterThan(0.99999);
  });

  it('ships the map graph in 8 bits, whose windows point where the float graph’s do', async () => {
    // Prepare: the shipped graph and the float conversion of the same recipe, on a 448-px photo
    const manifest = vision.manifests.regional!;
    const shipped = await createSession(join(MODEL_DIR, REGIONAL_SPEC.file));
    const float = await ort.InferenceSession.create(floatRegionalGraph());
    const projection = projectedWeights();
    const inputs = await mapInputs(fixture('voc-dinner.jpg'), 448, 352, projection);
    // Act
    const [quantised, reference] = await Promise.all(
      [shipped, float].map(async (session) => {
        const outputs = await session.run(inputs);
        const [, rows = 0, cols = 0, channels = 0] = outputs[REGIONAL_SPEC.outputName]!.dims;
        const map = {
          rows,
          cols,
          channels,
          data: outputData(outputs, REGIONAL_SPEC.outputName),
          projected: outputData(outputs, REGIONAL_SPEC.projectedOutputName),
        };
        return regionalVectors(map, projection);
      }),
    );
    // Assess: quantised as the manifest says, well under the float graph's size, and every window close
    // to its float twin in the projected space
    expect(manifest.quantization?.calibration).toBe('layers/calibration/regional-ranges.json');
    expect(manifest.bytes).toBeLessThan(vision.manifests.embedder.bytes / 3);
    expect(quantised).toHaveLength(reference!.length);
    const agreement = quantised!.map((window, i) => cosine(window, reference![i]!));
    // (measured on this photo: min 0.989, mean 0.993 with the shipped 7-bit weights and bias correction;
    // 0.940 / 0.958 without the correction, 0.973 / 0.983 with 8-bit weights and no correction; a wrong
    // scale or zero point gives ~0.5)
    expect(Math.min(...agreement)).toBeGreaterThan(0.97);
    expect(agreement.reduce((sum, value) => sum + value, 0) / agreement.length).toBeGreaterThan(0.985);
  });

  it('runs as integer convolutions: onnxruntime fuses every quantised Conv and Add', async () => {
    // Prepare: where onnxruntime writes the graph it actually runs
    const directory = mkdtempSync(join(tmpdir(), 'regional-optimised-'));
    try {
      const optimised = join(directory, 'optimised.onnx');
      // Act
      await ort.InferenceSession.create(join(MODEL_DIR, REGIONAL_SPEC.file), {
        graphOptimizationLevel: 'extended',
        optimizedModelFilePath: optimised,
      });
      // Assess: all but the last conv (whose float output is the map) run in 8 bits
      const ops = onnxProto.onnx.ModelProto.decode(readFileSync(optimised)).graph!.node!.map(
        (node) => node.opType,
      );
      const count = (op: string) => ops.filter((type) => type === op).length;
      expect(count('QLinearConv')).toBe(50);
      expect(count('QLinearAdd')).toBe(10);
      expect(count('Conv')).toBe(1);
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });

  it('rejects an undecodable image with InvalidImageError and needs the projection', async () => {
    await expect(vision.regional!.regions(Buffer.from('not an image'))).rejects.toBeInstanceOf(
      InvalidImageError,
    );
    await expect(loadVision(MODEL_DIR, {}, { regional: true })).rejects.toThrow(/projection/);
  });

  it('creates its session on the first search only, and again after a failed creation', async () => {
    // Prepare: a session factory that fails once, then opens the real graph
    let opened = 0;
    const embedder = new OnnxRegionalEmbedder(async () => {
      opened += 1;
      if (opened === 1) throw new Error('out of memory');
      return createSession(join(MODEL_DIR, REGIONAL_SPEC.file));
    }, projectedWeights());
    const photo = fixture('voc-dinner.jpg');
    // Act + Assess
    expect(opened).toBe(0);
    await expect(embedder.regions(photo)).rejects.toThrow('out of memory');
    expect(await embedder.regions(photo)).toHaveLength(75);
    expect(await embedder.regions(photo)).toHaveLength(75);
    expect(opened).toBe(2);
  });

  it('refuses a window projection trained against another projection, or missing', async () => {
    await withLayerCopy(async (directory, replace) => {
      // Prepare: the layer as built, but the window projection's manifest names another projection
      const manifestFile = `${WINDOW_PROJECTION_SPEC.name}.manifest.json`;
      const manifest = JSON.parse(readFileSync(join(MODEL_DIR, manifestFile), 'utf8'));
      manifest.projectionSha256 = '0'.repeat(64);
      replace(manifestFile, JSON.stringify(manifest));
      // Act + Assess
      await expect(loadVision(directory, {}, { projection: true, regional: true })).rejects.toThrow(
        /trained with projection 00000000.*retrain it/,
      );
      // Another regional graph than the one it was trained on
      manifest.projectionSha256 = vision.manifests.projection!.sha256;
      manifest.regionalSha256 = '1'.repeat(64);
      replace(manifestFile, JSON.stringify(manifest));
      await expect(loadVision(directory, {}, { projection: true, regional: true })).rejects.toThrow(
        /regional graph 11111111.*retrain it/,
      );
      // Weights that are not the manifest's
      manifest.regionalSha256 = vision.manifests.regional!.sha256;
      replace(manifestFile, JSON.stringify(manifest));
      const weights = readFileSync(join(MODEL_DIR, WINDOW_PROJECTION_SPEC.file));
      weights[100] = weights[100]! ^ 1;
      replace(WINDOW_PROJECTION_SPEC.file, weights);
      await expect(loadVision(directory, {}, { projection: true, regional: true })).rejects.toThrow(
        /does not match its manifest/,
      );
      // Without the regional pass it is not needed
      await expect(loadVision(directory, {}, { projection: true })).resolves.toBeDefined();
      rmSync(join(directory, WINDOW_PROJECTION_SPEC.file));
      await expect(loadVision(directory, {}, { projection: true, regional: true })).rejects.toThrow(
        /projection-window is missing.*build:layer/,
      );
    });
  });

  it('refuses a regional graph built from other weights than the embedder', async () => {
    await withLayerCopy(async (directory, replace) => {
      // Prepare: the layer as built, but the regional manifest records another source file
      const manifestFile = `${REGIONAL_SPEC.name}.manifest.json`;
      const manifest = JSON.parse(readFileSync(join(MODEL_DIR, manifestFile), 'utf8'));
      manifest.source.files[0].sha256 = '0'.repeat(64);
      replace(manifestFile, JSON.stringify(manifest));
      // Act + Assess
      await expect(loadVision(directory, {}, { projection: true, regional: true })).rejects.toThrow(
        /not built from the embedder/,
      );
    });
  });
});
