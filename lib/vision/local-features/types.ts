/**
 * Local features of one image orientation: ORB keypoint positions and their 256-bit rBRIEF descriptors,
 * packed for the matcher (8 × 32-bit words per descriptor, little-endian bytes as OpenCV wrote them).
 */
export interface FeatureSet {
  /** Size of the (resized) image the keypoints were found in; the coordinate frame of `points`. */
  width: number;
  height: number;
  /** x0, y0, x1, y1, … in pixels, quantised to quarter pixels (what the binary format stores). */
  points: Float32Array;
  /** 8 words per keypoint, in the same order as `points`. */
  descriptors: Uint32Array;
}

/** Features of an image and, when extracted, of its horizontal mirror (a flipped query matches it). */
export interface LocalFeatures {
  original: FeatureSet;
  mirrored?: FeatureSet;
}

/** Words per packed 256-bit descriptor. */
export const DESCRIPTOR_WORDS = 8;

/** Number of keypoints in a set. */
export function featureCount(set: FeatureSet): number {
  return set.points.length / 2;
}
