import { spawnSync } from 'node:child_process';
import { existsSync, linkSync, copyFileSync, mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AssetHashType, DockerImage, type RemovalPolicy } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { Construct } from 'constructs';
import { nativeModulesFingerprint, stageNativeModules } from '#layers/lambda/native-modules.ts';
import { ARCHITECTURE, REPO_ROOT, RUNTIME } from './endpoint-function.ts';

/** Where `npm run build:layer` writes the converted models and their manifests. */
export const MODEL_BUILD_DIR = join(REPO_ROOT, 'layers', 'models', 'build');

/** Bundling never runs Docker here: local bundling always succeeds; this image is only a required field. */
const NO_DOCKER = DockerImage.fromRegistry('local-bundling-only');

/** The model files of a build directory (models and manifests), or a clear error when it is not built. */
export function modelFiles(dir: string = MODEL_BUILD_DIR): string[] {
  const files = existsSync(dir)
    ? readdirSync(dir).filter((name) => /\.(onnx|f32|manifest\.json)$/.test(name))
    : [];
  if (
    !files.some((name) => name.endsWith('.onnx')) ||
    !files.some((name) => name.endsWith('.manifest.json'))
  ) {
    throw new Error(
      `The model layer is not built: ${dir} has no .onnx model and manifest. Run \`npm run build:layer\` first.`,
    );
  }
  return files;
}

/**
 * Builds the model layer when stale (layers/build.ts --if-stale, a few file reads when current), then
 * checks it; fails with the command to run when the models cannot be built.
 */
export function ensureModelLayer(): void {
  const build = join(REPO_ROOT, 'layers', 'build.ts');
  if (existsSync(build)) {
    const result = spawnSync(join(REPO_ROOT, 'node_modules', '.bin', 'tsx'), [build, '--if-stale'], {
      cwd: REPO_ROOT,
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    if (result.status !== 0)
      throw new Error('The model layer build (layers/build.ts --if-stale) failed; see above.');
  }
  modelFiles();
}

/** Hard-links (same file system) or copies a file into the bundle: the models are tens of MB. */
function place(source: string, destination: string): void {
  try {
    linkSync(source, destination);
  } catch {
    copyFileSync(source, destination);
  }
}

/** Props of {@link ModelLayer}. */
export interface ModelLayerProps {
  layerVersionName: string;
  removalPolicy: RemovalPolicy;
  /** Directory with the built models (default: layers/models/build). */
  modelDir?: string;
}

/**
 * The ONNX models as a layer: the asset holds `models/<name>.onnx` + manifests, so it mounts at
 * /opt/models (MODEL_DIR). The asset hash follows the model bytes.
 */
export class ModelLayer extends Construct {
  readonly layer: lambda.LayerVersion;

  constructor(scope: Construct, id: string, props: ModelLayerProps) {
    super(scope, id);
    const modelDir = props.modelDir ?? MODEL_BUILD_DIR;
    const files = modelFiles(modelDir);
    this.layer = new lambda.LayerVersion(this, 'Layer', {
      layerVersionName: props.layerVersionName,
      description: `ONNX models: ${files.filter((name) => name.endsWith('.onnx')).join(', ')}`,
      compatibleRuntimes: [RUNTIME],
      compatibleArchitectures: [ARCHITECTURE],
      removalPolicy: props.removalPolicy,
      code: lambda.Code.fromAsset(modelDir, {
        assetHashType: AssetHashType.SOURCE,
        exclude: ['*.partial'],
        bundling: {
          image: NO_DOCKER,
          local: {
            tryBundle(outputDir) {
              mkdirSync(join(outputDir, 'models'), { recursive: true });
              for (const name of files) place(join(modelDir, name), join(outputDir, 'models', name));
              return true;
            },
          },
        },
      }),
    });
  }
}

/** Props of {@link NativeModulesLayer}. */
export interface NativeModulesLayerProps {
  layerVersionName: string;
  removalPolicy: RemovalPolicy;
  /** `stub`: an empty layer (assertion tests); `staged`: the real modules from node_modules. */
  mode: 'staged' | 'stub';
}

/**
 * onnxruntime-node and sharp (with their runtime dependencies) for the chosen architecture, in
 * `nodejs/node_modules`: the bundles leave these native modules external. No AWS SDK inside.
 */
export class NativeModulesLayer extends Construct {
  readonly layer: lambda.LayerVersion;

  constructor(scope: Construct, id: string, props: NativeModulesLayerProps) {
    super(scope, id);
    const arch = ARCHITECTURE === lambda.Architecture.ARM_64 ? 'arm64' : 'x86_64';
    const stub = props.mode === 'stub';
    this.layer = new lambda.LayerVersion(this, 'Layer', {
      layerVersionName: props.layerVersionName,
      description: `onnxruntime-node and sharp for Lambda ${arch}`,
      compatibleRuntimes: [RUNTIME],
      compatibleArchitectures: [ARCHITECTURE],
      removalPolicy: props.removalPolicy,
      code: lambda.Code.fromAsset(join(REPO_ROOT, 'layers', 'lambda'), {
        // Hash the module versions, not node_modules' bytes (hundreds of MB to read on every synth).
        assetHashType: AssetHashType.CUSTOM,
        assetHash: stub ? 'native-modules-stub' : nativeModulesFingerprint(arch),
        bundling: {
          image: NO_DOCKER,
          local: {
            tryBundle(outputDir) {
              if (stub) {
                mkdirSync(join(outputDir, 'nodejs', 'node_modules'), { recursive: true });
                writeFileSync(join(outputDir, 'nodejs', 'node_modules', '.stub'), 'assertion-test stub\n');
              } else {
                stageNativeModules(outputDir, arch);
              }
              return true;
            },
          },
        },
      }),
    });
  }
}
