/**
 * The learned projection as the service runs it: loaded from the model layer on request, applied to every
 * embedding (whole images and regions), changing the dimension and the model version.
 */
import { mkdtempSync, copyFileSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { loadVision, type LoadedVision } from '#lib/vision/load-vision.ts';
import { DETECTOR_SPEC, EMBEDDER_SPEC } from '#lib/vision/model-specs.ts';
import { applyProjection, PROJECTION_SPEC, readProjection } from '#lib/vision/projection.ts';
import { fixture, MODEL_DIR, sharedVision } from './vision-fixture.ts';

const norm = (vector: Float32Array): number =>
  Math.sqrt(vector.reduce((sum, value) => sum + value * value, 0));

describe('learned projection at run time', () => {
  let plain: LoadedVision;
  let projected: LoadedVision;
  beforeAll(async () => {
    plain = await sharedVision(); // builds the layer if stale, which ships the projection
    projected = await loadVision(MODEL_DIR, {}, { projection: true });
  });

  it('is off unless asked for', () => {
    expect(plain.embedder.dimension).toBe(EMBEDDER_SPEC.dimension);
    expect(plain.manifests.projection).toBeUndefined();
  });

  it('sets the dimension from its manifest and gives unit vectors of that length', async () => {
    const manifest = projected.manifests.projection!;
    expect(manifest.inputDimension).toBe(EMBEDDER_SPEC.dimension);
    expect(projected.embedder.dimension).toBe(manifest.outputDimension);
    const [vector] = await projected.embedder.embed([fixture('voc-dinner.jpg')]);
    expect(vector).toHaveLength(manifest.outputDimension);
    expect(norm(vector!)).toBeCloseTo(1, 5);
  });

  it('changes the model version, so stored vectors of the other kind are re-embedded', () => {
    expect(projected.embedder.modelVersion).not.toBe(plain.embedder.modelVersion);
    expect(projected.embedder.modelVersion.startsWith(plain.embedder.modelVersion)).toBe(true);
    expect(projected.embedder.modelVersion).toContain(projected.manifests.projection!.sha256.slice(0, 8));
  });

  it('is the shipped head applied to the plain vector, for whole images and regions alike', async () => {
    const { projection } = readProjection(MODEL_DIR, {
      sha256: plain.manifests.embedder.sha256,
      dimension: EMBEDDER_SPEC.dimension,
    });
    const photo = fixture('voc-dinner.jpg');
    const [raw] = await plain.embedder.embed([photo]);
    const [whole] = await projected.embedder.embed([photo]);
    const [region] = await projected.embedder.embedRegions(photo, [[40, 30, 300, 250]]);
    const [rawRegion] = await plain.embedder.embedRegions(photo, [[40, 30, 300, 250]]);
    const expected = applyProjection(projection, raw!);
    for (let i = 0; i < expected.length; i += 1) expect(whole![i]).toBeCloseTo(expected[i]!, 5);
    const expectedRegion = applyProjection(projection, rawRegion!);
    for (let i = 0; i < expectedRegion.length; i += 1) expect(region![i]).toBeCloseTo(expectedRegion[i]!, 5);
  });

  it('refuses weights that do not match their manifest or were trained on another embedder', async () => {
    const directory = mkdtempSync(join(tmpdir(), 'projection-'));
    try {
      for (const spec of [EMBEDDER_SPEC, DETECTOR_SPEC]) {
        copyFileSync(join(MODEL_DIR, spec.file), join(directory, spec.file));
        copyFileSync(
          join(MODEL_DIR, `${spec.name}.manifest.json`),
          join(directory, `${spec.name}.manifest.json`),
        );
      }
      await expect(loadVision(directory, {}, { projection: true })).rejects.toThrow(/npm run build:layer/);
      const manifestName = `${PROJECTION_SPEC.name}.manifest.json`;
      const manifest = JSON.parse(readFileSync(join(MODEL_DIR, manifestName), 'utf8')) as Record<
        string,
        unknown
      >;
      copyFileSync(join(MODEL_DIR, PROJECTION_SPEC.file), join(directory, PROJECTION_SPEC.file));
      writeFileSync(
        join(directory, manifestName),
        JSON.stringify({ ...manifest, embedderSha256: '0'.repeat(64) }),
      );
      await expect(loadVision(directory, {}, { projection: true })).rejects.toThrow(/train:projection/);
      writeFileSync(join(directory, manifestName), JSON.stringify({ ...manifest, sha256: '0'.repeat(64) }));
      await expect(loadVision(directory, {}, { projection: true })).rejects.toThrow(/does not match/);
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  });
});
