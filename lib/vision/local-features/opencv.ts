/**
 * Lazy, memoised loading of OpenCV's WebAssembly build (`@techstark/opencv-js`), used only for ORB
 * keypoint extraction: matching and RANSAC are ours (see `matcher.ts`, `homography.ts`), because every
 * call into the wasm matcher crosses the JS↔wasm boundary and was measured ~100× too slow for re-ranking.
 */
import { createRequire } from 'node:module';

/** The handful of OpenCV objects this module uses; typed here rather than through the package's own
 * declarations, which cover all of OpenCV and would couple our types to its generated ones. */
export interface CvMat {
  rows: number;
  cols: number;
  data: Uint8Array;
  delete(): void;
}
export interface CvKeyPoint {
  pt: { x: number; y: number };
  size: number;
  angle: number;
  response: number;
  octave: number;
}
export interface CvKeyPointVector {
  size(): number;
  get(index: number): CvKeyPoint;
  delete(): void;
}
export interface CvOrb {
  detectAndCompute(
    image: CvMat,
    mask: CvMat,
    keypoints: CvKeyPointVector,
    descriptors: CvMat,
    useProvidedKeypoints?: boolean,
  ): void;
  delete(): void;
}
export interface OpenCv {
  Mat: new (...args: number[]) => CvMat;
  KeyPointVector: new () => CvKeyPointVector;
  ORB: new (
    nfeatures?: number,
    scaleFactor?: number,
    nlevels?: number,
    edgeThreshold?: number,
    firstLevel?: number,
    wtaK?: number,
    scoreType?: number,
    patchSize?: number,
    fastThreshold?: number,
  ) => CvOrb;
  CV_8UC1: number;
}

interface EmscriptenModule {
  then?: (callback: (module: EmscriptenModule) => void) => unknown;
  ORB?: unknown;
}

let loading: Promise<OpenCv> | undefined;

/**
 * Resolves to the initialised OpenCV module; the first call starts the ~0.4 s wasm instantiation and every
 * concurrent or later call shares it. A failed load is not cached, so a later call retries.
 */
export function loadOpenCv(): Promise<OpenCv> {
  loading ??= instantiate().catch((error: unknown) => {
    loading = undefined;
    throw error;
  });
  return loading;
}

function instantiate(): Promise<OpenCv> {
  // `require`, not `import()`: the CommonJS export has a `then` method, so an ESM namespace of it (and any
  // promise resolved with it) would try to adopt it as a thenable and never settle.
  const require = createRequire(import.meta.url);
  const module = require('@techstark/opencv-js') as EmscriptenModule;
  return new Promise<OpenCv>((resolve, reject) => {
    const ready = (initialised: EmscriptenModule): void => {
      // Same trap: resolving with an object that still has `then` would recurse into it forever.
      delete initialised.then;
      if (typeof initialised.ORB !== 'function') {
        reject(new Error('OpenCV loaded without ORB support'));
        return;
      }
      resolve(initialised as unknown as OpenCv);
    };
    if (typeof module.then === 'function') module.then(ready);
    else ready(module);
  });
}
