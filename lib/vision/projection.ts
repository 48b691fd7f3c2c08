/**
 * The learned projection head applied on top of the frozen embedder: y = normalise(W·(x − μ)), with x the
 * L2-normalised 448-d block-16 vector. Trained by layers/projection/ (contrastive, on images outside every
 * evaluation set), shipped in the model layer as `<name>.f32` (float32 little-endian: μ, then W row-major)
 * beside `<name>.manifest.json`. Catalogue and query vectors must both go through it: the embedder's
 * modelVersion says whether they did.
 */
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

/**
 * Cosine scale of projected vectors for the calibrated score (lib/vision/local-features/fusion.ts). The
 * projection spreads cosines out: benchmark queries against their own item median 0.31, p90 0.70; the
 * best catalogue item of a photo with no catalogue object in it 0.26–0.55 (30 wallpaper crops, 3 real
 * photos: max 0.545); raw vectors sit much higher (0.58 vs 0.46–0.62). With 0.3 → 0 and 0.65 → 1, global
 * evidence alone passes the default cut-off (MIN_SCORE 0.4) from cosine 0.58 with no inliers, ~0.53 with
 * 6–7 chance inliers; none of the 30 + 18 unrelated photos passed, while at 0.2/0.6 3 of the 30 still
 * returned a result (docs/quality.md).
 */
export const PROJECTED_COSINE_SCALE = { cosineFloor: 0.3, cosineCeiling: 0.65 } as const;

export const PROJECTION_SPEC = {
  name: 'projection-contrastive',
  file: 'projection-contrastive.f32',
} as const;

/**
 * The window projection: the same layout and μ as the projection, another W, applied to the regional
 * pass's windows only (lib/vision/regional.ts). Trained against the projection's packshot vectors on the
 * windows around pasted objects (layers/projection/train.ts trainWindowProjection), so that a window is
 * compared with the catalogue as windows look, not as whole images do.
 */
export const WINDOW_PROJECTION_SPEC = {
  name: 'projection-window',
  file: 'projection-window.f32',
} as const;

/** What every shipped projection's manifest records about its weights file. */
interface WeightsManifest {
  name: string;
  file: string;
  sha256: string;
  bytes: number;
  inputDimension: number;
  outputDimension: number;
  /** sha256 of the embedder .onnx whose features it was trained on: any other model makes it meaningless. */
  embedderSha256: string;
  layout: string;
}

export interface ProjectionManifest extends WeightsManifest {
  training: {
    script: string;
    command: string;
    seed: number;
    recipe: unknown;
    /** Hash of the training sources (layers/projection/recipe.ts lists them). */
    fingerprint: string;
    featuresSha256: string;
    views: number;
    objects: number;
    dataSources: readonly { name: string; version: string; licence: string }[];
    excluded: string;
  };
}

export interface WindowProjectionManifest extends WeightsManifest {
  /** The projection whose catalogue vectors it was trained to match: any other makes it meaningless. */
  projectionSha256: string;
  /** sha256 of the regional graph whose windows it was trained on. */
  regionalSha256: string;
  training: {
    script: string;
    command: string;
    recipe: unknown;
    fingerprint: string;
    featuresSha256: string;
    windows: number;
    objects: number;
  };
}

export interface Projection {
  inDim: number;
  outDim: number;
  mean: Float32Array;
  /** outDim×inDim, row-major. */
  matrix: Float32Array;
  /** First 8 hex digits of the weights' sha256: part of the embedder's modelVersion. */
  version: string;
}

export function encodeProjection(mean: ArrayLike<number>, matrix: ArrayLike<number>): Buffer {
  const values = new Float32Array(mean.length + matrix.length);
  for (let i = 0; i < mean.length; i += 1) values[i] = mean[i]!;
  for (let i = 0; i < matrix.length; i += 1) values[mean.length + i] = matrix[i]!;
  const bytes = Buffer.alloc(values.length * 4);
  values.forEach((value, i) => bytes.writeFloatLE(value, i * 4));
  return bytes;
}

export function decodeProjection(bytes: Buffer, inDim: number, outDim: number): Projection {
  if (bytes.length !== (inDim + inDim * outDim) * 4)
    throw new Error(
      `projection weights hold ${bytes.length} bytes, expected ${(inDim + inDim * outDim) * 4}`,
    );
  const values = new Float32Array(bytes.length / 4);
  for (let i = 0; i < values.length; i += 1) values[i] = bytes.readFloatLE(i * 4);
  return {
    inDim,
    outDim,
    mean: values.slice(0, inDim),
    matrix: values.slice(inDim),
    version: createHash('sha256').update(bytes).digest('hex').slice(0, 8),
  };
}

/** y = normalise(W·(x − μ)); a new vector of length outDim. */
export function applyProjection(projection: Projection, vector: Float32Array): Float32Array {
  const { inDim, outDim, mean, matrix } = projection;
  if (vector.length !== inDim)
    throw new RangeError(`projection expects ${inDim} values, got ${vector.length}`);
  const centred = new Float64Array(inDim);
  for (let k = 0; k < inDim; k += 1) centred[k] = vector[k]! - mean[k]!;
  const out = new Float32Array(outDim);
  let sum = 0;
  for (let o = 0; o < outDim; o += 1) {
    let z = 0;
    const row = o * inDim;
    for (let k = 0; k < inDim; k += 1) z += matrix[row + k]! * centred[k]!;
    out[o] = z;
    sum += z * z;
  }
  const norm = Math.sqrt(sum);
  if (norm > 0) for (let o = 0; o < outDim; o += 1) out[o] = out[o]! / norm;
  return out;
}

/**
 * The weights of `spec` in `modelDir` and their manifest, checked against each other.
 * @throws Error naming the command that builds them when they are missing or altered
 */
function readWeights<Manifest extends WeightsManifest>(
  modelDir: string,
  spec: { name: string; file: string },
): { bytes: Buffer; manifest: Manifest } {
  const manifestFile = join(modelDir, `${spec.name}.manifest.json`);
  const file = join(modelDir, spec.file);
  if (!existsSync(manifestFile) || !existsSync(file))
    throw new Error(
      `Projection ${spec.name} is missing from ${resolve(modelDir)}: run \`npm run build:layer\`.`,
    );
  const manifest = JSON.parse(readFileSync(manifestFile, 'utf8')) as Manifest;
  const bytes = readFileSync(file);
  if (manifest.file !== spec.file || createHash('sha256').update(bytes).digest('hex') !== manifest.sha256)
    throw new Error(
      `Projection in ${resolve(modelDir)} does not match its manifest: run \`npm run build:layer\`.`,
    );
  return { bytes, manifest };
}

/**
 * Reads and checks the shipped projection of `modelDir` against the embedder it will sit on.
 * @throws Error naming the command that builds it when it is missing, altered or for another model
 */
export function readProjection(
  modelDir: string,
  embedder: { sha256: string; dimension: number },
): { projection: Projection; manifest: ProjectionManifest } {
  const { bytes, manifest } = readWeights<ProjectionManifest>(modelDir, PROJECTION_SPEC);
  if (manifest.embedderSha256 !== embedder.sha256 || manifest.inputDimension !== embedder.dimension)
    throw new Error(
      `Projection ${PROJECTION_SPEC.name} was trained on embedder ${manifest.embedderSha256.slice(0, 8)}, ` +
        `not on the loaded ${embedder.sha256.slice(0, 8)}: retrain it (\`npm run train:projection\`).`,
    );
  return { projection: decodeProjection(bytes, manifest.inputDimension, manifest.outputDimension), manifest };
}

/**
 * Reads and checks the shipped window projection of `modelDir` against the projection and the regional
 * graph it was trained with.
 * @throws Error naming the command that builds it when it is missing, altered or for other models
 */
export function readWindowProjection(
  modelDir: string,
  trainedWith: { projectionSha256: string; regionalSha256: string; projection: Projection },
): { projection: Projection; manifest: WindowProjectionManifest } {
  const { bytes, manifest } = readWeights<WindowProjectionManifest>(modelDir, WINDOW_PROJECTION_SPEC);
  if (
    manifest.projectionSha256 !== trainedWith.projectionSha256 ||
    manifest.regionalSha256 !== trainedWith.regionalSha256 ||
    manifest.inputDimension !== trainedWith.projection.inDim ||
    manifest.outputDimension !== trainedWith.projection.outDim
  )
    throw new Error(
      `Projection ${WINDOW_PROJECTION_SPEC.name} was trained with projection ${manifest.projectionSha256.slice(0, 8)} ` +
        `and regional graph ${manifest.regionalSha256.slice(0, 8)}, not the loaded ` +
        `${trainedWith.projectionSha256.slice(0, 8)} and ${trainedWith.regionalSha256.slice(0, 8)}: retrain it ` +
        '(`npm run train:projection`).',
    );
  return {
    projection: decodeProjection(bytes, manifest.inputDimension, manifest.outputDimension),
    manifest,
  };
}
