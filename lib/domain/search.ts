import { NotFoundError, UnavailableError } from '#lib/domain/errors.ts';
import type { DetectedObject, ImageInspector, Vision } from '#lib/ports.ts';

/**
 * Search use cases as far as the platform reaches: every request is validated and answered from the real
 * stores, so an empty feed returns []. Ranking over a vector index arrives with the catalogue; until then
 * a request that would need it answers 503 rather than a made-up result.
 */
export interface SearchDeps {
  images: ImageInspector;
  products: { hasProducts(feedId: string): Promise<boolean> };
  vision(): Promise<Vision>;
}

export interface ImageQuery {
  feedId: string;
  image: Buffer;
  limit: number;
  offset: number;
}

/** Image search. Steps: inspect the image (format, pixel limit); an empty feed answers []; rank by vectors. */
export async function searchByImage(deps: SearchDeps, query: ImageQuery): Promise<unknown[]> {
  await deps.images.inspect(query.image);
  if (!(await deps.products.hasProducts(query.feedId))) return [];
  await deps.vision();
  throw new UnavailableError('The product index is not available yet.');
}

export interface RelatedQuery {
  feedId: string;
  productId?: string;
  image?: Buffer;
  fallback?: Buffer;
  limit: number;
  offset: number;
}

/**
 * Related products. Steps: productId wins when known; otherwise imageData, then the fallback image;
 * neither applies → product_not_found.
 */
export async function relatedProducts(deps: SearchDeps, query: RelatedQuery): Promise<unknown[]> {
  if (query.productId !== undefined && (await deps.products.hasProducts(query.feedId))) {
    throw new UnavailableError('The product index is not available yet.');
  }
  const image = query.image ?? query.fallback;
  if (!image) throw new NotFoundError('product_not_found', `Product ${query.productId} not found in this feed.`);
  return searchByImage(deps, { feedId: query.feedId, image, limit: query.limit, offset: query.offset });
}

export interface DetectResult {
  objects: (DetectedObject & { products?: unknown[] })[];
}

/** Object detection. Steps: inspect the image, run the detector; with search, search each object's crop. */
export async function detectObjects(
  deps: SearchDeps,
  query: { feedId: string; image: Buffer; search: boolean; limit: number },
): Promise<DetectResult> {
  await deps.images.inspect(query.image);
  const { detector } = await deps.vision();
  const objects = await detector.detect(query.image);
  if (!query.search) return { objects };
  const withProducts = [];
  for (const object of objects) {
    const crop = await deps.images.crop(query.image, object.box);
    const products = await searchByImage(deps, { feedId: query.feedId, image: crop, limit: query.limit, offset: 0 });
    withProducts.push({ ...object, products });
  }
  return { objects: withProducts };
}
