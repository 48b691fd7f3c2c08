/**
 * Geometric verification of a search shortlist: the query's ORB descriptors are matched against every
 * candidate's stored features (both orientations) in one matcher pass, then a RANSAC homography counts the
 * matches that agree on one planar mapping. Inliers, unlike raw matches, are rare between unrelated images.
 */
import { ransacHomography, type RansacOptions } from '#lib/vision/local-features/homography.ts';
import {
  matchDescriptorSets,
  type MatchOptions,
  type MatchPairs,
} from '#lib/vision/local-features/matcher.ts';
import type { FeatureSet, LocalFeatures } from '#lib/vision/local-features/types.ts';

/**
 * Matcher and RANSAC options. Unlike `matchDescriptorSets`, verification cross-checks by default: on the
 * test photos it cut the inliers of unrelated pairs from up to 10 to at most 7–8 while true pairs kept
 * 70–100 % of theirs (tens to hundreds), which widens the gap the `minInliers` threshold sits in.
 */
export type VerifyOptions = MatchOptions & RansacOptions;

/** Outcome for one candidate, from the orientation pairing with the most inliers. */
export interface Verification {
  /** Matches consistent with the best homography. */
  inliers: number;
  /** Ratio-test matches of that orientation pairing. */
  matched: number;
  /** True when the winning pairing had exactly one of query and candidate mirrored (a flipped view). */
  mirrored: boolean;
}

interface Pairing {
  candidate: number;
  query: FeatureSet;
  target: FeatureSet;
  mirrored: boolean;
  pairs?: MatchPairs;
}

/**
 * Verifies each candidate against the query. Each candidate is tried as stored and as its mirror; a
 * query's own mirrored set (extracted with `mirror: true`) is used only for candidates stored without
 * theirs. `undefined` candidates (no stored features) get zero inliers. Results are in candidate order;
 * the same inputs and options always give the same results.
 */
export function verifyCandidates(
  query: LocalFeatures,
  candidates: readonly (LocalFeatures | undefined)[],
  options: VerifyOptions = {},
): Verification[] {
  const pairings: Pairing[] = [];
  candidates.forEach((features, candidate) => {
    if (!features) return;
    pairings.push({ candidate, query: query.original, target: features.original, mirrored: false });
    if (features.mirrored) {
      pairings.push({ candidate, query: query.original, target: features.mirrored, mirrored: true });
    } else if (query.mirrored) {
      pairings.push({ candidate, query: query.mirrored, target: features.original, mirrored: true });
    }
  });

  // One matcher pass per distinct query descriptor set (normally just the original).
  for (const querySet of new Set(pairings.map((p) => p.query))) {
    const group = pairings.filter((p) => p.query === querySet);
    const matches = matchDescriptorSets(
      querySet.descriptors,
      group.map((p) => p.target.descriptors),
      { ...options, crossCheck: options.crossCheck ?? true },
    );
    group.forEach((p, k) => (p.pairs = matches[k]));
  }

  const results: Verification[] = candidates.map(() => ({ inliers: 0, matched: 0, mirrored: false }));
  const byCandidate = new Map<number, Pairing[]>();
  for (const p of pairings) {
    const group = byCandidate.get(p.candidate);
    if (group) group.push(p);
    else byCandidate.set(p.candidate, [p]);
  }
  for (const [candidate, group] of byCandidate) {
    // Most matches first: a pairing with no more matches than the inliers already found cannot win, so the
    // second RANSAC is skipped whenever the first orientation already explains more matches than the
    // other has (the usual case for a true match).
    group.sort((a, b) => (b.pairs?.length ?? 0) - (a.pairs?.length ?? 0));
    let best: Verification = { inliers: 0, matched: 0, mirrored: false };
    for (const p of group) {
      const pairs = p.pairs ?? new Int32Array(0);
      const matched = pairs.length / 2;
      if (matched <= best.inliers) continue;
      const { inliers } = ransacHomography(p.query.points, p.target.points, pairs, options);
      if (inliers > best.inliers || (best.inliers === 0 && matched > best.matched)) {
        best = { inliers, matched, mirrored: p.mirrored };
      }
    }
    results[candidate] = best;
  }
  return results;
}

/** The inlier count of each candidate (verifyCandidates), in candidate order. */
export function inlierCounts(
  query: LocalFeatures,
  candidates: readonly (LocalFeatures | undefined)[],
  options: VerifyOptions = {},
): number[] {
  return verifyCandidates(query, candidates, options).map((v) => v.inliers);
}
