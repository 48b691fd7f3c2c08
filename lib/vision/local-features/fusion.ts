/**
 * Fusing geometric verification with the global-embedding score of a shortlist.
 *
 * Order (the rule measured best in MODELS.md "Re-ranking and regional matching"): candidates with at least
 * `minInliers` inliers come first, by inliers (ties by global score); the rest follow by their calibrated
 * score below, counting their inliers only above `chanceInliers` (ties by global score): a candidate with
 * 8 or 9 inliers is nearly verified and goes ahead of a slightly more similar one, while the few inliers
 * RANSAC finds in noise do not push a product that cannot verify (a smooth one) under textured strangers
 * (docs/quality.md "Unverified candidates by their calibrated score").
 *
 * Score, in [0, 1], meant to read the same across queries:
 * ```
 * geometric = 1 / (1 + exp(-(inliers − inlierMidpoint) / inlierSlope))
 * global    = clamp((cosine − cosineFloor) / (cosineCeiling − cosineFloor), 0, 1)
 * raw       = 1 − (1 − geometric) · (1 − globalWeight · global)        (a noisy-OR of the two)
 * score_i   = min(raw_i, score_{i−1})                                   (down the fused order)
 * ```
 * With the defaults, 20+ inliers alone give ≥ 0.96 and 10 inliers ≥ 0.31; with no geometric support the
 * global evidence alone is capped at `globalWeight` (0.5), because a global cosine on its own was right
 * only ~40 % of the time at rank 1 (MODELS.md). The cosine defaults come from the raw MobileNetV2-mid
 * embedder on the local-features test photos: unrelated pairs median 0.39, p90 0.52, max 0.65; a product
 * and its view in a scene median 0.86, p10 0.71. An unrelated photo (≤ 7 chance inliers) therefore scores
 * ~0.06 typically and ≤ 0.34 at worst, a verified match ≥ 0.9 from ~18 inliers. A pipeline that
 * transforms its global scores (mean-centring, whitening) should pass its own floor and ceiling. Items
 * that cannot verify (untextured or deformable products) stay ≤ 0.5, so a client cut-off above that keeps
 * only geometrically confirmed results. The running minimum keeps scores non-increasing down the list, so
 * a score cut-off never removes an item while keeping one ranked below it.
 */

export interface FusionOptions {
  /** Inliers from which a candidate counts as verified and moves ahead. Default 10. */
  minInliers?: number;
  /**
   * Most inliers an unrelated pair reaches by chance (7 on the local-features test photos, above); an
   * unverified candidate's inliers count in its order only above this. Default 7.
   */
  chanceInliers?: number;
  /** Inlier count at which the geometric evidence is 0.5. Default 12. */
  inlierMidpoint?: number;
  /** Inliers per logistic unit. Default 2.5. */
  inlierSlope?: number;
  /** Global cosine mapped to 0 (typical of unrelated images for the embedder in use). Default 0.4. */
  cosineFloor?: number;
  /** Global cosine mapped to 1 (typical of near-duplicates). Default 0.9. */
  cosineCeiling?: number;
  /** Most the global evidence alone can contribute. Default 0.5. */
  globalWeight?: number;
}

export interface FusionInput {
  /** Global-embedding cosine similarity of the candidate to the query. */
  globalScore: number;
  /** RANSAC inliers from `verifyCandidates`. */
  inliers: number;
}

export type Fused<T> = T & {
  /** Calibrated fused score in [0, 1]. */
  score: number;
  /** Whether the candidate reached `minInliers`. */
  verified: boolean;
};

/** Inliers from which a candidate counts as verified (and leads the list) by default. */
export const MIN_VERIFIED_INLIERS = 10;

const DEFAULTS = {
  minInliers: MIN_VERIFIED_INLIERS,
  chanceInliers: 7,
  inlierMidpoint: 12,
  inlierSlope: 2.5,
  cosineFloor: 0.4,
  cosineCeiling: 0.9,
  globalWeight: 0.5,
} as const;

/** The global cosine's scale when none is given (the raw embedder's). */
export const DEFAULT_COSINE_SCALE = {
  cosineFloor: DEFAULTS.cosineFloor,
  cosineCeiling: DEFAULTS.cosineCeiling,
} as const;

/** The calibrated score of one candidate before the ordering cap (see the module comment). */
export function fusedScore(input: FusionInput, options: FusionOptions = {}): number {
  const o = { ...DEFAULTS, ...options };
  const geometric = 1 / (1 + Math.exp(-(input.inliers - o.inlierMidpoint) / o.inlierSlope));
  const span = o.cosineCeiling - o.cosineFloor;
  const global = Math.min(1, Math.max(0, (input.globalScore - o.cosineFloor) / span));
  return 1 - (1 - geometric) * (1 - o.globalWeight * global);
}

/** What orders an unverified candidate: its calibrated score, counting only inliers above chance. */
function orderScoreOf(candidate: FusionInput, options: FusionOptions): number {
  const chanceInliers = options.chanceInliers ?? DEFAULTS.chanceInliers;
  return candidate.inliers > chanceInliers
    ? fusedScore(candidate, options)
    : fusedScore({ globalScore: candidate.globalScore, inliers: 0 }, options);
}

/**
 * Whether rerankCandidates puts `candidate` before every candidate it was not given that has no
 * inliers and a global score at most `floor` (a group a k-NN cut at that similarity did not return,
 * which would be listed after the given ones): verified, or ordered strictly higher.
 */
export function ranksAboveUnseen(
  candidate: FusionInput,
  floor: number,
  options: FusionOptions = {},
): boolean {
  if (candidate.inliers >= (options.minInliers ?? DEFAULTS.minInliers)) return true;
  const own = orderScoreOf(candidate, options);
  const unseen = fusedScore({ globalScore: floor, inliers: 0 }, options);
  return own > unseen || (own === unseen && candidate.globalScore > floor);
}

/** Re-orders a shortlist by verification and calibrated score and attaches the calibrated score. */
export function rerankCandidates<T extends FusionInput>(
  candidates: readonly T[],
  options: FusionOptions = {},
): Fused<T>[] {
  const minInliers = options.minInliers ?? DEFAULTS.minInliers;
  const ordered = candidates
    .map((candidate, index) => ({
      candidate,
      index,
      verified: candidate.inliers >= minInliers,
      raw: fusedScore(candidate, options),
      // What orders the unverified ones: the same score, without the inliers chance can give.
      orderScore: orderScoreOf(candidate, options),
    }))
    .sort(
      (a, b) =>
        Number(b.verified) - Number(a.verified) ||
        (a.verified ? b.candidate.inliers - a.candidate.inliers : 0) ||
        b.orderScore - a.orderScore ||
        b.candidate.globalScore - a.candidate.globalScore ||
        a.index - b.index,
    );
  let cap = 1;
  return ordered.map(({ candidate, verified, raw }) => {
    cap = Math.min(cap, raw);
    return { ...candidate, score: cap, verified };
  });
}
