import { join } from 'node:path';
import sharp from 'sharp';
import { beforeAll, describe, expect, it } from 'vitest';
import { OnnxEmbedder } from '#lib/adapters/onnx-embedder.ts';
import { InvalidImageError } from '#lib/domain/errors.ts';
import type { Box } from '#lib/vision/image-input.ts';
import type { LoadedVision } from '#lib/vision/load-vision.ts';
import { EMBEDDER_SPEC } from '#lib/vision/model-specs.ts';
import { createSession } from '#lib/vision/onnx-session.ts';
import { fixture, MODEL_DIR, sharedVision, vocDinnerTruth } from './vision-fixture.ts';

function cosine(a: Float32Array, b: Float32Array): number {
  let dot = 0;
  for (let i = 0; i < a.length; i += 1) dot += a[i]! * b[i]!;
  return dot;
}

function norm(vector: Float32Array): number {
  return Math.sqrt(cosine(vector, vector));
}

describe('OnnxEmbedder', () => {
  let vision: LoadedVision;
  beforeAll(async () => {
    vision = await sharedVision();
  });

  it('returns one L2-normalised vector of the manifest dimension per image', async () => {
    const [vector] = await vision.embedder.embed([fixture('voc-dinner.jpg')]);
    expect(vision.embedder.dimension).toBe(EMBEDDER_SPEC.dimension);
    expect(vision.manifests.embedder.embeddingDimension).toBe(vision.embedder.dimension);
    expect(vector).toHaveLength(vision.embedder.dimension);
    expect(norm(vector!)).toBeCloseTo(1, 5);
    expect(vision.embedder.modelVersion).toMatch(/^mobilenet-v2-mid-block16-[0-9a-f]{8}-p\d+$/);
    expect(vision.embedder.modelVersion).toContain(vision.manifests.embedder.sha256.slice(0, 8));
  });

  it('gives the same vectors in batches as one by one', async () => {
    // The service runs one image per model call; a batch size is still accepted (two here: 2 + 1 images).
    const batched = new OnnxEmbedder(
      await createSession(join(MODEL_DIR, EMBEDDER_SPEC.file)),
      vision.manifests.embedder.sha256,
      2,
    );
    const photo = fixture('voc-dinner.jpg');
    const flipped = await sharp(photo).flop().png().toBuffer();
    const small = await sharp(photo).resize(300).jpeg({ quality: 70 }).toBuffer();
    const inBatches = await batched.embed([photo, flipped, small]);
    const single = await Promise.all(
      [photo, flipped, small].map(async (image) => (await vision.embedder.embed([image]))[0]!),
    );
    expect(inBatches).toHaveLength(3);
    inBatches.forEach((vector, i) => expect(cosine(vector, single[i]!)).toBeGreaterThan(0.99999));
    expect(batched.modelVersion).toBe(vision.embedder.modelVersion);
  });

  it('is stable under re-encoding and rescaling of the same photo', async () => {
    const photo = fixture('voc-dinner.jpg');
    const variants = await Promise.all([
      sharp(photo).webp({ quality: 60 }).toBuffer(),
      sharp(photo).resize(250).png().toBuffer(),
      sharp(photo).jpeg({ quality: 30 }).toBuffer(),
    ]);
    const [original, ...others] = await vision.embedder.embed([photo, ...variants]);
    for (const other of others) expect(cosine(original!, other)).toBeGreaterThan(0.95);
  });

  it('retrieves each object of the photo from a degraded copy of its crop', async () => {
    // Prepare: gallery = crops of the five largest ground-truth objects; queries = the same crops taken
    // from a 3/4-size, compressed copy (boxes scaled accordingly).
    const photo = fixture('voc-dinner.jpg');
    const objects = vocDinnerTruth()
      .map(({ box }) => box)
      .sort((a, b) => (b[2] - b[0]) * (b[3] - b[1]) - (a[2] - a[0]) * (a[3] - a[1]))
      .slice(0, 5);
    const degraded = await sharp(photo).resize(375).jpeg({ quality: 50 }).toBuffer();

    // Act
    const gallery = await vision.embedder.embedRegions(photo, objects);
    const queries = await vision.embedder.embedRegions(
      degraded,
      objects.map((box) => box.map((value) => value * 0.75) as Box),
    );

    // Assess
    for (const [i, query] of queries.entries()) {
      const scores = gallery.map((item) => cosine(query, item));
      expect(scores.indexOf(Math.max(...scores)), `object ${i}`).toBe(i);
    }
  });

  it('embeds the whole image as a region exactly like embed()', async () => {
    const photo = fixture('voc-dinner.jpg');
    const [whole] = await vision.embedder.embed([photo]);
    const [region, fullBox] = await vision.embedder.embedRegions(photo, [undefined, [0, 0, 500, 375]]);
    expect(cosine(whole!, region!)).toBeGreaterThan(0.99999);
    expect(cosine(whole!, fullBox!)).toBeGreaterThan(0.999);
  });

  it('rejects an undecodable image in a batch with InvalidImageError', async () => {
    await expect(vision.embedder.embed([fixture('voc-dinner.jpg'), Buffer.from('nope')])).rejects.toThrow(
      InvalidImageError,
    );
  });
});
