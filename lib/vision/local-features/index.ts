/**
 * Geometric re-ranking: ORB features (extracted with OpenCV's wasm build), a purpose-written Hamming
 * matcher, RANSAC homography verification and score fusion. Ingestion calls `extractLocalFeatures` with
 * role `catalogue` and stores `encodeFeatures(...)`; search extracts the query with role `query`, decodes
 * the shortlist's stored features, and calls `verifyCandidates` then `rerankCandidates`.
 */
export { loadOpenCv } from '#lib/vision/local-features/opencv.ts';
export { CATALOGUE_FEATURES_VERSION } from '#lib/vision/local-features/recipe.ts';
export {
  extractLocalFeatures,
  extractionSize,
  type ExtractOptions,
  type FeatureRole,
} from '#lib/vision/local-features/extract.ts';
export {
  decodeFeatures,
  encodeFeatures,
  FeatureFormatError,
  FEATURES_FORMAT_VERSION,
} from '#lib/vision/local-features/codec.ts';
export {
  hammingDistance,
  matchDescriptorSets,
  type MatchOptions,
  type MatchPairs,
} from '#lib/vision/local-features/matcher.ts';
export {
  ransacHomography,
  type HomographyFit,
  type RansacOptions,
} from '#lib/vision/local-features/homography.ts';
export {
  inlierCounts,
  verifyCandidates,
  type Verification,
  type VerifyOptions,
} from '#lib/vision/local-features/verify.ts';
export {
  fusedScore,
  rerankCandidates,
  type Fused,
  type FusionInput,
  type FusionOptions,
} from '#lib/vision/local-features/fusion.ts';
export {
  DESCRIPTOR_WORDS,
  featureCount,
  type FeatureSet,
  type LocalFeatures,
} from '#lib/vision/local-features/types.ts';
