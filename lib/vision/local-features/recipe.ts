/**
 * Version of the catalogue-feature recipe: the extraction settings in `extract.ts` for role `catalogue`
 * and the stored format. Each product keeps the version its features came from (`local_features`), and
 * the next import of its feed extracts them again when it differs, so a recipe change reaches the
 * catalogue feed by feed as feeds are imported again. Until then, search verifies queries against the
 * older features, which still match, only less often. Kept apart from `extract.ts` so that ingestion
 * can compare versions without loading sharp and OpenCV.
 *
 * 1: FAST threshold 20, 500 keypoints per orientation. 2: FAST threshold 7, 800 keypoints.
 */
export const CATALOGUE_FEATURES_VERSION = 2;
