import { extractLocalFeatures, inlierCounts } from '#lib/vision/local-features/index.ts';
import { ExtractionPool } from '#lib/vision/local-features/extract-pool.ts';
import type { FeatureRole, LocalFeatureMatcher, PixelBox } from '#lib/ports.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';

/**
 * Shortlists from which verification is split with a worker: under it, sending the features costs about
 * what the worker would save.
 */
const SPLIT_FROM = 6;

/**
 * Local features with ORB (OpenCV's wasm build, loaded on the first extraction, or as soon as an
 * extraction worker starts) and the project's own
 * Hamming matcher + RANSAC homography (lib/vision/local-features). Extraction runs on the JS thread, or
 * with `workers` > 0 on that many worker threads (extract-pool.ts; `LOCAL_FEATURE_WORKERS`), which also take
 * half of each long shortlist's verification (~0.3 ms per candidate; docs/benchmarks.md "Verification
 * split with the extraction worker").
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

  /**
   * With extraction workers, a shortlist of `SPLIT_FROM` candidates or more is verified half on an idle
   * worker, half on this thread at the same time (each candidate's count does not depend on the others');
   * a worker that fails hands its half back to this thread. With every worker busy (other searches'
   * extractions, an import's), all of it stays here rather than wait behind them.
   */
  verify(
    query: LocalFeatures,
    candidates: readonly (LocalFeatures | undefined)[],
  ): number[] | Promise<number[]> {
    if (!this.pool?.hasIdleWorker() || candidates.length < SPLIT_FROM) return inlierCounts(query, candidates);
    const half = Math.ceil(candidates.length / 2);
    const far = candidates.slice(half);
    // The fallback is attached before this thread's half runs: if that throws, the worker's answer
    // must not become an unhandled rejection.
    const there = this.pool.verify(query, far).catch(() => inlierCounts(query, far));
    const here = inlierCounts(query, candidates.slice(0, half));
    return there.then((inliers) => [...here, ...inliers]);
  }
}
