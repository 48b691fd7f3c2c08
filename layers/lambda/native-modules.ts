/**
 * Stages the native runtime modules of the Lambda functions (onnxruntime-node, sharp and their runtime
 * dependencies) from the repository's node_modules into `<outDir>/nodejs/node_modules`, the layout a
 * Node.js Lambda layer mounts at /opt/nodejs/node_modules (resolved by both require and ESM import).
 *
 * Only the binaries of the target architecture are kept (onnxruntime-node ships every platform: ~290 MB →
 * ~50 MB). No AWS SDK is ever copied: a layer's modules would shadow the runtime's and the bundles'.
 * Works offline: it copies what `npm ci` installed; it fails with a clear message when the prebuilt
 * binaries for the target are not installed.
 */
import { cpSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

export type LambdaArchitecture = 'x86_64' | 'arm64';

/**
 * Modules with native binaries that the bundles leave external (esbuild `externalModules`) and this layer
 * provides. usearch is the local-mode vector index: unused in AWS, but lib/container.ts imports it
 * statically and an ESM import of a missing package fails the whole module at cold start. OpenCV's wasm
 * build is no native module, but 13 MB of JS with the wasm inside: bundled, every function would parse it
 * at cold start; from the layer it is read on the first ORB extraction only (lib/vision/local-features/
 * opencv.ts imports it dynamically).
 */
export const NATIVE_MODULES = ['onnxruntime-node', 'sharp', 'usearch', '@opencvjs/web'] as const;

/** Install- or build-time-only dependencies (downloaders, C++ headers): not needed at run time. */
const INSTALL_ONLY = new Set(['adm-zip', 'global-agent', 'node-addon-api']);

/**
 * What to drop from a package, by its path segments relative to the package directory: other platforms'
 * binaries and native sources.
 */
function dropped(pkg: string, parts: string[], arch: 'x64' | 'arm64'): boolean {
  const [top, second, third, fourth] = parts;
  if (pkg === 'onnxruntime-node' && top === 'bin' && second !== undefined && third !== undefined) {
    // bin/napi-v*/<platform>/<arch>/…
    return third !== 'linux' || (fourth !== undefined && fourth !== arch);
  }
  if (pkg === 'usearch') {
    if (['c', 'cpp', 'include', 'numkong', 'cmake', 'binding.gyp'].includes(top ?? '')) return true;
    return top === 'prebuilds' && second !== undefined && second !== `linux-${arch}`;
  }
  if (pkg === 'sharp') return top === 'src';
  return false;
}

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

interface PackageJson {
  version: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
}

function readPackage(dir: string): PackageJson {
  return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as PackageJson;
}

/** Where Node would find `name` from a package in `fromDir` (nested node_modules first, then hoisted). */
function resolvePackageDir(name: string, fromDir: string, nodeModules: string): string | undefined {
  let dir = fromDir;
  while (dir.startsWith(nodeModules)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    dir = dirname(dir);
  }
  const hoisted = join(nodeModules, name);
  return existsSync(join(hoisted, 'package.json')) ? hoisted : undefined;
}

function nodeArch(arch: LambdaArchitecture): 'x64' | 'arm64' {
  return arch === 'x86_64' ? 'x64' : 'arm64';
}

/** The runtime dependency closure of NATIVE_MODULES: package dir → version. */
export function nativeModuleClosure(
  arch: LambdaArchitecture,
  nodeModules = join(root, 'node_modules'),
): Map<string, string> {
  const found = new Map<string, string>();
  const visit = (name: string, fromDir: string, optional: boolean) => {
    if (INSTALL_ONLY.has(name) || name.startsWith('@aws-sdk/')) return;
    // sharp lists every platform's prebuilt package as optional: keep only Linux glibc of the target.
    if (name.startsWith('@img/sharp-') && !name.endsWith(`-linux-${nodeArch(arch)}`)) return;
    const dir = resolvePackageDir(name, fromDir, nodeModules);
    if (!dir) {
      if (optional) return;
      throw new Error(`native layer: ${name} is not installed; run \`npm ci\` first`);
    }
    if (found.has(dir)) return;
    const pkg = readPackage(dir);
    found.set(dir, pkg.version);
    for (const dep of Object.keys(pkg.dependencies ?? {})) visit(dep, dir, false);
    for (const dep of Object.keys(pkg.optionalDependencies ?? {})) visit(dep, dir, true);
  };
  for (const name of NATIVE_MODULES) visit(name, nodeModules, false);
  const needed = [`@img/sharp-linux-${nodeArch(arch)}`, `@img/sharp-libvips-linux-${nodeArch(arch)}`];
  for (const name of needed) {
    if (![...found.keys()].some((dir) => dir.endsWith(`${sep}${name.replace('/', sep)}`))) {
      throw new Error(
        `native layer: ${name} (sharp's prebuilt binary for Lambda ${arch}) is not installed; ` +
          `install it with \`npm install --no-save --os=linux --cpu=${nodeArch(arch)} sharp\``,
      );
    }
  }
  return found;
}

/** Identifies the staged content: changes when a version or the architecture changes. */
export function nativeModulesFingerprint(
  arch: LambdaArchitecture,
  nodeModules = join(root, 'node_modules'),
): string {
  const entries = [...nativeModuleClosure(arch, nodeModules)].map(
    ([dir, version]) => `${relative(nodeModules, dir)}@${version}`,
  );
  return `${arch}:${entries.sort().join(',')}`;
}

/** Copies the closure into `<outDir>/nodejs/node_modules`, pruning other platforms' binaries. */
export function stageNativeModules(
  outDir: string,
  arch: LambdaArchitecture,
  nodeModules = join(root, 'node_modules'),
): void {
  const target = join(outDir, 'nodejs', 'node_modules');
  for (const dir of nativeModuleClosure(arch, nodeModules).keys()) {
    const pkg = relative(nodeModules, dir).split(sep).join('/');
    const destination = join(target, relative(nodeModules, dir));
    mkdirSync(dirname(destination), { recursive: true });
    cpSync(dir, destination, {
      recursive: true,
      dereference: true,
      filter: (source) => {
        const parts = relative(dir, source).split(sep).filter(Boolean);
        // Nested node_modules are staged as their own closure entries.
        if (parts[0] === 'node_modules') return false;
        if (dropped(pkg, parts, nodeArch(arch))) return false;
        // Docs, type declarations and source maps are not needed at run time.
        return !/\.(md|markdown|ts|map)$/i.test(source);
      },
    });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const outDir = process.argv[2] ?? join(root, 'layers', 'lambda', 'build');
  const arch = (process.argv[3] ?? 'x86_64') as LambdaArchitecture;
  stageNativeModules(outDir, arch);
  console.error(`native layer staged in ${relative(root, outDir)} (${arch})`);
}
