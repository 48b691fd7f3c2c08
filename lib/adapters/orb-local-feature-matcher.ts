import { extractLocalFeatures, verifyCandidates } from '#lib/vision/local-features/index.ts';
import type { FeatureRole, LocalFeatureMatcher } from '#lib/ports.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';

/**
 * Local features with ORB (OpenCV's wasm build, loaded on the first extraction) and the project's own
 * Hamming matcher + RANSAC homography (lib/vision/local-features). Extraction runs on the JS thread;
 * verification of a 20-item shortlist takes ~12–15 ms (docs/benchmarks.md "Geometric re-ranking").
 */
export class OrbLocalFeatureMatcher implements LocalFeatureMatcher {
  extract(image: Buffer, role: FeatureRole): Promise<LocalFeatures> {
    return extractLocalFeatures(image, { role });
  }

  verify(query: LocalFeatures, candidates: readonly (LocalFeatures | undefined)[]): number[] {
    return verifyCandidates(query, candidates).map((v) => v.inliers);
  }
}
