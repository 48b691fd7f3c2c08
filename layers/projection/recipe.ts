/**
 * The shipped projection's recipe (seed, views, hyper-parameters) and the pipeline that turns it into
 * weights: training data → augmented views → frozen features (cached) → PCA-whitening start → contrastive
 * refinement. `npm run train:projection` (layers/projection/cli.ts) writes the result into
 * layers/projection/weights/; test/integration/vision/projection-training.test.ts re-runs it and compares
 * bytes.
 *
 * Hyper-parameters were chosen on the tuning split (even query ids) of the project benchmark with
 * eval/projection.ts; see docs/vision.md, "Learned projection".
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import sharp from 'sharp';
import type { OnnxEmbedder } from '#lib/adapters/onnx-embedder.ts';
import { loadTrainingSources, TRAIN_DATA_DIR, TRAIN_PACKAGES } from './data.ts';
import { extractFeatures, type FeatureSet } from './features.ts';
import { trainProjection, type TrainedProjection, type TrainOptions } from './train.ts';
import type { ViewKind } from './views.ts';

const root = join(import.meta.dirname, '../..');

export const PROJECTION_RECIPE = {
  /** Seeds the views, the photo crops and the batch order. */
  seed: 7,
  /** Pasted views per object (plus its packshot and one box crop). */
  pastes: 4,
  train: {
    seed: 7,
    outDim: 256,
    temperature: 0.1,
    epochs: 10,
    batchObjects: 64,
    learningRate: 0.01,
    anchor: 1,
    whiteningEpsilon: 0.3,
  } satisfies TrainOptions,
};

export type ProjectionRecipe = typeof PROJECTION_RECIPE;

/** The sources that decide the training views and features (part of the cache key and the manifest). */
const FEATURE_SOURCES = [
  'layers/projection/data.ts',
  'layers/projection/views.ts',
  'layers/projection/features.ts',
  'demo/extract-gcompris.ts',
];
/** The sources that decide the weights given the features. */
const TRAINING_SOURCES = [
  ...FEATURE_SOURCES,
  'layers/projection/linalg.ts',
  'layers/projection/contrastive.ts',
  'layers/projection/train.ts',
  'layers/projection/recipe.ts',
];

function hashFiles(files: readonly string[]): string {
  const hash = createHash('sha256');
  for (const file of files) hash.update(file).update(readFileSync(join(root, file)));
  return hash.digest('hex');
}

/** Hash of the training code, recorded in the manifest: a change means the weights must be retrained. */
export function trainingFingerprint(): string {
  return hashFiles(TRAINING_SOURCES);
}

/** sharp and libvips versions: their resampling and JPEG codec decide the view pixels. */
function sharpVersion(): string {
  return JSON.stringify(sharp.versions);
}

export function featureCacheKey(recipe: ProjectionRecipe, embedderSha256: string): string {
  return createHash('sha256')
    .update(hashFiles(FEATURE_SOURCES))
    .update(JSON.stringify({ seed: recipe.seed, pastes: recipe.pastes, packages: TRAIN_PACKAGES }))
    .update(embedderSha256)
    .update(sharpVersion())
    .digest('hex')
    .slice(0, 16);
}

export function featuresSha256(set: FeatureSet): string {
  return createHash('sha256')
    .update(new Uint8Array(set.features.buffer, set.features.byteOffset, set.features.byteLength))
    .update(new Uint8Array(set.objects.buffer, set.objects.byteOffset, set.objects.byteLength))
    .update(set.kinds.join(','))
    .update(set.objectNames.join('\n'))
    .digest('hex');
}

interface CachedMeta {
  dimension: number;
  objects: number[];
  kinds: ViewKind[];
  objectNames: string[];
}

/**
 * Features of the recipe's views, from `.cache/train-data/features-<key>` when that exists (the key covers
 * everything that decides them: view code, seed, packages, model, sharp), else extracted and cached.
 */
export async function recipeFeatures(
  recipe: ProjectionRecipe,
  embedder: OnnxEmbedder,
  embedderSha256: string,
  options: { useCache: boolean; log?: (line: string) => void },
): Promise<{ set: FeatureSet; cached: boolean; file: string }> {
  const base = join(TRAIN_DATA_DIR, `features-${featureCacheKey(recipe, embedderSha256)}`);
  if (options.useCache && existsSync(`${base}.json`) && existsSync(`${base}.f32`)) {
    const meta = JSON.parse(readFileSync(`${base}.json`, 'utf8')) as CachedMeta;
    const bytes = readFileSync(`${base}.f32`);
    const features = new Float32Array(
      bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength),
    );
    return {
      set: { ...meta, features, objects: Int32Array.from(meta.objects) },
      cached: true,
      file: relative(root, base),
    };
  }
  const set = await extractFeatures(loadTrainingSources(), embedder, {
    seed: recipe.seed,
    pastes: recipe.pastes,
    ...(options.log ? { log: options.log } : {}),
  });
  mkdirSync(TRAIN_DATA_DIR, { recursive: true });
  const meta: CachedMeta = {
    dimension: set.dimension,
    objects: Array.from(set.objects),
    kinds: set.kinds,
    objectNames: set.objectNames,
  };
  const partial = `.${process.pid}.partial`;
  writeFileSync(`${base}.f32${partial}`, new Uint8Array(set.features.buffer));
  writeFileSync(`${base}.json${partial}`, JSON.stringify(meta));
  renameSync(`${base}.f32${partial}`, `${base}.f32`);
  renameSync(`${base}.json${partial}`, `${base}.json`);
  return { set, cached: false, file: relative(root, base) };
}

export function trainRecipe(
  recipe: ProjectionRecipe,
  set: FeatureSet,
  log?: (line: string) => void,
): TrainedProjection {
  return trainProjection(set, recipe.train, log);
}
