import { extractLocalFeatures, verifyCandidates } from '#lib/vision/local-features/index.ts';
import { ExtractionPool } from '#lib/vision/local-features/extract-pool.ts';
import type { FeatureRole, LocalFeatureMatcher, PixelBox } from '#lib/ports.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';

/**
 * Local features with ORB (OpenCV's wasm build, loaded on the first extraction, or as soon as an
 * extraction worker starts) and the project's own
 * Hamming matcher + RANSAC homography (lib/vision/local-features). Extraction runs on the JS thread, or
 * with `workers` > 0 on that many worker threads (extract-pool.ts; `LOCAL_FEATURE_WORKERS`); verification
 * of a 20-item shortlist takes ~17–22 ms on the calling thread (docs/benchmarks.md "Keypoint recipe 2").
 */
export class OrbLocalFeatureMatcher implements LocalFeatureMatcher {
  private readonly pool: ExtractionPool | undefined;

  /** @param options.workerEntry a bundled worker entry (extract-pool.ts); the TypeScript one when absent */
  constructor(options: { workers?: number; workerEntry?: string | undefined } = {}) {
    this.pool = options.workers ? new ExtractionPool(options.workers, options.workerEntry) : undefined;
  }

  extract(image: Buffer, role: FeatureRole, region?: PixelBox): Promise<LocalFeatures> {
    if (this.pool) return this.pool.extract(image, role, region);
    return extractLocalFeatures(image, region ? { role, region } : { role });
  }

  /** Stops the extraction workers, if any. */
  close(): Promise<void> {
    return this.pool?.close() ?? Promise.resolve();
  }

  verify(query: LocalFeatures, candidates: readonly (LocalFeatures | undefined)[]): number[] {
    return verifyCandidates(query, candidates).map((v) => v.inliers);
  }
}
