import { NotFoundError } from '#lib/domain/errors.ts';
import { filterValue, type GroupHit, type Product, scoreOf, vectorDocumentId } from '#lib/domain/products.ts';
import type {
  DetectedObject,
  ImageInspector,
  ProductStore,
  VectorFilter,
  VectorHit,
  VectorIndex,
  Vision,
} from '#lib/ports.ts';

/**
 * Search use cases: image search (also the root search), related products and object detection with
 * search. Results are item groups: the best-scoring product of each group with every variant of it.
 */
export interface SearchDeps {
  images: ImageInspector;
  products: ProductStore;
  vision(): Promise<Vision>;
  vectors(): Promise<VectorIndex>;
}

export interface ImageQuery {
  feedId: string;
  image: Buffer;
  limit: number;
  offset: number;
}

/** Largest k asked of the vector index; offset + limit ≤ 1000 groups with a few images each fit. */
const MAX_K = 5000;

/**
 * Ranks item groups by their best document. Ordering: score descending, ties by product_id, so the same
 * request always yields the same page. Asks the index for more neighbours while too few groups came back.
 */
async function rankGroups(
  deps: SearchDeps,
  query: {
    feedId: string;
    vector: Float32Array;
    limit: number;
    offset: number;
    filter?: VectorFilter;
    excludeItemGroupIds?: string[];
  },
): Promise<GroupHit[]> {
  const vectors = await deps.vectors();
  const window = query.offset + query.limit;
  let k = Math.min(MAX_K, window * 3 + 20);
  let best = new Map<string, VectorHit>();
  for (;;) {
    const hits = await vectors.search({
      feedId: query.feedId,
      vector: query.vector,
      k,
      ...(query.filter && Object.keys(query.filter).length > 0 ? { filter: query.filter } : {}),
      ...(query.excludeItemGroupIds ? { excludeItemGroupIds: query.excludeItemGroupIds } : {}),
    });
    best = new Map();
    for (const hit of hits) {
      const current = best.get(hit.itemGroupId);
      if (
        !current ||
        hit.similarity > current.similarity ||
        (hit.similarity === current.similarity && hit.productId < current.productId)
      ) {
        best.set(hit.itemGroupId, hit);
      }
    }
    if (best.size >= window || hits.length < k || k >= MAX_K) break;
    k = Math.min(MAX_K, k * 4);
  }
  const ranked = [...best.values()]
    .map((hit) => ({ hit, score: scoreOf(hit.similarity) }))
    .sort(
      (a, b) =>
        b.score - a.score ||
        (a.hit.productId < b.hit.productId ? -1 : a.hit.productId > b.hit.productId ? 1 : 0),
    )
    .slice(query.offset, window);
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

async function embedOne(deps: SearchDeps, image: Buffer): Promise<Float32Array> {
  const { embedder } = await deps.vision();
  const [vector] = await embedder.embed([image]);
  return vector!;
}

/**
 * Image search. Steps: inspect the image (format, pixel limit); an empty feed answers [] without loading
 * the models; embed the image; rank item groups by similarity; page with offset/limit.
 */
export async function searchByImage(deps: SearchDeps, query: ImageQuery): Promise<GroupHit[]> {
  await deps.images.inspect(query.image);
  if (!(await deps.products.hasProducts(query.feedId))) return [];
  const vector = await embedOne(deps, query.image);
  return rankGroups(deps, { feedId: query.feedId, vector, limit: query.limit, offset: query.offset });
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
  const category = context?.category?.trim();
  if (category && !filter.category) filter.category = [filterValue('category', category)];
  return filter;
}

/**
 * Related products. Steps:
 * 1. productId wins: a known product with stored vectors is the reference (its main image's vector is
 *    reused, nothing is re-embedded) and its item group is excluded;
 * 2. otherwise imageData, then the fallback image, is embedded (after the usual inspection; an empty
 *    feed answers [] without loading the models);
 * 3. neither applies → product_not_found;
 * 4. rank item groups under the filters (and context category), page with offset/limit.
 */
export async function relatedProducts(deps: SearchDeps, query: RelatedQuery): Promise<GroupHit[]> {
  const filter = relatedFilter(query.filters, query.context);
  let reference: Product | undefined;
  let vector: Float32Array | undefined;
  if (query.productId !== undefined) {
    reference = await deps.products.get(query.feedId, query.productId);
    if (reference && reference.vector_count > 0) {
      const id = vectorDocumentId(query.feedId, reference.product_id, 0);
      vector = (await (await deps.vectors()).getVectors([id])).get(id);
    }
  }
  if (!vector) {
    const image = query.image ?? query.fallback;
    if (!image) {
      const why = reference ? 'has no searchable image yet' : 'is not in this feed';
      throw new NotFoundError(
        'product_not_found',
        `Product ${query.productId} ${why}; send imageData or fallback.`,
      );
    }
    await deps.images.inspect(image);
    if (!reference && !(await deps.products.hasProducts(query.feedId))) return [];
    vector = await embedOne(deps, image);
  }
  return rankGroups(deps, {
    feedId: query.feedId,
    vector,
    limit: query.limit,
    offset: query.offset,
    filter,
    ...(reference ? { excludeItemGroupIds: [reference.group] } : {}),
  });
}

export interface DetectResult {
  objects: (DetectedObject & { products?: GroupHit[] })[];
}

/**
 * Object detection. Steps: inspect the image, run the detector; with search (OD+SEARCH), crop every
 * detected object, embed the crops in one batch and rank the feed's item groups for each.
 */
export async function detectObjects(
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
  const crops = await Promise.all(objects.map((object) => deps.images.crop(query.image, object.box)));
  const vectors = await embedder.embed(crops);
  const products = await Promise.all(
    vectors.map((vector) =>
      rankGroups(deps, { feedId: query.feedId, vector, limit: query.limit, offset: 0 }),
    ),
  );
  return { objects: objects.map((object, i) => ({ ...object, products: products[i] ?? [] })) };
}
