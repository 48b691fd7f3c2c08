/**
 * ORB feature extraction for geometric verification. Decoding goes through the same guarded sharp path as
 * the embedder (`openImage`: format allow-list, pixel limit, EXIF rotation, alpha flattened onto white);
 * OpenCV only sees a greyscale raster.
 */
import { decoding, openImage, type Box } from '#lib/vision/image-input.ts';
import { loadOpenCv } from '#lib/vision/local-features/opencv.ts';
import { DESCRIPTOR_WORDS, type FeatureSet, type LocalFeatures } from '#lib/vision/local-features/types.ts';

/** Which side of the search an image is on; it picks the size and orientation defaults. */
export type FeatureRole = 'catalogue' | 'query';

export interface ExtractOptions {
  role: FeatureRole;
  /**
   * Keypoint cap per orientation (ORB keeps the strongest). Default: 800 for the catalogue (stored, ~58 KB
   * per item for both orientations), 1000 for queries, where a product may fill a small part of the frame:
   * on the tote photo 1000 query keypoints doubled the inliers of the products in it (book 18 → 43,
   * towels 25 → 59) while unrelated items stayed at ≤ 7. The catalogue's 800 pays only with the low FAST
   * threshold below (docs/quality.md "Keypoints of smooth products").
   */
  maxFeatures?: number;
  /**
   * Also extract from the horizontal mirror. Default: true for the catalogue, false for queries — storing
   * both orientations of each item covers flipped queries, so mirroring the query as well would double the
   * matching work for nothing.
   */
  mirror?: boolean;
  /**
   * Longest side the image is brought down to. Default 640. A thin image brought up to `minShortSide` may
   * exceed it, up to 1024 px.
   */
  maxSide?: number;
  /**
   * Small images are brought up so their short side is at least this (default 256): at native thumbnail
   * size ~8 % of catalogue items yield no keypoints at all (ORB's 31-px patch and pyramid need room), and
   * small queries suffer the same way.
   */
  minShortSide?: number;
  /** FAST's corner contrast; default `ORB_FAST_THRESHOLD` (evaluation scripts compare others). */
  fastThreshold?: number;
  /**
   * Extract from this box only (x0, y0, x1, y1 in pixels of the image after EXIF orientation, clipped to
   * it), sized as an image of the box's size: a small product's region is brought up to `minShortSide`
   * instead of staying a few dozen pixels of a 640-px raster (image search's second look).
   */
  region?: Box;
}

const DEFAULTS = { catalogueFeatures: 800, queryFeatures: 1000, maxSide: 640, minShortSide: 256 } as const;
/** Upscaling never produces an image longer than this, whatever the aspect ratio. */
const MAX_UPSCALED_SIDE = 1024;
// OpenCV's ORB defaults but for the FAST threshold, spelled out so that stored features cannot drift with
// a library default. A change to the catalogue's settings bumps `CATALOGUE_FEATURES_VERSION` (recipe.ts).
const ORB_SCALE_FACTOR = 1.2;
const ORB_LEVELS = 8;
const ORB_EDGE_THRESHOLD = 31;
const ORB_WTA_K = 2;
const ORB_HARRIS_SCORE = 0;
const ORB_PATCH_SIZE = 31;
/**
 * FAST's corner contrast, 7 instead of OpenCV's 20. The products ORB failed to verify were smooth ones,
 * shrunk, blurred and JPEG-compressed in the photo: at 20 they had too few corners at all, and the
 * query's 1000 went to the textured background. At 7 (both sides, with the catalogue's 800) the item
 * reached 10 inliers for 0.793 of the benchmark's tuning queries instead of 0.680 (0.812 instead of 0.711
 * on the held-aside half), with strangers at that level for 1 query in 266 on either recipe (held-aside:
 * 3 instead of 1; docs/quality.md "Keypoints of smooth products").
 */
const ORB_FAST_THRESHOLD = 7;

/** Target size of the extraction raster for an oriented image of `width`×`height`. */
export function extractionSize(
  width: number,
  height: number,
  options: ExtractOptions,
): { width: number; height: number } {
  const maxSide = options.maxSide ?? DEFAULTS.maxSide;
  const long = Math.max(width, height);
  const short = Math.min(width, height);
  let scale = Math.min(1, maxSide / long);
  const minShort = options.minShortSide ?? DEFAULTS.minShortSide;
  if (short * scale < minShort) scale = Math.min(minShort / short, MAX_UPSCALED_SIDE / long);
  return {
    width: Math.max(1, Math.round(width * scale)),
    height: Math.max(1, Math.round(height * scale)),
  };
}

/**
 * The part of a box inside a `width`×`height` image, in whole pixels (either corner order; NaN reads as
 * 0); undefined when less than a pixel of it is inside. Rounds the corners, unlike image-input.ts's
 * `clampToPixels` (floor/ceil, always 1 × 1 at least): with that one the second look's benchmark rows
 * move (held-aside R@1 0.876 → 0.871, 2026-11-26), so the measured rounding stays.
 */
function clippedRegion(
  [x0, y0, x1, y1]: Box,
  width: number,
  height: number,
): { left: number; top: number; width: number; height: number } | undefined {
  const clamp = (v: number, max: number) => Math.min(max, Math.max(0, Math.round(Number.isNaN(v) ? 0 : v)));
  const left = clamp(Math.min(x0, x1), width);
  const top = clamp(Math.min(y0, y1), height);
  const right = clamp(Math.max(x0, x1), width);
  const bottom = clamp(Math.max(y0, y1), height);
  if (right <= left || bottom <= top) return undefined;
  return { left, top, width: right - left, height: bottom - top };
}

/**
 * No keypoints (of a `width` × `height` raster), with the mirrored set when asked. New arrays each time:
 * the extraction pool transfers (detaches) the arrays it sends back.
 */
function noFeatures(mirror: boolean, width = 0, height = 0): LocalFeatures {
  const none = (): FeatureSet => ({
    width,
    height,
    points: new Float32Array(0),
    descriptors: new Uint32Array(0),
  });
  return mirror ? { original: none(), mirrored: none() } : { original: none() };
}

/**
 * Extracts ORB keypoints and packed descriptors from an encoded image (and from its mirror when asked).
 * A textureless image yields empty sets, not an error; undecodable input throws `InvalidImageError`.
 */
export async function extractLocalFeatures(image: Buffer, options: ExtractOptions): Promise<LocalFeatures> {
  const [cv, oriented] = await Promise.all([loadOpenCv(), openImage(image)]);
  const mirror = options.mirror ?? options.role === 'catalogue';
  const area = options.region ? clippedRegion(options.region, oriented.width, oriented.height) : undefined;
  // A region outside the image shows nothing (as a textureless image: no keypoints, not an error).
  if (options.region && !area) return noFeatures(mirror);
  const size = extractionSize(area?.width ?? oriented.width, area?.height ?? oriented.height, options);
  const grey = await decoding(() => {
    // After the pipeline's rotate(), so the region is in oriented pixels.
    const source = area ? oriented.pipeline.clone().extract(area) : oriented.pipeline.clone();
    const resized = source.resize(size.width, size.height, { fit: 'fill', kernel: 'lanczos3' });
    // A query is converted to grey by libvips' colourspace conversion after its resize rather than by
    // sharp's greyscale(): ~7 ms less on a 1000 × 750 photo, the same raster when nothing is resized. The
    // catalogue keeps greyscale(): with the other raster for packshots too, strangers reached 10 inliers
    // for 6 of the 266 tuning queries instead of 1 (docs/quality.md "Keypoints of smooth products").
    const raster = options.role === 'query' ? resized.toColourspace('b-w') : resized.greyscale();
    return raster.raw().toBuffer({ resolveWithObject: true });
  });
  // Flattening leaves RGB; both conversions give one channel, but be explicit about the layout we rely on.
  if (grey.info.channels !== 1) throw new Error(`expected a 1-channel raster, got ${grey.info.channels}`);
  const { width, height } = grey.info;
  // ORB keeps no keypoint within ORB_EDGE_THRESHOLD of a border, so a strip this thin has none; and OpenCV
  // aborts (an emscripten abort, printed to stderr) on a 1-pixel one instead of answering.
  if (Math.min(width, height) <= 2 * ORB_EDGE_THRESHOLD) return noFeatures(mirror, width, height);
  const maxFeatures =
    options.maxFeatures ??
    (options.role === 'catalogue' ? DEFAULTS.catalogueFeatures : DEFAULTS.queryFeatures);

  const orb = new cv.ORB(
    maxFeatures,
    ORB_SCALE_FACTOR,
    ORB_LEVELS,
    ORB_EDGE_THRESHOLD,
    0,
    ORB_WTA_K,
    ORB_HARRIS_SCORE,
    ORB_PATCH_SIZE,
    options.fastThreshold ?? ORB_FAST_THRESHOLD,
  );
  try {
    const detect = (pixels: Uint8Array): FeatureSet => {
      const mat = new cv.Mat(height, width, cv.CV_8UC1);
      const mask = new cv.Mat();
      const keypoints = new cv.KeyPointVector();
      const descriptors = new cv.Mat();
      try {
        mat.data.set(pixels);
        orb.detectAndCompute(mat, mask, keypoints, descriptors);
        return toFeatureSet(width, height, keypoints, descriptors);
      } finally {
        mat.delete();
        mask.delete();
        keypoints.delete();
        descriptors.delete();
      }
    };
    const original = detect(grey.data);
    return mirror ? { original, mirrored: detect(mirrorRows(grey.data, width, height)) } : { original };
  } finally {
    orb.delete();
  }
}

function toFeatureSet(
  width: number,
  height: number,
  keypoints: { size(): number; get(index: number): { pt: { x: number; y: number } } },
  descriptors: { rows: number; cols: number; data: Uint8Array },
): FeatureSet {
  const count = keypoints.size();
  if (count > 0 && (descriptors.rows !== count || descriptors.cols !== DESCRIPTOR_WORDS * 4)) {
    throw new Error(
      `unexpected ORB output: ${count} keypoints, ${descriptors.rows}×${descriptors.cols} descriptors`,
    );
  }
  const points = new Float32Array(count * 2);
  for (let i = 0; i < count; i++) {
    const { pt } = keypoints.get(i);
    // Quarter-pixel quantisation is what the stored format keeps; doing it here makes stored and fresh
    // features identical, so a round trip through the ObjectStore cannot change an inlier count.
    points[2 * i] = Math.round(pt.x * 4) / 4;
    points[2 * i + 1] = Math.round(pt.y * 4) / 4;
  }
  // Copy out of the wasm heap (the Mat is freed next); the byte view is reinterpreted as words.
  const bytes = descriptors.data.slice(0, count * DESCRIPTOR_WORDS * 4);
  return {
    width,
    height,
    points,
    descriptors: new Uint32Array(bytes.buffer, bytes.byteOffset, count * DESCRIPTOR_WORDS),
  };
}

/** Horizontal mirror of a 1-channel raster. */
function mirrorRows(pixels: Uint8Array, width: number, height: number): Uint8Array {
  const out = new Uint8Array(pixels.length);
  for (let y = 0; y < height; y++) {
    const row = y * width;
    for (let x = 0; x < width; x++) out[row + x] = pixels[row + width - 1 - x]!;
  }
  return out;
}
