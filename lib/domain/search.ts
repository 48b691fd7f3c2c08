import { DomainError, InvalidImageError, NotFoundError } from '#lib/domain/errors.ts';
import { filterValue, type GroupHit, type Product, vectorDocumentId } from '#lib/domain/products.ts';
import type {
  DetectedObject,
  FeatureRef,
  FeatureStore,
  ImageInspector,
  LocalFeatureMatcher,
  PixelBox,
  ProductStore,
  VectorFilter,
  VectorHit,
  VectorIndex,
  Vision,
  VisualWordHit,
  VisualWordIndex,
} from '#lib/ports.ts';
import { visualWords } from '#lib/vision/local-features/visual-words.ts';
import {
  DEFAULT_COSINE_SCALE,
  fusedScore,
  MIN_VERIFIED_INLIERS,
  ranksAboveUnseen,
  rerankCandidates,
} from '#lib/vision/local-features/fusion.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';
import { REGIONAL_COSINE_SCALE } from '#lib/vision/regional.ts';

/**
 * Search use cases: image search (also the root search), related products and object detection with
 * search. Results are item groups: the best-scoring product of each group with every variant of it.
 *
 * Pipeline of an image query: the global embedding shortlists item groups by cosine similarity (k-NN),
 * and the query's visual words shortlist the groups whose images share the most keypoints with it (the
 * keypoint shortlist, which a large background does not drown); the best `reranking.topN` groups of the
 * first and `reranking.wordTopN` of the second are geometrically verified (the query's local features,
 * extracted while the embedding and k-NN run, against the stored features of each group's best image)
 * and re-ordered: verified groups first by inliers, the rest by calibrated score (similarity, and inliers
 * above chance: fusion.ts), groups beyond the top N after them in similarity order. Image search with
 * `regional` also describes ~75 windows of the photo (lib/vision/regional.ts): their k-NN proposes
 * `regional.topN` more groups to verify, and a group's similarity (for the shortlisted groups) becomes the
 * better of whole image and best window. With
 * `secondLook`, a search where nothing verified looks again at the detector's boxes, each at its own
 * size. Every result carries the calibrated fused score (docs/api.md), which never increases down the
 * list; results under `minScore` are dropped before paging. Stage by stage measurements: docs/quality.md.
 */
export interface SearchDeps {
  images: ImageInspector;
  products: ProductStore;
  vision(): Promise<Vision>;
  vectors(): Promise<VectorIndex>;
  /** Geometric re-ranking of the shortlist; absent (or topN 0): global order, global-only scores. */
  reranking?: Reranking;
  /** Image queries drop results scoring below this (0 or absent keeps all). */
  minScore?: number;
  /**
   * Where the global cosine reads as no evidence / full evidence in the calibrated score; the raw
   * embedder's scale when absent (fusion.ts). Depends on the embedding (projected or not).
   */
  cosineScale?: { cosineFloor: number; cosineCeiling: number };
  /**
   * Image search also embeds the detector's top box and ranks each group by the better of the two
   * similarities (whole image, crop); off when absent.
   */
  detectorCrop?: boolean;
  /**
   * Regional matching of image searches (Vision.regional): the best `topN` groups by their best
   * region's k-NN join the shortlist (verified like the others), and every shortlisted group's global
   * evidence is the better of whole image and best region. Off when absent or when the vision layer has no
   * regional embedder.
   */
  regional?: { topN: number };
  /**
   * Image search's second look: when nothing verified, the detector's `boxes` most confident boxes (score
   * ≥ `minScore`) are extracted again at their own size, and each box's keypoint shortlist (its best
   * `wordTopN` groups) is verified against that box (a small product gets the keypoints the whole
   * photo's raster left it). Needs re-ranking with a word index; off when absent or `boxes` is 0.
   */
  secondLook?: { boxes: number; minScore: number; wordTopN: number };
}

/** What geometric re-ranking needs: the matcher, the catalogue's stored features and the shortlist size. */
export interface Reranking {
  matcher(): Promise<LocalFeatureMatcher>;
  features: FeatureStore;
  /** Best groups by global similarity that are verified and re-ordered. */
  topN: number;
  /**
   * The keypoint shortlist: the best `wordTopN` groups by shared visual words are verified as well, so a
   * product that the whole-image embedding ranks low (a small object in a large scene) can still be found.
   * Unfiltered queries only (the word index knows no product fields). Absent or 0: off.
   */
  words?: VisualWordIndex;
  wordTopN?: number;
}

export interface ImageQuery {
  feedId: string;
  image: Buffer;
  limit: number;
  offset: number;
}

/**
 * Inliers from which a verified candidate is taken as the answer without waiting for the regional
 * evidence (its calibrated score is ≥ 0.96; unrelated pairs stay ≤ 10, docs/quality.md).
 */
const CONFIDENT_INLIERS = 20;

/** Orders by product_id (UTF-16 code units): the tie-break of every list of hits. */
function byProductId(a: { productId: string }, b: { productId: string }): number {
  return a.productId < b.productId ? -1 : a.productId > b.productId ? 1 : 0;
}

/** The refs whose item group is not among `hits`, first of each group only. */
function notIn<T extends ImageRef>(refs: readonly T[], hits: readonly ImageRef[]): T[] {
  const seen = new Set(hits.map((hit) => hit.itemGroupId));
  return refs.filter((ref) => !seen.has(ref.itemGroupId) && (seen.add(ref.itemGroupId), true));
}

/** A catalogue image a side shortlist proposes (keypoint or regional), before its global similarity is read. */
type ImageRef = Pick<VisualWordHit, 'id' | 'productId' | 'itemGroupId'>;

/** Neighbours asked of the vector index per query region (the regional shortlist). */
const REGION_NEIGHBOURS = 5;

/** Largest k asked of the vector index; offset + limit ≤ 1000 groups with a few images each fit. */
const MAX_K = 5000;

interface RankQuery {
  feedId: string;
  /** One or more query vectors; a group's similarity is its best over all of them. */
  vectors: Float32Array[];
  limit: number;
  offset: number;
  filter?: VectorFilter;
  excludeItemGroupIds?: string[];
  /** Local features of the query, when it can be verified (settles to undefined when it cannot). */
  queryFeatures?: Promise<LocalFeatures | undefined>;
  /** Vectors of the query's regions (settles to [] when there are none or they failed). */
  regions?: Promise<Float32Array[]>;
  minScore?: number;
  /** The submitted image and its size (image search only: what the second look crops). */
  image?: { bytes: Buffer; width: number; height: number };
}

/** The stored-features address of a vector document (`${feedId}/${productId}/${imageIndex}`). */
function featureRefOf(feedId: string, hit: VectorHit): FeatureRef {
  const imageIndex = Number(hit.id.slice(hit.id.lastIndexOf('/') + 1));
  return { feedId, productId: hit.productId, imageIndex: Number.isInteger(imageIndex) ? imageIndex : 0 };
}

/**
 * Ranks item groups. Steps:
 * 1. k-NN over the feed (asking for more neighbours while too few groups came back); each group is
 *    represented by its most similar image; groups ordered by similarity, ties by product_id; meanwhile
 *    (unfiltered queries with local features) the keypoint shortlist: the best `reranking.wordTopN`
 *    groups by shared visual words, with their global similarity read from their stored vectors;
 * 2. the top `reranking.topN` groups (one place per photo several share: globalTopOf; the others take
 *    its evidence) and the keypoint shortlist (when the query has local features) are verified against
 *    their stored features: inlier counts, 0 where nothing is stored;
 * 3. with query regions, unless step 2 already verified a group with `CONFIDENT_INLIERS`: the regional
 *    shortlist's groups are verified too, and every verified candidate's similarity becomes the better of
 *    whole image and best region (on the whole image's scale);
 * 3b. with `secondLook`, when still no group has 10 inliers: the detector's boxes are extracted at their
 *    own size and each box's keypoint shortlist verified against it (a group keeps its better count);
 * 3c. the groups showing the same stored image as one of the best verified groups (twinsOf) join the
 *    candidates with that group's evidence;
 * 4. fuse: verified groups (≥ 10 inliers) first by inliers, then the rest by calibrated score (their
 *    similarity and any inliers above chance, fusion.ts); candidates whose own calibrated score is
 *    under `minScore` are dropped, then scores are capped down the list so they never increase; equal
 *    evidence in product_id order;
 * 5. page with offset/limit and hydrate only that page (one batch read plus a variants query per real
 *    item group). The same request always yields the same page.
 */
async function rankGroups(deps: SearchDeps, query: RankQuery): Promise<GroupHit[]> {
  const vectors = await deps.vectors();
  const topN = query.queryFeatures && deps.reranking ? deps.reranking.topN : 0;
  // Settles to [] on any failure: the keypoint shortlist may only add candidates, never fail a search.
  const wordGroups = keypointShortlist(deps, query).catch((): VisualWordHit[] => []);
  const window = Math.max(query.offset + query.limit, topN);
  const read = storedVectorReader(vectors);
  const { nearest, deep, globalTop, globalStored, copies } = await globalShortlist(
    deps,
    query,
    vectors,
    read,
    window,
    topN,
  );
  const confirmedHits = copies.map(({ hit }) => hit);
  // Groups the keypoint shortlist adds, then the regional one: verified with the global top N on the
  // image whose words or region matched, and represented by that image wherever they rank (inside the
  // k-NN window or not), so that a group's score and product never depend on offset/limit. The first
  // verification runs as soon as the words are in, while the regional pass is still on the model thread.
  const wordAdded = await similarityOf(
    read,
    query.vectors,
    notIn(await wordGroups, [...globalTop, ...confirmedHits]),
  );
  const firstVerified = [...globalTop, ...wordAdded];
  const firstInliers = await verifyShortlist(deps, query, firstVerified, globalStored);
  // A confident verification settles the first place whatever the regions say: the search answers
  // without waiting for them (the pass finishes unused). Decided by inlier counts only, so the same
  // request always gives the same page.
  const confident = firstInliers.some((n) => n >= CONFIDENT_INLIERS);
  // The regional shortlist only starts here (its k-NN needs the regions, which come last anyway), so a
  // confident search sends no regional queries; like the keypoint one, it never fails a search.
  const regionGroups = confident
    ? []
    : await regionalShortlist(deps, query, vectors).catch((): ImageRef[] => []);
  const regionAdded = await similarityOf(
    read,
    query.vectors,
    notIn(regionGroups, [...firstVerified, ...confirmedHits]),
  );
  const regionInliers = await verifyShortlist(deps, query, regionAdded);
  // Nothing verified: the second look. Its detection starts only now: started beside the regional pass
  // it answered photos that verify nothing up to ~30 ms sooner, but slowed the many that verify there
  // by 10–35 ms (bench:search, docs/benchmarks.md "Second look").
  const unverified = ![...firstInliers, ...regionInliers].some((n) => n >= MIN_VERIFIED_INLIERS);
  const lookBoxes = unverified ? secondLookBoxes(deps, query) : undefined;
  const looked = lookBoxes
    ? await secondLook(
        deps,
        query,
        read,
        [...firstVerified, ...regionAdded, ...confirmedHits],
        await lookBoxes,
      ).catch(() => undefined)
    : undefined;
  const verified = [...firstVerified, ...regionAdded, ...(looked?.added ?? [])];
  const inliers = [...firstInliers, ...regionInliers];
  // A group the second look verified keeps the better of its two counts.
  const inliersOf = new Map(
    verified.map((hit, i) => [
      hit.itemGroupId,
      Math.max(inliers[i] ?? 0, looked?.inliers.get(hit.itemGroupId) ?? 0),
    ]),
  );
  // A copy a box verified shows its kept group's image: that evidence is the group's (and so its copies').
  for (const { hit, of } of copies) {
    const boxed = looked?.inliers.get(hit.itemGroupId) ?? 0;
    if (boxed > (inliersOf.get(of) ?? 0)) inliersOf.set(of, boxed);
  }
  // Regional evidence for the verified candidates only: they are the same groups whatever the page, so
  // the order stays one list that every page is a slice of (the rest keep their whole-image order).
  // Meanwhile the groups showing a verified group's image (twinsOf), found whatever the page too.
  const [regional, twins] = await Promise.all([
    confident
      ? []
      : regionalSimilarity(read, query.regions, verified, deps.cosineScale ?? DEFAULT_COSINE_SCALE),
    twinsOf(vectors, read, query, verified, inliersOf, confirmedHits).catch((): Twin[] => []),
  ]);
  const regionalOf = new Map(verified.map((hit, i) => [hit.itemGroupId, regional[i]]));
  // A twin or a copy has its verified group's evidence: the same image, so the same inliers and regions.
  for (const { hit, of } of [...copies, ...twins]) {
    inliersOf.set(hit.itemGroupId, inliersOf.get(of) ?? 0);
    regionalOf.set(hit.itemGroupId, regionalOf.get(of));
  }
  // The groups the walk took or set aside past the top N are candidates whatever the window, like the
  // side shortlists' ones (those before it are inside every window). No list adds one of them again: the
  // kept ones are verified, and the copies are left out of every other list (confirmedHits).
  const added = [
    ...deep,
    ...wordAdded,
    ...regionAdded,
    ...(looked?.added ?? []),
    ...twins.map(({ hit }) => hit),
  ];
  // The window counts only the groups no shortlist added: the added ones are candidates whatever the
  // window, so counting them let a smaller window leave out a group that a larger one ranked above one
  // of them (paging by 3 repeated a product and never showed another).
  const addedGroups = new Set(added.map((hit) => hit.itemGroupId));
  const notAdded = (groups: VectorHit[]) => groups.filter((hit) => !addedGroups.has(hit.itemGroupId));
  const others = notAdded(nearest.groups);
  const candidatesOf = (nearestOthers: VectorHit[]) =>
    [...nearestOthers.slice(0, window), ...added].map((hit) => ({
      hit,
      globalScore: Math.max(hit.similarity, regionalOf.get(hit.itemGroupId) ?? Number.NEGATIVE_INFINITY),
      inliers: inliersOf.get(hit.itemGroupId) ?? 0,
    }));
  const minScore = query.minScore ?? 0;
  const scale = deps.cosineScale ?? {};
  let candidates = candidatesOf(others);
  // Fewer than `window` other groups found (the added ones took the k-NN's places): the page is complete
  // when enough candidates rank above any group the k-NN did not return (all under its last similarity);
  // otherwise it is asked for more. Decided by scores only, so a request always gives the same page.
  if (others.length < window && !nearest.exhausted) {
    const sure = candidates.filter(
      (c) => fusedScore(c, scale) >= minScore && ranksAboveUnseen(c, nearest.floor, scale),
    ).length;
    const unseenMayShow = fusedScore({ globalScore: nearest.floor, inliers: 0 }, scale) >= minScore;
    if (sure < query.offset + query.limit && unseenMayShow)
      candidates = candidatesOf(
        notAdded((await nearestGroups(vectors, query, window + added.length)).groups),
      );
  }
  // Verified groups lead and cap the scores below them: one under the cut-off on its own evidence is
  // dropped first, or it would pull every better-scoring unverified group under the cut-off with it.
  // Equal evidence keeps the order it is given in: by product_id, not by which list found the group.
  const inProductIdOrder = [...candidates].sort((a, b) => byProductId(a.hit, b.hit));
  const ranked = rerankCandidates(
    minScore > 0 ? inProductIdOrder.filter((c) => fusedScore(c, scale) >= minScore) : inProductIdOrder,
    scale,
  )
    .map(({ hit, score }) => ({ hit, score: Math.round(score * 1e6) / 1e6 }))
    .filter(({ score }) => score >= minScore)
    .slice(query.offset, query.offset + query.limit);

  // One batch read for the best products; only real item groups need a variants query.
  const bestProducts = await deps.products.getMany(
    query.feedId,
    ranked.map(({ hit }) => hit.productId),
  );
  const groups = await Promise.all(
    ranked.map(async ({ hit, score }) => {
      const product = bestProducts.get(hit.productId);
      // A product deleted between the index query and now is simply left out.
      if (!product) return undefined;
      const variants = product.item_group_id
        ? await deps.products.listGroup(query.feedId, product.group)
        : [product];
      return { product, variants, score };
    }),
  );
  return groups.filter((g): g is GroupHit => g !== undefined);
}

/**
 * The k-NN's groups (enough for the page's window) and the global top N to verify (globalTopOf: one place
 * per photo several groups share), with its stored features being read (in order; undefined when nothing
 * is verified), the copies of its groups that take their evidence, and the groups the walk went past the
 * top N (`deep`: candidates whatever the window).
 */
async function globalShortlist(
  deps: SearchDeps,
  query: RankQuery,
  vectors: VectorIndex,
  read: VectorReader,
  window: number,
  topN: number,
): Promise<{
  nearest: Awaited<ReturnType<typeof nearestGroups>>;
  deep: VectorHit[];
  globalTop: VectorHit[];
  globalStored: StoredFeatures | undefined;
  copies: Twin[];
}> {
  let nearest = await nearestGroups(vectors, query, window);
  let top = globalTopOf(nearest.groups, topN);
  // The walk past copies ran off the groups the k-NN gave: asked again for as many as it may walk, so
  // that the top is the same whatever the page (the window sizes the k-NN).
  if (top.ranOut && !nearest.exhausted) {
    nearest = await nearestGroups(vectors, query, Math.max(window, COPY_WALK * topN));
    top = globalTopOf(nearest.groups, topN);
  }

  // The global top's stored features are read now, while the query's keypoints are still being
  // extracted and its words looked up: in AWS each uncached one is an S3 GET.
  const firstKept = top.kept;
  let globalStored = storedFeatures(deps, query, firstKept);
  // Their vectors too, which the twin lookup and the regional evidence of a verified one read: beside the
  // features' reads rather than one more round trip after verification, at the cost of one unused read
  // (an mget on OpenSearch) when nothing verifies. With the probable copies', which are checked now.
  if (globalStored) void read([...firstKept, ...top.copies.map(({ hit }) => hit)].map((hit) => hit.id));
  const confirmed = await confirmCopies(read, top.copies);
  // A probable copy whose vector differs after all (or cannot be read) is no copy: walked again, it keeps
  // its place, as without the walk (so the top N verifies no group it would not have, and the side
  // shortlists none the top N would have). The first walk's kept groups it still keeps are a prefix of
  // them: their features are being read.
  let globalTop = firstKept;
  if (confirmed.length < top.copies.length) {
    top = globalTopOf(nearest.groups, topN, new Map(confirmed.map(({ hit, of }) => [hit.itemGroupId, of])));
    const stillKept = firstKept.filter((hit) => top.kept.includes(hit));
    globalTop = [...stillKept, ...top.kept.filter((hit) => !firstKept.includes(hit))];
    const features = globalStored?.features.then((all) => all.slice(0, stillKept.length));
    features?.catch(() => undefined);
    globalStored = features && { count: stillKept.length, features };
  }
  const copies = top.copies.map(({ hit, of }): Twin => ({ hit, of: of.itemGroupId }));
  return { nearest, deep: top.deep, globalTop, globalStored, copies };
}

/** How far the global top is walked past copies of one photo, in groups per verified place (topN). */
const COPY_WALK = 4;

/** A group set aside from the global top as showing the same image as the kept group `of`. */
interface ProbableCopy {
  hit: VectorHit;
  of: VectorHit;
}

/**
 * The global top N to verify, one place per photo: a group as similar to the query as the group kept
 * before it (one stored vector answers one similarity: a photo several products share) is set aside as
 * its probable copy and the next group takes the place, down to the COPY_WALK × topN-th group. Without
 * this, twelve products sharing one photo took all ten places, and a product just under them was never
 * verified. `deep`: the groups walked past the first topN (kept or set aside); `ranOut`: the walk reached
 * the end of `groups` before its bounds. With `confirmed`, only the groups it maps (to their kept group)
 * are set aside.
 */
function globalTopOf(
  groups: readonly VectorHit[],
  topN: number,
  confirmed?: ReadonlyMap<string, VectorHit>,
): { kept: VectorHit[]; copies: ProbableCopy[]; deep: VectorHit[]; ranOut: boolean } {
  const kept: VectorHit[] = [];
  const copies: ProbableCopy[] = [];
  let depth = 0;
  for (; depth < groups.length && depth < COPY_WALK * topN && kept.length < topN; depth += 1) {
    const hit = groups[depth]!;
    const last = kept.at(-1);
    const of = confirmed
      ? confirmed.get(hit.itemGroupId)
      : last && hit.similarity === last.similarity
        ? last
        : undefined;
    if (of) copies.push({ hit, of });
    else kept.push(hit);
  }
  const ranOut = kept.length < topN && depth === groups.length && depth < COPY_WALK * topN;
  return { kept, copies, deep: groups.slice(topN, depth), ranOut };
}

/**
 * The probable copies whose stored vector is their kept group's (to TWIN_SIMILARITY); not the others (a
 * coincidence of similarities, or a vector that cannot be read).
 */
async function confirmCopies(read: VectorReader, copies: readonly ProbableCopy[]): Promise<ProbableCopy[]> {
  if (copies.length === 0) return [];
  const stored = await read(copies.flatMap(({ hit, of }) => [hit.id, of.id]));
  return copies.filter(({ hit, of }) => {
    const vector = stored.get(hit.id);
    const ofVector = stored.get(of.id);
    return !!vector && !!ofVector && bestCosine([ofVector], vector) >= TWIN_SIMILARITY;
  });
}

/**
 * The feed's item groups nearest to the query's vectors, at least `minGroups` of them when the feed has
 * them: each represented by its most similar image, by similarity then product_id. The k-NN asks for
 * 3 × minGroups + 20 images and four times more while that gives too few groups; `exhausted` when no
 * group can be missing (a list came back shorter than asked, or MAX_K was reached); `floor`: no group it
 * did not return has an image more similar than that.
 */
async function nearestGroups(
  vectors: VectorIndex,
  query: RankQuery,
  minGroups: number,
): Promise<{ groups: VectorHit[]; exhausted: boolean; floor: number }> {
  let k = Math.min(MAX_K, minGroups * 3 + 20);
  for (;;) {
    const lists = await Promise.all(
      query.vectors.map((vector) =>
        vectors.search({
          feedId: query.feedId,
          vector,
          k,
          ...(query.filter && Object.keys(query.filter).length > 0 ? { filter: query.filter } : {}),
          ...(query.excludeItemGroupIds ? { excludeItemGroupIds: query.excludeItemGroupIds } : {}),
        }),
      ),
    );
    const best = new Map<string, VectorHit>();
    for (const hit of lists.flat()) {
      const current = best.get(hit.itemGroupId);
      if (
        !current ||
        hit.similarity > current.similarity ||
        (hit.similarity === current.similarity && hit.productId < current.productId)
      ) {
        best.set(hit.itemGroupId, hit);
      }
    }
    // One list shorter than k holds every image its query can see: no group is left out then.
    const exhausted = lists.some((hits) => hits.length < k) || k >= MAX_K;
    if (best.size >= minGroups || exhausted) {
      const groups = [...best.values()].sort((a, b) => b.similarity - a.similarity || byProductId(a, b));
      // A group not returned has no image above any list's last similarity.
      const floor = Math.max(
        ...lists.map((hits) => hits[hits.length - 1]?.similarity ?? Number.NEGATIVE_INFINITY),
      );
      return { groups, exhausted, floor };
    }
    k = Math.min(MAX_K, k * 4);
  }
}

/** Whether a query gets a keypoint shortlist: a word index, `wordTopN` > 0, query features, no filter. */
function hasKeypointShortlist(deps: SearchDeps, query: RankQuery): boolean {
  const filtered = query.filter !== undefined && Object.keys(query.filter).length > 0;
  return !!deps.reranking?.words && (deps.reranking.wordTopN ?? 0) > 0 && !!query.queryFeatures && !filtered;
}

/**
 * The best `wordTopN` item groups by shared visual words (one image each, its best), or none: when the
 * query has no local features, is filtered, or no word index is configured. Starts as soon as the
 * query's features are ready (extracted while the embedding ran), so it overlaps the k-NN; a failing
 * word index only costs the extra candidates, never the search.
 */
async function keypointShortlist(
  deps: SearchDeps,
  query: RankQuery,
  wordTopN = deps.reranking?.wordTopN ?? 0,
): Promise<VisualWordHit[]> {
  const reranking = deps.reranking;
  if (!hasKeypointShortlist(deps, query) || !reranking?.words) return [];
  const features = await query.queryFeatures;
  if (!features) return [];
  const hits = await reranking.words
    .search({
      feedId: query.feedId,
      words: visualWords(features),
      k: wordTopN * 3,
      ...(query.excludeItemGroupIds ? { excludeItemGroupIds: query.excludeItemGroupIds } : {}),
    })
    .catch(() => []);
  const best = new Map<string, VisualWordHit>();
  for (const hit of hits) if (!best.has(hit.itemGroupId)) best.set(hit.itemGroupId, hit);
  return [...best.values()].slice(0, wordTopN);
}

/**
 * The best `regional.topN` item groups by their best region: a k-NN per region of the query, each
 * group scored by its most similar image to any region. None when regional matching is off, the query
 * has no regions or is filtered (like the keypoint shortlist, it serves image search).
 */
async function regionalShortlist(
  deps: SearchDeps,
  query: RankQuery,
  vectors: VectorIndex,
): Promise<ImageRef[]> {
  const topN = deps.regional?.topN ?? 0;
  const filtered = query.filter !== undefined && Object.keys(query.filter).length > 0;
  if (topN <= 0 || !query.regions || filtered) return [];
  const windows = await query.regions;
  if (windows.length === 0) return [];
  const lists = await vectors.searchMany(
    windows.map((vector) => ({
      feedId: query.feedId,
      vector,
      k: REGION_NEIGHBOURS,
      ...(query.excludeItemGroupIds ? { excludeItemGroupIds: query.excludeItemGroupIds } : {}),
    })),
  );
  const best = new Map<string, VectorHit>();
  for (const hit of lists.flat()) {
    const current = best.get(hit.itemGroupId);
    if (!current || hit.similarity > current.similarity) best.set(hit.itemGroupId, hit);
  }
  return [...best.values()]
    .sort((a, b) => b.similarity - a.similarity || byProductId(a, b))
    .slice(0, topN)
    .map(({ id, productId, itemGroupId }) => ({ id, productId, itemGroupId }));
}

/** Reads stored vectors by document id. */
type VectorReader = (ids: readonly string[]) => Promise<Map<string, Float32Array>>;

/**
 * A reader that fetches each stored vector at most once per search, reads in flight included: the side
 * shortlists, the regional evidence and the twin lookup ask for overlapping images (one round trip each
 * on OpenSearch). Unreadable vectors are simply missing from the answer: they cost candidates or
 * evidence, never the search.
 */
function storedVectorReader(vectors: VectorIndex): VectorReader {
  const known = new Map<string, Promise<Float32Array | undefined>>();
  return async (ids) => {
    const wanted = [...new Set(ids)];
    const missing = wanted.filter((id) => !known.has(id));
    if (missing.length > 0) {
      const read = vectors.getVectors(missing).catch(() => new Map<string, Float32Array>());
      for (const id of missing)
        known.set(
          id,
          read.then((vectors) => vectors.get(id)),
        );
    }
    const answer = new Map<string, Float32Array>();
    for (const id of wanted) {
      const vector = await known.get(id);
      if (vector) answer.set(id, vector);
    }
    return answer;
  };
}

/** Distinct verified images (most inliers first) whose twins are looked for: one k-NN query each. */
const TWIN_SOURCES = 5;
/** Neighbours asked per verified image, outside the verified groups: how many groups can be its twins. */
const TWIN_NEIGHBOURS = 24;
/**
 * Similarity from which two stored vectors are the same image to the model. Both indexes answer exact
 * single-precision similarities (usearch re-scores its graph's hits from the stored rows; OpenSearch's
 * score translation keeps ~2e-7), and equal vectors come back at 1 to ~1e-7.
 */
const TWIN_SIMILARITY = 1 - 1e-5;

/** A group showing the same image as the verified group `of` (its hit: that image, `of`'s similarity). */
interface Twin {
  hit: VectorHit;
  of: string;
}

/**
 * The groups, besides the verified ones, whose image has the same stored vector as a verified group's
 * image: a photo several products share (a product listed again under another id, one photo for several
 * colours). Verification reaches only the best groups by similarity then product_id, so without this,
 * of twelve products showing the query's own photo the two whose ids sorted last scored as unverified
 * (0.5 beside ten 1s), though where an id sorts is no evidence. Looked for by a k-NN around each verified
 * image (under the query's filter and exclusions, and leaving out the verified groups, whose variants
 * often share their photo), not in the page's window: the twins, like the shortlists' groups, are
 * candidates whatever the page, so every page is a slice of one list.
 */
async function twinsOf(
  vectors: VectorIndex,
  read: VectorReader,
  query: RankQuery,
  verified: readonly VectorHit[],
  inliersOf: ReadonlyMap<string, number>,
  /** Groups that have a verified group's evidence already (confirmed copies of the global top). */
  settled: readonly VectorHit[] = [],
): Promise<Twin[]> {
  const inliers = (hit: VectorHit) => inliersOf.get(hit.itemGroupId) ?? 0;
  const best = verified
    .filter((hit) => inliers(hit) >= MIN_VERIFIED_INLIERS)
    .sort((a, b) => inliers(b) - inliers(a) || byProductId(a, b));
  if (best.length === 0) return [];
  const stored = await read(best.map((hit) => hit.id));
  // One query per image: verified groups showing one photo would ask the same question.
  const sources: { hit: VectorHit; vector: Float32Array }[] = [];
  for (const hit of best) {
    const vector = stored.get(hit.id);
    if (vector && !sources.some((source) => bestCosine([source.vector], vector) >= TWIN_SIMILARITY))
      sources.push({ hit, vector });
    if (sources.length === TWIN_SOURCES) break;
  }
  const known = new Set([...verified, ...settled].map((hit) => hit.itemGroupId));
  const excluded = [...(query.excludeItemGroupIds ?? []), ...known];
  const filtered = query.filter !== undefined && Object.keys(query.filter).length > 0;
  const lists = await vectors.searchMany(
    sources.map(({ vector }) => ({
      feedId: query.feedId,
      vector,
      k: TWIN_NEIGHBOURS,
      ...(filtered ? { filter: query.filter } : {}),
      excludeItemGroupIds: excluded,
    })),
  );
  const twins: Twin[] = [];
  lists.forEach((hits, i) => {
    const source = sources[i]!.hit;
    for (const hit of hits) {
      if (hit.similarity < TWIN_SIMILARITY || known.has(hit.itemGroupId)) continue;
      known.add(hit.itemGroupId);
      twins.push({ hit: { ...hit, similarity: source.similarity }, of: source.itemGroupId });
    }
  });
  return twins;
}

/** The largest dot product of `vector` with any of `others` (cosines: all are unit vectors). */
function bestCosine(others: readonly Float32Array[], vector: Float32Array): number {
  let best = Number.NEGATIVE_INFINITY;
  for (const other of others) {
    let dot = 0;
    for (let d = 0; d < other.length; d += 1) dot += other[d]! * vector[d]!;
    if (dot > best) best = dot;
  }
  return best;
}

/** Vector hits for word hits: the global similarity of each image (best over the query vectors). */
async function similarityOf(
  read: VectorReader,
  queryVectors: readonly Float32Array[],
  hits: readonly ImageRef[],
): Promise<VectorHit[]> {
  if (hits.length === 0) return [];
  const stored = await read(hits.map((hit) => hit.id));
  return hits.flatMap(({ id, productId, itemGroupId }) => {
    const vector = stored.get(id);
    // An image without a vector (deleted meanwhile) cannot be ranked: left out.
    if (!vector) return [];
    return [{ id, productId, itemGroupId, similarity: bestCosine(queryVectors, vector) }];
  });
}

/**
 * Per hit, the best cosine between its stored vector and any of the query's regions, mapped from
 * `REGIONAL_COSINE_SCALE` onto the whole image's scale (the best of ~75 windows runs higher than one
 * whole-image cosine, for unrelated photos too), so the two compare and calibrate alike. Empty when the
 * query has no regions; a hit whose vector cannot be read gets no regional evidence.
 */
async function regionalSimilarity(
  read: VectorReader,
  regions: Promise<Float32Array[]> | undefined,
  hits: readonly VectorHit[],
  whole: { cosineFloor: number; cosineCeiling: number },
): Promise<number[]> {
  const windows = regions ? await regions : [];
  if (windows.length === 0 || hits.length === 0) return [];
  const stored = await read(hits.map((hit) => hit.id));
  const regional = REGIONAL_COSINE_SCALE;
  return hits.map(({ id }) => {
    const vector = stored.get(id);
    if (!vector) return Number.NEGATIVE_INFINITY;
    return (
      whole.cosineFloor +
      ((bestCosine(windows, vector) - regional.cosineFloor) /
        (regional.cosineCeiling - regional.cosineFloor)) *
        (whole.cosineCeiling - whole.cosineFloor)
    );
  });
}

/** Share of a detected box's width and height added on each side before its second look. */
const SECOND_LOOK_MARGIN = 0.15;

/**
 * Inliers from which a box's verification counts. A box brought up to the query recipe's size gives its
 * region more keypoints than the whole photo did, so chance matches reach 10 more often: on the dinner
 * photo a person box verified an unrelated demo product with 10–11 inliers, over the right unverified
 * first result. On the benchmark 12 gives the figures of 10 (15 loses 3 queries at rank 1).
 */
const SECOND_LOOK_MIN_INLIERS = 12;

/** A box covering more than this share of the photo is not looked at again (the first look was it). */
const SECOND_LOOK_MAX_AREA = 0.5;

/**
 * Starts detecting the boxes of the second look (`SearchDeps.secondLook`): the detector's most confident
 * ones, leaving out any that covers most of the photo. Undefined when there is no second look for this
 * query (off, not an image search, filtered, no keypoint shortlist or no query features); [] when
 * detection fails.
 */
function secondLookBoxes(deps: SearchDeps, query: RankQuery): Promise<PixelBox[]> | undefined {
  const look = deps.secondLook;
  const image = query.image;
  if (!look || look.boxes <= 0 || !image || !hasKeypointShortlist(deps, query)) return undefined;
  return deps
    .vision()
    .then(({ detector }) => detector.detect(image.bytes, { scoreThreshold: look.minScore }))
    .then((objects) =>
      objects
        .map(({ box }) => box)
        .filter(
          ([x0, y0, x1, y1]) => (x1 - x0) * (y1 - y0) <= SECOND_LOOK_MAX_AREA * image.width * image.height,
        )
        .slice(0, look.boxes),
    )
    .catch((): PixelBox[] => []);
}

/**
 * The second look, for a search where nothing verified: each box, widened by `SECOND_LOOK_MARGIN`, is
 * extracted at its own size (brought up to the query recipe's short side), and its keypoint shortlist
 * verified against it. Returns the groups it verifies (≥ `SECOND_LOOK_MIN_INLIERS`): their best inliers
 * over the boxes, and those it adds to the candidates, with their global similarity. The boxes' steps
 * overlap where they wait (extraction workers, stores); a box that fails adds nothing.
 */
async function secondLook(
  deps: SearchDeps,
  query: RankQuery,
  read: VectorReader,
  verified: readonly VectorHit[],
  boxes: readonly PixelBox[],
): Promise<{ added: VectorHit[]; inliers: Map<string, number> }> {
  const none = { added: [], inliers: new Map<string, number>() };
  const image = query.image;
  const look = deps.secondLook;
  if (boxes.length === 0 || !image || !deps.reranking || !look) return none;
  const matcher = await deps.reranking.matcher();
  // A box whose extraction, word lookup or verification fails only loses its own evidence.
  const looks = await Promise.all(
    boxes
      .map(async ([x0, y0, x1, y1]) => {
        const dx = (x1 - x0) * SECOND_LOOK_MARGIN;
        const dy = (y1 - y0) * SECOND_LOOK_MARGIN;
        const features = await matcher.extract(image.bytes, 'query', [x0 - dx, y0 - dy, x1 + dx, y1 + dy]);
        const boxQuery = { ...query, queryFeatures: Promise.resolve(features) };
        const shortlist = await keypointShortlist(deps, boxQuery, look.wordTopN);
        const hits = await similarityOf(read, query.vectors, shortlist);
        const inliers = await verifyShortlist(deps, boxQuery, hits);
        return hits.map((hit, i) => ({ hit, inliers: inliers[i] ?? 0 }));
      })
      .map((pending) => pending.catch(() => [])),
  );
  // Only what a box verifies counts: a group it proposes but cannot verify would only be ranked by the
  // global evidence the first look has already weighed (and could push that look's best down).
  const inliers = new Map<string, number>();
  const best = new Map<string, VectorHit>();
  for (const { hit, inliers: n } of looks.flat()) {
    if (n >= SECOND_LOOK_MIN_INLIERS && n > (inliers.get(hit.itemGroupId) ?? -1)) {
      inliers.set(hit.itemGroupId, n);
      best.set(hit.itemGroupId, hit);
    }
  }
  const added = notIn([...best.values()], verified);
  return { added, inliers };
}

/**
 * Inliers of each shortlisted hit against the query, one count per hit (all 0 when the query cannot be
 * verified), so that counts of several shortlists line up with their hits when concatenated.
 */
async function verifyShortlist(
  deps: SearchDeps,
  query: RankQuery,
  hits: VectorHit[],
  /** Stored features of the first hits, already being read (storedFeatures). */
  prefetched?: StoredFeatures,
): Promise<number[]> {
  const none = hits.map(() => 0);
  if (!deps.reranking || !query.queryFeatures || hits.length === 0) return none;
  const rest = storedFeatures(deps, query, hits.slice(prefetched?.count ?? 0));
  const [queryFeatures, first, others, matcher] = await Promise.all([
    query.queryFeatures,
    prefetched?.features ?? [],
    rest?.features ?? [],
    // A matcher that cannot be built (its workers cannot start) means "cannot verify", like a query
    // whose features failed: never a failed search.
    deps.reranking.matcher().catch(() => undefined),
  ]);
  if (!queryFeatures || !matcher) return none;
  return matcher.verify(queryFeatures, [...first, ...others]);
}

interface StoredFeatures {
  count: number;
  features: Promise<(LocalFeatures | undefined)[]>;
}

/**
 * Starts reading the stored features of `hits` for verification; undefined when the search verifies
 * nothing. A failed read still fails the search, at verification: until then it is marked handled so
 * that it cannot end the process as an unhandled rejection.
 */
function storedFeatures(deps: SearchDeps, query: RankQuery, hits: VectorHit[]): StoredFeatures | undefined {
  if (!deps.reranking || !query.queryFeatures || hits.length === 0) return undefined;
  const features = deps.reranking.features.getMany(hits.map((hit) => featureRefOf(query.feedId, hit)));
  features.catch(() => undefined);
  return { count: hits.length, features };
}

/**
 * Starts extracting the query's local features (on the JS thread, while the embedder runs on its own);
 * any failure means "cannot verify", never a failed search. Undefined when re-ranking is off.
 */
function startQueryFeatures(deps: SearchDeps, image: Buffer): Promise<LocalFeatures | undefined> | undefined {
  const reranking = deps.reranking;
  if (!reranking || reranking.topN <= 0) return undefined;
  return reranking
    .matcher()
    .then((matcher) => matcher.extract(image, 'query'))
    .catch(() => undefined);
}

/**
 * Starts the query's regional descriptors (on the regional graph's own session, while the whole image
 * is embedded); undefined when regional matching is off, [] on any failure (it only adds evidence).
 */
function startRegions(deps: SearchDeps, image: Buffer): Promise<Float32Array[]> | undefined {
  if (!deps.regional) return undefined;
  return deps
    .vision()
    .then((vision) => vision.regional?.regions(image) ?? [])
    .catch((): Float32Array[] => []);
}

/**
 * Runs `work` on the image of request field `field`: a refusal of that image by any stage (the
 * inspection, or a decode that fails past a readable header) names the field.
 */
async function ofField<T>(field: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    throw error instanceof InvalidImageError ? error.forField(field) : error;
  }
}

async function embedOne(deps: SearchDeps, image: Buffer): Promise<Float32Array> {
  const { embedder } = await deps.vision();
  const [vector] = await embedder.embed([image]);
  return vector!;
}

/**
 * The query vectors of an image search: the whole image and, with `detectorCrop`, the crop of the
 * detector's most confident box (detection runs while the whole image is embedded).
 */
async function queryVectors(deps: SearchDeps, image: Buffer): Promise<Float32Array[]> {
  if (!deps.detectorCrop) return [await embedOne(deps, image)];
  const { embedder, detector } = await deps.vision();
  const [[whole], objects] = await Promise.all([embedder.embed([image]), detector.detect(image)]);
  const top = objects.reduce<DetectedObject | undefined>(
    (a, b) => (!a || b.score > a.score ? b : a),
    undefined,
  );
  if (!top) return [whole!];
  const [crop] = await embedder.embed(await deps.images.crops(image, [top.box]));
  return [whole!, crop!];
}

/**
 * Image search. Steps: inspect the image (format, pixel limit); an empty feed answers [] without loading
 * the models; start the query's local-feature extraction, embed the image meanwhile (with
 * `detectorCrop`, also its top detected box: a group's similarity is the better of the two); rank item groups
 * (k-NN shortlist, geometric re-ranking, calibrated score, minimum-score cut-off); page with offset/limit.
 */
export function searchByImage(deps: SearchDeps, query: ImageQuery): Promise<GroupHit[]> {
  return ofField('imageData', () => searchImage(deps, query));
}

async function searchImage(deps: SearchDeps, query: ImageQuery): Promise<GroupHit[]> {
  await deps.images.inspect(query.image);
  if (!(await deps.products.hasProducts(query.feedId))) return [];
  // Every stage below decodes the image: a large one is scaled down once first.
  const { bytes: image, width, height } = await deps.images.bounded(query.image);
  const queryFeatures = startQueryFeatures(deps, image);
  const regions = startRegions(deps, image);
  return rankGroups(deps, {
    feedId: query.feedId,
    vectors: await queryVectors(deps, image),
    limit: query.limit,
    offset: query.offset,
    ...(queryFeatures ? { queryFeatures } : {}),
    ...(regions ? { regions } : {}),
    ...(deps.minScore ? { minScore: deps.minScore } : {}),
    image: { bytes: image, width, height },
  });
}

export interface RelatedQuery {
  feedId: string;
  productId?: string;
  image?: Buffer;
  fallback?: Buffer;
  limit: number;
  offset: number;
  filters?: { key: string; value: string | number | boolean }[];
  context?: { category?: string };
}

/** filters → index filter: AND across keys, OR within a key; context.category narrows unless a category filter is given. */
export function relatedFilter(
  filters: RelatedQuery['filters'],
  context: RelatedQuery['context'],
): VectorFilter {
  const filter: VectorFilter = {};
  for (const { key, value } of filters ?? []) {
    const name = key.startsWith('metadata.') ? key.slice('metadata.'.length) : key;
    const values = (filter[key] ??= []);
    const v = filterValue(name, String(value));
    if (!values.includes(v)) values.push(v);
  }
  // (A context category naming no level, " > " as much as "", is no hint: it does not narrow to nothing.)
  const category = filterValue('category', context?.category ?? '');
  if (category && !filter.category) filter.category = [category];
  return filter;
}

/**
 * Related products. Steps:
 * 1. productId wins: a known product with stored vectors is the reference (its main image's vector is
 *    reused, nothing is re-embedded; its stored local features, when there are any, verify the
 *    shortlist) and its item group is excluded; no minimum score applies, since related products are
 *    meant to be similar rather than the same item;
 * 2. otherwise imageData is the query, or the fallback image when imageData is absent or refused as an
 *    image (after the usual inspection; an empty feed answers [] without loading the models), searched
 *    like an image search, minimum score included;
 * 3. neither sent → product_not_found; each sent and refused → invalid_image naming both;
 * 4. rank item groups under the filters (and context category), page with offset/limit.
 */
export async function relatedProducts(deps: SearchDeps, query: RelatedQuery): Promise<GroupHit[]> {
  const filter = relatedFilter(query.filters, query.context);
  let reference: Product | undefined;
  let vector: Float32Array | undefined;
  let queryFeatures: Promise<LocalFeatures | undefined> | undefined;
  let minScore: number | undefined;
  if (query.productId !== undefined) {
    reference = await deps.products.get(query.feedId, query.productId);
    if (reference && reference.vector_count > 0) {
      const id = vectorDocumentId(query.feedId, reference.product_id, 0);
      vector = (await (await deps.vectors()).getVectors([id])).get(id);
      if (vector && deps.reranking && deps.reranking.topN > 0) {
        const ref = { feedId: query.feedId, productId: reference.product_id, imageIndex: 0 };
        queryFeatures = deps.reranking.features.getMany([ref]).then(
          ([features]) => features,
          () => undefined,
        );
      }
    }
  }
  if (!vector) {
    const images: [field: string, image: Buffer][] = [];
    if (query.image) images.push(['imageData', query.image]);
    if (query.fallback) images.push(['fallback', query.fallback]);
    if (images.length === 0) {
      const why = reference ? 'has no searchable image yet' : 'is not in this feed';
      throw new NotFoundError(
        'product_not_found',
        `Product ${query.productId} ${why}; send imageData or fallback.`,
      );
    }
    // A fallback is the image to use when the others cannot be: imageData that is no usable image too.
    const refusals: InvalidImageError[] = [];
    // Asked once, after the first image that passes inspection (a refused one is a 4xx on any feed).
    let hasProducts: Promise<boolean> | undefined;
    for (const [field, image] of images) {
      try {
        await deps.images.inspect(image);
        if (!reference && !(await (hasProducts ??= deps.products.hasProducts(query.feedId)))) return [];
        const { bytes } = await deps.images.bounded(image);
        queryFeatures = startQueryFeatures(deps, bytes);
        vector = await embedOne(deps, bytes);
        break;
      } catch (error) {
        if (!(error instanceof InvalidImageError)) throw error;
        refusals.push(error.forField(field));
      }
    }
    if (!vector) {
      if (refusals.length === 1) throw refusals[0]!;
      throw new DomainError(
        'invalid_image',
        refusals.map((refusal) => refusal.message).join(' '),
        refusals.flatMap((refusal) => refusal.details),
      );
    }
    minScore = deps.minScore;
  }
  return rankGroups(deps, {
    feedId: query.feedId,
    vectors: [vector],
    limit: query.limit,
    offset: query.offset,
    filter,
    ...(reference ? { excludeItemGroupIds: [reference.group] } : {}),
    ...(queryFeatures ? { queryFeatures } : {}),
    ...(minScore ? { minScore } : {}),
  });
}

/** Detected objects (most confident first) whose results are geometrically verified with OD+SEARCH. */
const MAX_VERIFIED_OBJECTS = 5;

export interface DetectResult {
  objects: (DetectedObject & { products?: GroupHit[] })[];
}

/**
 * Object detection. Steps: inspect the image, run the detector; with search (OD+SEARCH), crop every
 * detected object, embed the crops in one batch (while the local features of the five most confident
 * crops are extracted) and rank the feed's item groups for each crop like an image search (re-ranking
 * for those five, minimum score for all).
 */
export function detectObjects(
  deps: SearchDeps,
  query: { feedId: string; image: Buffer; search: boolean; limit: number },
): Promise<DetectResult> {
  return ofField('imageData', () => detect(deps, query));
}

async function detect(
  deps: SearchDeps,
  query: { feedId: string; image: Buffer; search: boolean; limit: number },
): Promise<DetectResult> {
  await deps.images.inspect(query.image);
  const { detector, embedder } = await deps.vision();
  const objects = await detector.detect(query.image);
  if (!query.search) return { objects };
  if (objects.length === 0 || !(await deps.products.hasProducts(query.feedId))) {
    return { objects: objects.map((object) => ({ ...object, products: [] })) };
  }
  const crops = await deps.images.crops(
    query.image,
    objects.map((object) => object.box),
  );
  // Query features cost 30–70 ms each on the JS thread: only the most confident objects are verified.
  const verified = new Set(
    objects
      .map((object, i) => ({ score: object.score, i }))
      .sort((a, b) => b.score - a.score || a.i - b.i)
      .slice(0, MAX_VERIFIED_OBJECTS)
      .map(({ i }) => i),
  );
  const features = crops.map((crop, i) => (verified.has(i) ? startQueryFeatures(deps, crop) : undefined));
  const vectors = await embedder.embed(crops);
  const products = await Promise.all(
    vectors.map((vector, i) => {
      const queryFeatures = features[i];
      return rankGroups(deps, {
        feedId: query.feedId,
        vectors: [vector],
        limit: query.limit,
        offset: 0,
        ...(queryFeatures ? { queryFeatures } : {}),
        ...(deps.minScore ? { minScore: deps.minScore } : {}),
      });
    }),
  );
  return { objects: objects.map((object, i) => ({ ...object, products: products[i] ?? [] })) };
}
