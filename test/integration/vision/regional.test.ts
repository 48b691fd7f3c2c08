import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { beforeAll, describe, expect, it } from 'vitest';
import { InvalidImageError } from '#lib/domain/errors.ts';
import { OnnxRegionalEmbedder } from '#lib/adapters/onnx-regional-embedder.ts';
import { loadVision, type LoadedVision } from '#lib/vision/load-vision.ts';
import { readProjection } from '#lib/vision/projection.ts';
import { openImage, rgbSquares, writeRgbUnit } from '#lib/vision/image-input.ts';
import { EMBEDDER_SPEC, REGIONAL_SPEC } from '#lib/vision/model-specs.ts';
import { createSession, floatTensor, outputData } from '#lib/vision/onnx-session.ts';
import { ensureModels, fixture, MODEL_DIR } from './vision-fixture.ts';

const DEMO_IMAGES = join(import.meta.dirname, '../../../demo/images');

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

  it('is the embedder’s network: its 224-px map, averaged, is the embedder’s raw vector', async () => {
    // Prepare: the embedder's own preprocessing of a photo, and the raw (unprojected) embedder
    const photo = fixture('voc-dinner.jpg');
    const [rgb] = await rgbSquares(await openImage(photo), EMBEDDER_SPEC.inputSize, [undefined]);
    const input = new Float32Array(rgb!.length);
    writeRgbUnit(rgb!, input, 0);
    const session = await createSession(join(MODEL_DIR, REGIONAL_SPEC.file));
    const raw = await loadVision(MODEL_DIR);
    // Act
    const outputs = await session.run({
      [REGIONAL_SPEC.inputName]: floatTensor(input, [1, 224, 224, 3]),
      [REGIONAL_SPEC.projectionInputName]: floatTensor(new Float32Array(448 * 2), [448, 2]),
    });
    const map = outputData(outputs, REGIONAL_SPEC.outputName);
    const [expected] = await raw.embedder.embed([photo]);
    // Assess: 7×7 cells of 448 channels, whose mean points exactly where the embedder's vector does
    expect(outputs[REGIONAL_SPEC.outputName]!.dims).toEqual([1, 7, 7, 448]);
    expect(outputs[REGIONAL_SPEC.projectedOutputName]!.dims).toEqual([1, 7, 7, 2]);
    const mean = new Float32Array(448);
    for (let cell = 0; cell < 49; cell += 1)
      for (let k = 0; k < 448; k += 1) mean[k]! += map[cell * 448 + k]!;
    const norm = Math.hypot(...mean);
    expect(
      cosine(
        mean.map((v) => v / norm),
        expected!,
      ),
    ).toBeGreaterThan(0.99999);
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

  it('refuses a regional graph built from other weights than the embedder', async () => {
    // Prepare: the layer as built, but the regional manifest records another source file
    const directory = mkdtempSync(join(tmpdir(), 'regional-'));
    try {
      for (const name of readdirSync(MODEL_DIR)) symlinkSync(join(MODEL_DIR, name), join(directory, name));
      const manifestFile = `${REGIONAL_SPEC.name}.manifest.json`;
      const manifest = JSON.parse(readFileSync(join(MODEL_DIR, manifestFile), 'utf8'));
      manifest.source.files[0].sha256 = '0'.repeat(64);
      rmSync(join(directory, manifestFile));
      writeFileSync(join(directory, manifestFile), JSON.stringify(manifest));
      // Act + Assess
      await expect(loadVision(directory, {}, { projection: true, regional: true })).rejects.toThrow(
        /not built from the embedder/,
      );
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });
});
