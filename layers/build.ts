/**
 * `npm run build:layer`: converts the pinned TF.js models to ONNX into layers/models/build/, each with a
 * `<name>.manifest.json` (sources and their sha256, output sha256, input/outputs, preprocessing).
 *
 * `--if-stale` (run before `npm start` / `npm test` by scripts/ensure-install.mjs) only rebuilds a model
 * whose .onnx or manifest is missing, whose bytes no longer match the manifest, or whose converter sources
 * or recipe changed (the build fingerprint). When everything is current it costs a few file reads.
 */
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ModelManifest } from '#lib/vision/model-specs.ts';
import { PROJECTION_SPEC, WINDOW_PROJECTION_SPEC } from '#lib/vision/projection.ts';
import { OPSET_VERSION } from './convert/onnx-builder.ts';
import { convertTfjsGraph, WEIGHT_LEVELS } from './convert/tf-to-onnx.ts';
import { readTfjsGraph } from './convert/tfjs-graph.ts';
import { RECIPES, type ModelRecipe } from './models.ts';
import { sha256 } from './sources.ts';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
export const DEFAULT_MODEL_DIR = join(root, 'layers/models/build');

function listTypeScript(directory: string): string[] {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const path = join(directory, entry.name);
    // build/ holds outputs; projection/ is the training code of the projection, whose weights are
    // committed and shipped as they are (shipProjections below), so it must not force an ONNX rebuild;
    // calibration/ likewise: what reaches the graph is its committed ranges, hashed per recipe below.
    if (entry.isDirectory())
      return ['build', 'projection', 'calibration'].includes(entry.name) ? [] : listTypeScript(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** Hash of everything that determines the converted bytes except the (separately pinned) weights. */
export function buildFingerprint(recipe: ModelRecipe): string {
  const hash = createHash('sha256');
  const files = [
    ...listTypeScript(join(root, 'layers')),
    join(root, 'lib/vision/model-specs.ts'),
    join(root, 'lib/vision/coco-labels.ts'),
  ];
  for (const file of files.sort()) hash.update(relative(root, file)).update(readFileSync(file));
  hash.update(recipe.name);
  if (recipe.calibration)
    hash.update(recipe.calibration).update(readFileSync(join(root, recipe.calibration)));
  return hash.digest('hex');
}

export function manifestPath(modelDir: string, name: string): string {
  return join(modelDir, `${name}.manifest.json`);
}

function isCurrent(recipe: ModelRecipe, modelDir: string, fingerprint: string): boolean {
  const path = manifestPath(modelDir, recipe.name);
  const modelFile = join(modelDir, recipe.file);
  if (!existsSync(path) || !existsSync(modelFile)) return false;
  const manifest = JSON.parse(readFileSync(path, 'utf8')) as ModelManifest;
  return manifest.buildFingerprint === fingerprint && manifest.sha256 === sha256(readFileSync(modelFile));
}

function writeAtomically(path: string, bytes: Uint8Array | string): void {
  const temporary = `${path}.${process.pid}.partial`; // unique: parallel test workers may build at once
  writeFileSync(temporary, bytes);
  renameSync(temporary, path);
}

export function buildModel(recipe: ModelRecipe, modelDir: string, fingerprint: string): ModelManifest {
  const source = recipe.load(root);
  const graph = readTfjsGraph(source.model, source.weightBytes);
  const calibration = recipe.calibration ? readFileSync(join(root, recipe.calibration)) : undefined;
  const bytes = convertTfjsGraph(graph, {
    ...recipe.conversion,
    ...(calibration ? { quantization: calibrationQuantization(calibration) } : {}),
    producer: 'visual-product-search/layers/build.ts',
    metadata: { source: `${recipe.source.package}@${recipe.source.version}`, model: recipe.name },
  });
  const manifest: ModelManifest = {
    name: recipe.name,
    file: recipe.file,
    sha256: sha256(bytes),
    bytes: bytes.length,
    source: { ...recipe.source, files: source.files },
    buildFingerprint: fingerprint,
    opset: OPSET_VERSION,
    input: { name: recipe.conversion.inputName, shape: recipe.conversion.inputShape },
    outputs: recipe.conversion.outputs.map(({ name, shape }) => ({ name, shape })),
    preprocessing: recipe.preprocessing,
    ...(recipe.embeddingDimension === undefined ? {} : { embeddingDimension: recipe.embeddingDimension }),
    ...(recipe.labels === undefined ? {} : { labels: recipe.labels }),
    ...(calibration
      ? {
          quantization: {
            scheme: `static QDQ: uint8 activations over calibrated ranges, int8 weights per output channel within ±${WEIGHT_LEVELS}, int32 biases corrected for the weights' rounding with calibrated channel means`,
            calibration: recipe.calibration!,
            calibrationSha256: sha256(calibration),
          },
        }
      : {}),
  };
  mkdirSync(modelDir, { recursive: true });
  writeAtomically(join(modelDir, recipe.file), bytes);
  writeAtomically(manifestPath(modelDir, recipe.name), `${JSON.stringify(manifest, null, 2)}\n`);
  return manifest;
}

function calibrationQuantization(json: Buffer): {
  ranges: Record<string, readonly [number, number]>;
  means: Record<string, readonly number[]>;
} {
  const { ranges, means } = JSON.parse(json.toString('utf8')) as {
    ranges?: Record<string, [number, number]>;
    means?: Record<string, number[]>;
  };
  if (!ranges || !means)
    throw new Error('calibration file lacks ranges or channel means: run `npm run calibrate:layer`');
  return { ranges, means };
}

export const PROJECTION_WEIGHTS_DIR = join(root, 'layers/projection/weights');

/**
 * Copies the learned projections (the projection and the window projection, trained by
 * `npm run train:projection`, committed with their manifests) into the layer when missing there or
 * different. Their bytes are checked against their manifests first. Returns the names it copied.
 */
export function shipProjections(modelDir: string): string[] {
  const copied: string[] = [];
  for (const spec of [PROJECTION_SPEC, WINDOW_PROJECTION_SPEC]) {
    const names = [spec.file, `${spec.name}.manifest.json`];
    const source = join(PROJECTION_WEIGHTS_DIR, names[1]!);
    if (!existsSync(source)) continue;
    const manifest = JSON.parse(readFileSync(source, 'utf8')) as { sha256: string };
    const weights = readFileSync(join(PROJECTION_WEIGHTS_DIR, spec.file));
    if (sha256(weights) !== manifest.sha256)
      throw new Error(`layers/projection/weights/${spec.file} does not match its manifest`);
    const target = join(modelDir, spec.file);
    const targetManifest = join(modelDir, names[1]!);
    if (
      existsSync(target) &&
      existsSync(targetManifest) &&
      sha256(readFileSync(target)) === manifest.sha256 &&
      readFileSync(targetManifest).equals(readFileSync(source))
    )
      continue;
    mkdirSync(modelDir, { recursive: true });
    for (const name of names) {
      const temporary = join(modelDir, `${name}.${process.pid}.partial`);
      copyFileSync(join(PROJECTION_WEIGHTS_DIR, name), temporary);
      renameSync(temporary, join(modelDir, name));
    }
    console.error(`build:layer: ${relative(root, target)} (learned projection, copied)`);
    copied.push(spec.name);
  }
  return copied;
}

/**
 * Builds every model into `modelDir`; with `ifStale`, only those not current. Returns the names rebuilt.
 * Tests call this too, so a test run never depends on a previous manual build.
 */
export function buildLayer({
  ifStale,
  modelDir = DEFAULT_MODEL_DIR,
}: {
  ifStale: boolean;
  modelDir?: string;
}): string[] {
  const rebuilt: string[] = [];
  for (const recipe of RECIPES) {
    const fingerprint = buildFingerprint(recipe);
    if (ifStale && isCurrent(recipe, modelDir, fingerprint)) continue;
    const started = performance.now();
    const manifest = buildModel(recipe, modelDir, fingerprint);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    console.error(
      `build:layer: ${relative(root, join(modelDir, manifest.file))} (${(manifest.bytes / 1e6).toFixed(1)} MB, ${seconds} s)`,
    );
    rebuilt.push(recipe.name);
  }
  rebuilt.push(...shipProjections(modelDir));
  return rebuilt;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  buildLayer({ ifStale: process.argv.includes('--if-stale') });
}
