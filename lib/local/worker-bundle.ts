/**
 * Local mode's ORB extraction worker as plain JavaScript: extract-worker.ts and the project modules it
 * imports, bundled by esbuild (a dev dependency, which local mode has) into one ES module that the
 * worker runs without tsx's loader (lib/vision/local-features/extract-pool.ts says why that is faster).
 *
 * The bundle goes to node_modules/.cache/visual-product-search/, so that the packages left out of it
 * (sharp's native binding and OpenCV's 13 MB wasm module) resolve from the project's node_modules as they
 * would from the sources. Its file name is the sha256 of its contents: processes starting together (the
 * test files) write the same bytes under the same name, each through a rename, and a changed source
 * gets a new file instead of overwriting one that a running process uses.
 */
import { createHash, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const ENTRY = join(ROOT, 'lib', 'vision', 'local-features', 'extract-worker.ts');
const OUT_DIR = join(ROOT, 'node_modules', '.cache', 'visual-product-search');
/** Packages the worker imports that stay outside the bundle (a native binding; a large wasm module). */
const EXTERNAL = ['sharp', '@opencvjs/web'];

/** Builds (or finds) the bundled worker entry and returns its path. Throws when esbuild cannot build it. */
export async function bundleExtractionWorker(): Promise<string> {
  // Imported here: only local mode bundles, and the Lambda bundles must not carry esbuild.
  const { build } = await import('esbuild');
  const result = await build({
    entryPoints: [ENTRY],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: EXTERNAL,
    tsconfig: join(ROOT, 'tsconfig.json'),
    // The bundle's path comments are relative to this: the same bytes (and file) from any working directory.
    absWorkingDir: ROOT,
    write: false,
    logLevel: 'silent',
  });
  const code = result.outputFiles[0]!.contents;
  const digest = createHash('sha256').update(code).digest('hex').slice(0, 16);
  const file = join(OUT_DIR, `extract-worker-${digest}.mjs`);
  if (existsSync(file)) return file;
  await mkdir(OUT_DIR, { recursive: true });
  const partial = `${file}.${randomUUID()}.tmp`;
  await writeFile(partial, code);
  await rename(partial, file);
  return file;
}
