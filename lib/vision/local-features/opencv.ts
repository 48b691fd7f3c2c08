/**
 * Lazy, memoised loading of OpenCV's WebAssembly build (`@opencvjs/web`, OpenCV 5.0), used only for ORB
 * keypoint extraction: matching and RANSAC are ours (see `matcher.ts`, `homography.ts`), because every
 * call into the wasm matcher crosses the JS↔wasm boundary and was measured ~100× too slow for re-ranking.
 *
 * Why this build: its ORB gives byte-identical keypoints and descriptors to `@techstark/opencv-js` 4.12
 * (the build stored features were first made with: 374 catalogue and query rasters compared, every
 * position, angle, response, octave and descriptor bit) in ~55 % of the time on a 640-px query
 * (docs/benchmarks.md "Search CPU on an AVX2 host"), so stored features stay valid.
 */
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

let loading: Promise<OpenCv> | undefined;

/**
 * Resolves to the initialised OpenCV module; the first call starts the load and wasm instantiation (~0.4 s
 * in plain Node, ~0.85 s through tsx's loader: docs/benchmarks.md "Cold start")
 * and every concurrent or later call shares it (a failed instantiation, like the package's own promise,
 * stays failed: it means the wasm cannot run in this process).
 */
export function loadOpenCv(): Promise<OpenCv> {
  loading ??= instantiate();
  return loading;
}

async function instantiate(): Promise<OpenCv> {
  // Imported here, not at the top: evaluating the 13 MB module alone takes ~0.26 s, which processes that
  // never extract features (detection, related products by id) should not pay at start.
  const { loadOpenCV } = await import('@opencvjs/web');
  const module = (await loadOpenCV()) as unknown as Partial<OpenCv>;
  if (typeof module.ORB !== 'function') throw new Error('OpenCV loaded without ORB support');
  return module as OpenCv;
}
