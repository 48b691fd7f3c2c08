/**
 * Loads the model layer: reads each model's manifest, checks it is the model this code was written for,
 * and creates one onnxruntime session per model. lib/container.ts calls this once, lazily.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { OnnxDetector, type DetectorOptions } from '#lib/adapters/onnx-detector.ts';
import { OnnxEmbedder } from '#lib/adapters/onnx-embedder.ts';
import { OnnxRegionalEmbedder } from '#lib/adapters/onnx-regional-embedder.ts';
import type { Vision } from '#lib/ports.ts';
import { DETECTOR_SPEC, EMBEDDER_SPEC, REGIONAL_SPEC, type ModelManifest } from './model-specs.ts';
import { createSession } from './onnx-session.ts';
import {
  readProjection,
  readWindowProjection,
  type ProjectionManifest,
  type WindowProjectionManifest,
} from './projection.ts';

export interface LoadedVision extends Vision {
  embedder: OnnxEmbedder;
  detector: OnnxDetector;
  regional?: OnnxRegionalEmbedder;
  manifests: {
    embedder: ModelManifest;
    detector: ModelManifest;
    regional?: ModelManifest;
    projection?: ProjectionManifest;
    windowProjection?: WindowProjectionManifest;
  };
}

export interface VisionOptions {
  /**
   * Apply the learned projection shipped in the layer (layers/projection/, docs/vision.md "Learned
   * projection") to every embedding. Changes the embedder's dimension and modelVersion.
   */
  projection?: boolean;
  /**
   * Also load the regional descriptors' graph (REGIONAL_SPEC), whose windows are compared in the
   * projected space: needs `projection`, and the window projection trained with it
   * (WINDOW_PROJECTION_SPEC), which projects the windows.
   */
  regional?: boolean;
  /**
   * Intra-op threads of the embedder's session (default 1, as the service runs it). Batch jobs that embed
   * thousands of images with nothing else to do, like the projection's feature extraction, use more.
   */
  embedderThreads?: number;
}

/**
 * The regional pass (448 px, ~3.5× the embedder's pixels) is the longest step of an image search and the
 * only one that waits on nothing else: two intra-op threads took it from ~72 to ~48 ms after the
 * embedding at 10k products (bench:search, docs/benchmarks.md), where one thread left a core idle while
 * the query's keypoints were being matched.
 */
const REGIONAL_THREADS = 2;

/** A built model's manifest, checked against its file (present, same name and size). */
export function readManifest(modelDir: string, spec: { name: string; file: string }): ModelManifest {
  const manifestFile = join(modelDir, `${spec.name}.manifest.json`);
  const modelFile = join(modelDir, spec.file);
  if (!existsSync(manifestFile) || !existsSync(modelFile)) {
    throw new Error(
      `Model ${spec.name} is missing from ${resolve(modelDir)}: run \`npm run build:layer\` to build it.`,
    );
  }
  const manifest = JSON.parse(readFileSync(manifestFile, 'utf8')) as ModelManifest;
  if (manifest.file !== spec.file || statSync(modelFile).size !== manifest.bytes) {
    throw new Error(
      `Model ${spec.name} in ${resolve(modelDir)} does not match its manifest: run \`npm run build:layer\`.`,
    );
  }
  return manifest;
}

function checkEmbedderManifest(manifest: ModelManifest): void {
  const output = manifest.outputs.find(({ name }) => name === EMBEDDER_SPEC.outputName);
  if (
    manifest.embeddingDimension !== EMBEDDER_SPEC.dimension ||
    output?.shape[1] !== EMBEDDER_SPEC.dimension
  ) {
    throw new Error(
      `Embedder manifest describes dimension ${manifest.embeddingDimension}, the code expects ${EMBEDDER_SPEC.dimension}.`,
    );
  }
}

function checkDetectorManifest(manifest: ModelManifest): void {
  const names = manifest.outputs.map(({ name }) => name);
  const expected = [...DETECTOR_SPEC.classOutputs, ...DETECTOR_SPEC.boxOutputs];
  if (
    expected.some((name) => !names.includes(name)) ||
    manifest.labels?.length !== DETECTOR_SPEC.labels.length
  ) {
    throw new Error(
      `Detector manifest outputs ${names.join(', ')} do not match the expected ${expected.join(', ')}.`,
    );
  }
}

/**
 * @param modelDir directory with the .onnx files and manifests (default build output: layers/models/build)
 * @param detectorOptions score/IoU thresholds of the detector (defaults suit the API)
 * @param options `projection: true` applies the shipped learned projection to every embedding
 * @throws Error naming the missing model and the command that builds it
 */
export async function loadVision(
  modelDir: string,
  detectorOptions: Partial<DetectorOptions> = {},
  options: VisionOptions = {},
): Promise<LoadedVision> {
  const embedderManifest = readManifest(modelDir, EMBEDDER_SPEC);
  const detectorManifest = readManifest(modelDir, DETECTOR_SPEC);
  checkEmbedderManifest(embedderManifest);
  checkDetectorManifest(detectorManifest);
  const projected = options.projection
    ? readProjection(modelDir, { sha256: embedderManifest.sha256, dimension: EMBEDDER_SPEC.dimension })
    : undefined;
  if (options.regional && !projected)
    throw new Error('Regional matching compares windows in the projected space: it needs the projection.');
  const regionalManifest = options.regional ? readManifest(modelDir, REGIONAL_SPEC) : undefined;
  // Its windows are compared with the embedder's vectors: both graphs must come from the same weights.
  if (
    regionalManifest &&
    JSON.stringify(regionalManifest.source.files) !== JSON.stringify(embedderManifest.source.files)
  )
    throw new Error(
      `Model ${REGIONAL_SPEC.name} was not built from the embedder's weights: run \`npm run build:layer\`.`,
    );
  // The windows have their own projection, trained against this projection on this regional graph.
  const windows =
    regionalManifest && projected
      ? readWindowProjection(modelDir, {
          projectionSha256: projected.manifest.sha256,
          regionalSha256: regionalManifest.sha256,
          projection: projected.projection,
        })
      : undefined;
  const [embedderSession, detectorSession] = await Promise.all([
    // A batch job that sets the threads keeps spin-waiting between images. For the projection's feature
    // extraction it is not free: sharp draws the next views beside the model, and one pair of runs over
    // 1,140 views took 61.0 s with spinning against 58.1 s without (2026-11-24, not yet changed).
    createSession(
      join(modelDir, EMBEDDER_SPEC.file),
      options.embedderThreads,
      options.embedderThreads !== undefined,
    ),
    createSession(join(modelDir, DETECTOR_SPEC.file)),
  ]);
  // The regional session is created on the first image search: imports, detection and related products
  // never use it (~80 MB of RSS they need not carry).
  const regionalFile = join(modelDir, REGIONAL_SPEC.file);
  return {
    embedder: new OnnxEmbedder(embedderSession, embedderManifest.sha256, undefined, projected?.projection),
    detector: new OnnxDetector(detectorSession, detectorOptions),
    ...(regionalManifest && windows
      ? {
          regional: new OnnxRegionalEmbedder(
            () => createSession(regionalFile, REGIONAL_THREADS),
            windows.projection,
          ),
        }
      : {}),
    manifests: {
      embedder: embedderManifest,
      detector: detectorManifest,
      ...(regionalManifest ? { regional: regionalManifest } : {}),
      ...(projected ? { projection: projected.manifest } : {}),
      ...(windows ? { windowProjection: windows.manifest } : {}),
    },
  };
}
