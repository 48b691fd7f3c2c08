import { describe, expect, it, vi } from 'vitest';
import { InvalidImageError, NotFoundError } from '#lib/domain/errors.ts';
import {
  contentHash,
  imageSearchItem,
  type Product,
  relatedItem,
  rootSearchItem,
  vectorDocumentId,
} from '#lib/domain/products.ts';
import { detectObjects, relatedProducts, searchByImage, type SearchDeps } from '#lib/domain/search.ts';
import type { VisualWordIndex, VisualWordQuery } from '#lib/ports.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';
import { fakeInspector, vectorOf, world, type World } from './fakes.ts';

/** Search deps with geometric re-ranking over the world's feature store and fake matcher. */
function reranked(w: World, topN = 20, minScore = 0): SearchDeps {
  return {
    ...deps(w),
    reranking: { matcher: async () => w.matcher, features: w.features, topN },
    minScore,
  };
}

/** Stores catalogue features of the products' images, as an import would. */
async function storeFeatures(w: World, items: { productId: string; image: string }[]) {
  for (const { productId, image } of items) {
    const features = await w.matcher.extract(Buffer.from(image), 'catalogue');
    await w.features.put({ feedId: 's', productId, imageIndex: 0 }, features);
  }
}

/** A vector close to `image`'s (cosine `similarity`), so tests can place products in the global order. */
function near(image: string, similarity: number, salt: string): Float32Array {
  const a = vectorOf(Buffer.from(image));
  const b = vectorOf(Buffer.from(salt));
  let dot = 0;
  for (let i = 0; i < a.length; i += 1) dot += a[i]! * b[i]!;
  const orth = b.map((x, i) => x - dot * a[i]!);
  const norm = Math.hypot(...orth);
  return a.map((x, i) => similarity * x + Math.sqrt(1 - similarity ** 2) * (orth[i]! / norm));
}

/**
 * Feed "s" with products p0, p1, … (one group each) at cosine `top`, `top` − 0.05, … to "query photo",
 * each with stored features of the image "item <id>" — except `mug`, whose image is "red mug", which
 * the fake matcher verifies in any query photo mentioning a red mug. The embedder answers the photo's
 * vector.
 */
async function rankedCatalogue(options: {
  count: number;
  top: number;
  mug?: string;
  fieldsOf?: (id: string) => Record<string, string[]>;
}): Promise<World> {
  const w = world();
  const ids = Array.from({ length: options.count }, (_, i) => `p${i}`);
  await w.products.putMany(ids.map((id) => make('s', id)));
  await w.index.upsert(
    ids.map((id, i) => ({
      id: vectorDocumentId('s', id, 0),
      feedId: 's',
      productId: id,
      itemGroupId: id,
      vector: near('query photo', options.top - i * 0.05, id),
      fields: options.fieldsOf?.(id) ?? {},
    })),
  );
  await storeFeatures(
    w,
    ids.map((id) => ({ productId: id, image: id === options.mug ? 'red mug' : `item ${id}` })),
  );
  w.embedder.embed = async () => [vectorOf(Buffer.from('query photo'))];
  return w;
}

function make(feedId: string, productId: string, extra: Partial<Product> = {}): Product {
  const p: Product = {
    feed_id: feedId,
    id: `00000000-0000-4000-8000-${productId.padStart(12, '0').slice(-12)}`,
    product_id: productId,
    item_group_id: '',
    group: productId,
    title: productId,
    short_title: '',
    description: '',
    age_group: '',
    availability: 'in_stock',
    brand: '',
    color: '',
    condition: 'new',
    gender: '',
    category: '',
    product_type: '',
    gtin: '',
    mpn: '',
    material: '',
    size: '',
    image_link: `https://cdn/${productId}.jpg`,
    additional_image_links: [],
    sb_image_url: '',
    link: '',
    price: 1000,
    sale_price: null,
    currency: 'USD',
    shipping_price: null,
    shipping_currency: '',
    shipping_country: '',
    shipping_weight: '',
    product_highlight: ['Light', 'Strong'],
    metadata: {},
    product_updated_at: '',
    update_hash: '',
    version: 1,
    created_at: '2026-11-22T00:00:00.000Z',
    updated_at: '2026-11-22T00:00:00.000Z',
    vector_count: 1,
    embedded_model: 'fake-1',
    ...extra,
  };
  p.update_hash = contentHash(p);
  return p;
}

/** Stores products with a vector that is `base` blended towards a per-product direction by `distance`. */
async function seed(
  w: World,
  products: { product: Product; image: string; fields?: Record<string, string[]> }[],
) {
  await w.products.putMany(products.map((p) => p.product));
  await w.index.upsert(
    products.map(({ product, image, fields }) => ({
      id: vectorDocumentId(product.feed_id, product.product_id, 0),
      feedId: product.feed_id,
      productId: product.product_id,
      itemGroupId: product.group,
      vector: vectorOf(Buffer.from(image)),
      fields: fields ?? {},
    })),
  );
}

function deps(w: World): SearchDeps {
  return { images: fakeInspector, products: w.products, vision: w.deps.vision, vectors: w.deps.vectors };
}

describe('searchByImage', () => {
  it('ranks the product with the same image first, one result per item group with its variants', async () => {
    // Prepare
    const w = world();
    await seed(w, [
      { product: make('s', 'a1', { item_group_id: 'g', group: 'g' }), image: 'red mug' },
      { product: make('s', 'a2', { item_group_id: 'g', group: 'g' }), image: 'blue mug' },
      { product: make('s', 'b'), image: 'lamp' },
      { product: make('s', 'c'), image: 'chair' },
    ]);
    // Act
    const hits = await searchByImage(deps(w), {
      feedId: 's',
      image: Buffer.from('blue mug'),
      limit: 10,
      offset: 0,
    });
    // Assess
    expect(hits[0]?.product.product_id).toBe('a2');
    // Without re-ranking the global evidence alone is capped near 0.5 (docs/api.md).
    expect(hits[0]?.score).toBeCloseTo(0.504, 3);
    expect(hits[0]?.variants.map((v) => v.product_id)).toEqual(['a1', 'a2']);
    expect(hits.map((h) => h.product.group)).toEqual(expect.arrayContaining(['g', 'b', 'c']));
    expect(hits).toHaveLength(3);
    for (let i = 1; i < hits.length; i += 1)
      expect(hits[i - 1]!.score).toBeGreaterThanOrEqual(hits[i]!.score);
  });

  it('pages stably with offset and limit', async () => {
    const w = world();
    await seed(
      w,
      ['p1', 'p2', 'p3', 'p4', 'p5'].map((id) => ({ product: make('s', id), image: id })),
    );
    const query = { feedId: 's', image: Buffer.from('p3') };
    const all = await searchByImage(deps(w), { ...query, limit: 5, offset: 0 });
    const page = await searchByImage(deps(w), { ...query, limit: 2, offset: 2 });
    expect(page.map((h) => h.product.product_id)).toEqual(all.slice(2, 4).map((h) => h.product.product_id));
  });

  it('breaks score ties by product_id', async () => {
    const w = world();
    await seed(w, [
      { product: make('s', 'zz'), image: 'same' },
      { product: make('s', 'aa'), image: 'same' },
    ]);
    const hits = await searchByImage(deps(w), {
      feedId: 's',
      image: Buffer.from('same'),
      limit: 10,
      offset: 0,
    });
    expect(hits.map((h) => h.product.product_id)).toEqual(['aa', 'zz']);
  });

  it('searches with the image as the inspector bounds it (a large one scaled down once)', async () => {
    const w = world();
    await seed(w, [
      { product: make('s', 'lamp'), image: 'lamp' },
      { product: make('s', 'chair'), image: 'chair' },
    ]);
    const scaledDown = Buffer.from('chair');
    const d: SearchDeps = {
      ...deps(w),
      images: { ...fakeInspector, bounded: async () => ({ bytes: scaledDown, width: 10, height: 10 }) },
    };
    const query = { feedId: 's', image: Buffer.from('a large photo'), limit: 10, offset: 0 };
    const direct = await searchByImage(deps(w), { ...query, image: scaledDown });
    expect((await searchByImage(d, query)).map((hit) => hit.score)).toEqual(direct.map((hit) => hit.score));
    const related = await relatedProducts(d, query);
    expect(related.map((hit) => hit.score)).toEqual(direct.map((hit) => hit.score));
  });

  it('ranks by the better of whole image and detector crop with detectorCrop', async () => {
    // Prepare: the whole photo looks like the chair, its detected box like the lamp
    const w = world();
    await seed(w, [
      { product: make('s', 'lamp'), image: 'lamp' },
      { product: make('s', 'chair'), image: 'chair' },
    ]);
    w.detections.push({ box: [1, 1, 4, 4], label: 'cup', score: 0.8 });
    const d: SearchDeps = {
      ...deps(w),
      images: { ...fakeInspector, crops: async (_bytes, boxes) => boxes.map(() => Buffer.from('lamp')) },
      detectorCrop: true,
    };
    // Act
    const hits = await searchByImage(d, { feedId: 's', image: Buffer.from('chair'), limit: 10, offset: 0 });
    const plain = await searchByImage(deps(w), {
      feedId: 's',
      image: Buffer.from('chair'),
      limit: 10,
      offset: 0,
    });
    // Assess: both reach the top similarity; without the crop the lamp is far behind
    expect(hits.map((h) => h.score)).toEqual([hits[0]!.score, hits[0]!.score]);
    expect(plain[1]!.score).toBeLessThan(plain[0]!.score);
  });

  it('never returns another feed’s products and answers [] for an empty feed without the models', async () => {
    const w = world();
    await seed(w, [{ product: make('other', 'x'), image: 'x' }]);
    const d = { ...deps(w), vision: () => Promise.reject(new Error('models must not load')) };
    expect(await searchByImage(d, { feedId: 's', image: Buffer.from('x'), limit: 10, offset: 0 })).toEqual(
      [],
    );
  });
});

describe('searchByImage with geometric re-ranking', () => {
  /** Ten products at decreasing global similarity to "query photo"; p7's image is in the photo. */
  const catalogue = () => rankedCatalogue({ count: 10, top: 0.95, mug: 'p7' });
  const photo = Buffer.from('query photo');
  const scene = Buffer.from('query photo: a red mug on a table');

  it('moves a verified product ahead of globally closer ones, with a high calibrated score', async () => {
    // Prepare
    const w = await catalogue();
    w.embedder.embed = async () => [vectorOf(photo)];
    // Act
    const hits = await searchByImage(reranked(w), { feedId: 's', image: scene, limit: 10, offset: 0 });
    // Assess
    expect(hits.map((h) => h.product.product_id)).toEqual([
      'p7',
      'p0',
      'p1',
      'p2',
      'p3',
      'p4',
      'p5',
      'p6',
      'p8',
      'p9',
    ]);
    expect(hits[0]!.score).toBeGreaterThan(0.9);
    expect(hits[1]!.score).toBeLessThan(0.52);
    for (let i = 1; i < hits.length; i += 1)
      expect(hits[i - 1]!.score).toBeGreaterThanOrEqual(hits[i]!.score);
    expect(w.matcher.extracted.filter((e) => e.role === 'query')).toHaveLength(1);
  });

  it('re-ranks only the top N and keeps the rest in global order after them, paging stably', async () => {
    // Prepare: p7 is 8th by similarity, outside a top-5 shortlist
    const w = await catalogue();
    w.embedder.embed = async () => [vectorOf(photo)];
    const d = reranked(w, 5);
    // Act
    const all = await searchByImage(d, { feedId: 's', image: scene, limit: 10, offset: 0 });
    const page = await searchByImage(d, { feedId: 's', image: scene, limit: 3, offset: 6 });
    // Assess
    expect(all.map((h) => h.product.product_id)).toEqual([
      'p0',
      'p1',
      'p2',
      'p3',
      'p4',
      'p5',
      'p6',
      'p7',
      'p8',
      'p9',
    ]);
    expect(w.matcher.verified).toBe(10);
    expect(page.map((h) => h.product.product_id)).toEqual(['p6', 'p7', 'p8']);
  });

  it('keeps the global order when the query has no local features or an item has none stored', async () => {
    // Prepare
    const w = await catalogue();
    w.embedder.embed = async () => [vectorOf(photo)];
    await w.features.deleteProducts('s', ['p7']);
    // Act
    const missing = await searchByImage(reranked(w), { feedId: 's', image: scene, limit: 3, offset: 0 });
    const failed = await searchByImage(reranked(w), {
      feedId: 's',
      image: Buffer.from('NOFEAT query'),
      limit: 3,
      offset: 0,
    });
    // Assess
    expect(missing.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2']);
    expect(failed.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2']);
  });

  it('drops results under the minimum score: an unrelated photo returns nothing', async () => {
    // Prepare: the photo's nearest products are only loosely similar and nothing verifies
    const w = await catalogue();
    w.embedder.embed = async () => [near('query photo', 0.3, 'unrelated')];
    // Act
    const hits = await searchByImage(reranked(w, 20, 0.3), {
      feedId: 's',
      image: Buffer.from('a mountain landscape'),
      limit: 10,
      offset: 0,
    });
    const verified = await searchByImage(reranked(w, 20, 0.3), {
      feedId: 's',
      image: Buffer.from('a mountain landscape with a red mug'),
      limit: 10,
      offset: 0,
    });
    // Assess
    expect(hits).toEqual([]);
    expect(verified.map((h) => h.product.product_id)).toEqual(['p7']);
  });

  it('verifies related products against the reference product’s stored features, without a cut-off', async () => {
    // Prepare: the reference shows a red mug too; p7 is far from it globally
    const w = await catalogue();
    const ref = make('s', 'ref');
    await w.products.putMany([ref]);
    await w.index.upsert([
      {
        id: vectorDocumentId('s', 'ref', 0),
        feedId: 's',
        productId: 'ref',
        itemGroupId: 'ref',
        vector: vectorOf(photo),
        fields: {},
      },
    ]);
    await storeFeatures(w, [{ productId: 'ref', image: 'packshot of a red mug' }]);
    w.embedder.embedded = 0;
    // Act
    const hits = await relatedProducts(reranked(w, 20, 0.9), {
      feedId: 's',
      productId: 'ref',
      limit: 10,
      offset: 0,
    });
    // Assess
    expect(hits[0]?.product.product_id).toBe('p7');
    expect(hits).toHaveLength(10);
    expect(w.embedder.embedded).toBe(0);
  });

  it('gives a verified related product’s twins its evidence under the same filters', async () => {
    // Prepare: every p is brand acme; t1 (acme) and t2 (other) show p7's image, past a top-8 shortlist
    const w = await rankedCatalogue({
      count: 10,
      top: 0.95,
      mug: 'p7',
      fieldsOf: () => ({ brand: ['acme'] }),
    });
    const ref = make('s', 'ref');
    const twins = [make('s', 't1'), make('s', 't2')];
    await w.products.putMany([ref, ...twins]);
    const p7 = (await w.index.getVectors([vectorDocumentId('s', 'p7', 0)])).get(
      vectorDocumentId('s', 'p7', 0),
    )!;
    await w.index.upsert([
      {
        id: vectorDocumentId('s', 'ref', 0),
        feedId: 's',
        productId: 'ref',
        itemGroupId: 'ref',
        vector: vectorOf(photo),
        fields: {},
      },
      ...twins.map(({ product_id }) => ({
        id: vectorDocumentId('s', product_id, 0),
        feedId: 's',
        productId: product_id,
        itemGroupId: product_id,
        vector: p7,
        fields: { brand: [product_id === 't1' ? 'acme' : 'other'] },
      })),
    ]);
    await storeFeatures(w, [{ productId: 'ref', image: 'packshot of a red mug' }]);
    // Act
    const hits = await relatedProducts(reranked(w, 8), {
      feedId: 's',
      productId: 'ref',
      limit: 20,
      offset: 0,
      filters: [{ key: 'brand', value: 'acme' }],
    });
    // Assess
    expect(hits.slice(0, 2).map((h) => h.product.product_id)).toEqual(['p7', 't1']);
    expect(hits[1]!.score).toBe(hits[0]!.score);
    expect(hits.map((h) => h.product.product_id)).not.toContain('t2');
  });

  it('verifies each detected object’s crop (OD+SEARCH)', async () => {
    const w = await catalogue();
    w.embedder.embed = async (images) => images.map(() => vectorOf(photo));
    w.detections.push({ box: [0, 0, 5, 5], label: 'cup', score: 0.9 });
    // The box's crop shows the mug: its keypoints are the ones verified, not the whole scene's.
    const crop = Buffer.from('crop: a red mug');
    const d: SearchDeps = {
      ...reranked(w),
      images: { ...fakeInspector, crops: async (_bytes, boxes) => boxes.map(() => crop) },
    };
    const result = await detectObjects(d, { feedId: 's', image: scene, search: true, limit: 2 });
    expect(result.objects[0]?.products?.map((h) => h.product.product_id)).toEqual(['p7', 'p0']);
    expect(w.matcher.extracted.filter((e) => e.role === 'query').map((e) => e.text)).toEqual([
      crop.toString(),
    ]);
    // Only the five most confident of many objects are verified.
    w.detections.push(
      ...Array.from({ length: 7 }, (_, i) => ({
        box: [0, 0, 5, 5] as [number, number, number, number],
        label: 'cup',
        score: 0.1 + i / 100,
      })),
    );
    w.matcher.extracted = [];
    await detectObjects(d, { feedId: 's', image: scene, search: true, limit: 2 });
    expect(w.matcher.extracted.filter((e) => e.role === 'query')).toHaveLength(5);
  });
});

describe('searchByImage: products sharing a verified product’s image', () => {
  const photo = Buffer.from('query photo');
  const scene = Buffer.from('query photo: a red mug on a table');
  const mug = near('query photo', 0.9, 'mug');

  /** Stores products of one image each (its vector normalised) with the stored features of `image`. */
  async function put(
    w: World,
    items: { id: string; vector: Float32Array; image: string; group?: string }[],
  ): Promise<void> {
    await w.products.putMany(
      items.map(({ id, group }) => make('s', id, group ? { item_group_id: group, group } : {})),
    );
    await w.index.upsert(
      items.map(({ id, vector, group }) => {
        const norm = Math.hypot(...vector);
        const unit = vector.map((x) => x / norm);
        return {
          id: vectorDocumentId('s', id, 0),
          feedId: 's',
          productId: id,
          itemGroupId: group ?? id,
          vector: unit,
          fields: {},
        };
      }),
    );
    await storeFeatures(
      w,
      items.map(({ id, image }) => ({ productId: id, image })),
    );
    w.embedder.embed = async () => [vectorOf(photo)];
  }

  const summary = (hits: { product: Product; score: number }[]) =>
    hits.map((h): [string, number] => [h.product.product_id, h.score]);

  /** Every page of `size` of a search, concatenated. */
  async function paged(
    search: (offset: number, limit: number) => Promise<{ product: Product; score: number }[]>,
    size: number,
    length: number,
  ): Promise<[string, number][]> {
    const pages: [string, number][] = [];
    for (let offset = 0; offset < length + size; offset += size)
      pages.push(...summary(await search(offset, size)));
    return pages;
  }

  it('scores them alike wherever their ids sort, and every page is a slice of one list', async () => {
    // Prepare: d0…d2 are more similar to the photo; m00…m11 show one image and hold the mug; n is
    // nearly that image (cosine 0.9999, a little less similar to the photo) but does not hold it. A
    // top-5 shortlist verifies m00 and m01 only.
    const w = world();
    const mugs = Array.from({ length: 12 }, (_, i) => `m${String(i).padStart(2, '0')}`);
    const q = vectorOf(photo);
    const away = mug.map((x, i) => 0.9 * x - q[i]!);
    const awayNorm = Math.hypot(...away);
    await put(w, [
      ...['d0', 'd1', 'd2'].map((id, i) => ({
        id,
        vector: near('query photo', 0.95 - i * 0.01, id),
        image: `item ${id}`,
      })),
      ...mugs.map((id) => ({ id, vector: mug, image: 'red mug' })),
      {
        id: 'n',
        vector: mug.map((x, i) => 0.9999 * x + Math.sqrt(1 - 0.9999 ** 2) * (away[i]! / awayNorm)),
        image: 'other',
      },
    ]);
    for (const minScore of [0, 0.45]) {
      const d = reranked(w, 5, minScore);
      const search = (offset: number, limit: number) =>
        searchByImage(d, { feedId: 's', image: scene, limit, offset });
      // Act
      const all = summary(await search(0, 20));
      // Assess: the twelve alike, by product_id, then the unverified ones
      expect(all.slice(0, 12).map(([id]) => id)).toEqual(mugs);
      expect(new Set(all.slice(0, 12).map(([, score]) => score)).size).toBe(1);
      expect(all[0]![1]).toBeGreaterThan(0.9);
      if (minScore === 0) expect(all.slice(12).map(([id]) => id)).toEqual(['d0', 'd1', 'd2', 'n']);
      for (const size of [1, 2, 3, 4])
        expect(await paged(search, size, all.length), `${minScore}: pages of ${size}`).toEqual(all);
    }
  });

  it('verifies a product under twelve products sharing another photo: their photo takes one place', async () => {
    // Prepare: x00…x11 show one photo, more similar to the query, that does not hold the mug; p holds it
    // and ranks 13th by similarity; d comes last. A top-5 shortlist.
    const w = world();
    const xs = Array.from({ length: 12 }, (_, i) => `x${String(i).padStart(2, '0')}`);
    const x = near('query photo', 0.95, 'x');
    await put(w, [
      ...xs.map((id) => ({ id, vector: x, image: 'item x' })),
      { id: 'p', vector: mug, image: 'red mug' },
      { id: 'd', vector: near('query photo', 0.8, 'd'), image: 'item d' },
    ]);
    const d = reranked(w, 5);
    const search = (offset: number, limit: number) =>
      searchByImage(d, { feedId: 's', image: scene, limit, offset });
    // Act
    const all = summary(await search(0, 20));
    // Assess: p verified and first, the twelve alike, one verification for their photo; every page is
    // a slice of the one list
    expect(w.matcher.verified).toBe(3);
    expect(all.map(([id]) => id)).toEqual(['p', ...xs, 'd']);
    expect(all[0]![1]).toBeGreaterThan(0.9);
    expect(new Set(all.slice(1, 13).map(([, score]) => score)).size).toBe(1);
    for (const size of [1, 2, 3, 5])
      expect(await paged(search, size, all.length), `pages of ${size}`).toEqual(all);
  });

  it('spends no keypoint-shortlist verification on the shared photo’s other products', async () => {
    // Prepare: as above, a top 2: x00 kept, x01…x07 set aside; the word index proposes x01…x03 (their
    // words are the photo's) and p
    const w = world();
    const xs = Array.from({ length: 12 }, (_, i) => `x${String(i).padStart(2, '0')}`);
    await put(w, [
      ...xs.map((id) => ({ id, vector: near('query photo', 0.95, 'x'), image: 'item x' })),
      { id: 'p', vector: mug, image: 'red mug' },
    ]);
    const words: VisualWordIndex = {
      upsert: async () => undefined,
      deleteProducts: async () => undefined,
      deleteFeed: async () => undefined,
      flush: async () => undefined,
      search: async () =>
        ['x01', 'x02', 'x03', 'p'].map((id, i) => ({
          id: vectorDocumentId('s', id, 0),
          productId: id,
          itemGroupId: id,
          score: 10 - i,
        })),
    };
    const d = { ...reranked(w, 2), reranking: { ...reranked(w, 2).reranking!, words, wordTopN: 4 } };
    // Act
    const hits = await searchByImage(d, { feedId: 's', image: scene, limit: 20, offset: 0 });
    // Assess: x00 and p verified, nothing else
    expect(w.matcher.verified).toBe(2);
    expect(summary(hits).map(([id]) => id)).toEqual(['p', ...xs]);
  });

  it('spends no regional-shortlist verification on the shared photo’s other products', async () => {
    // Prepare: as above, a top 2 (x00 kept, x01…x07 set aside); the query's one window is their photo,
    // and the regional shortlist takes its 3 nearest groups
    const w = world();
    const xs = Array.from({ length: 12 }, (_, i) => `x${String(i).padStart(2, '0')}`);
    const x = near('query photo', 0.95, 'x');
    await put(w, [
      ...xs.map((id) => ({ id, vector: x, image: 'item x' })),
      { id: 'p', vector: mug, image: 'red mug' },
    ]);
    const norm = Math.hypot(...x);
    const d: SearchDeps = {
      ...reranked(w, 2),
      vision: async () => ({
        ...(await w.deps.vision()),
        regional: { regions: async () => [x.map((v) => v / norm)] },
      }),
      regional: { topN: 3 },
    };
    // Act
    const hits = await searchByImage(d, { feedId: 's', image: scene, limit: 20, offset: 0 });
    // Assess: the window's three nearest groups are x00 and two of its copies: x00 verified once
    expect(w.matcher.verified).toBe(1);
    expect(summary(hits).map(([id]) => id)).toEqual([...xs, 'p']);
  });

  /**
   * a, u1 and u2 exactly as similar to the query (0.5) with three different photos, b less; u1's stored
   * image `u1Image`; search deps with a top 2 and a regional shortlist of 1 whose one window is the photo
   * of `windowOf`.
   */
  async function tiedPhotos(u1Image: string, windowOf: 'u1' | 'u2') {
    const w = world();
    const axis = (...values: number[]) => Float32Array.from({ length: 16 }, (_, i) => values[i] ?? 0);
    await put(w, [
      { id: 'a', vector: axis(1), image: 'item a' },
      { id: 'u1', vector: axis(0, 1), image: u1Image },
      { id: 'u2', vector: axis(0, 0, 1), image: 'item u2' },
      { id: 'b', vector: axis(0, 0, 0, 1, 1), image: 'item b' },
    ]);
    w.embedder.embed = async () => [axis(0.5, 0.5, 0.5, 0.5)];
    const window = windowOf === 'u1' ? axis(0, 1) : axis(0, 0, 1);
    const d: SearchDeps = {
      ...reranked(w, 2),
      vision: async () => ({ ...(await w.deps.vision()), regional: { regions: async () => [window] } }),
      regional: { topN: 1 },
    };
    return { w, d };
  }

  it('lists once a group as similar as a kept one but with another photo that the regional shortlist verifies', async () => {
    // Prepare: a, u1 and u2 are exactly as similar to the query (0.5) with three different photos, b less:
    // a top 2 sets u1 and u2 aside as probable copies of a, finds their photos differ and walks again,
    // keeping a and u1 (u2 is past the top 2, where a walk that set them aside for good left it
    // unverified, 5884ad7); the query's one window is u2's photo, and the regional shortlist takes it
    const { d } = await tiedPhotos('item u1', 'u2');
    const search = (offset: number, limit: number) =>
      searchByImage(d, { feedId: 's', image: scene, limit, offset });
    // Act
    const all = summary(await search(0, 20));
    // Assess: each group once, and every page a slice of the one list
    expect(all.map(([id]) => id).sort()).toEqual(['a', 'b', 'u1', 'u2']);
    for (const size of [1, 3]) expect(await paged(search, size, all.length), `pages of ${size}`).toEqual(all);
  });

  it('keeps a group as similar as a kept one but with another photo in its place in the top N', async () => {
    // Prepare: a, u1 and u2 are exactly as similar to the query (0.5) with three different photos, b less;
    // u1 holds the mug. A top 2 verifies a and u1, as without the walk; the query's one window is u1's
    // photo, and the regional shortlist takes its nearest group
    const { w, d: regional } = await tiedPhotos('red mug', 'u1');
    const query = { feedId: 's', image: scene, limit: 20, offset: 0 };
    // Act
    const plain = summary(await searchByImage(reranked(w, 2), query));
    const verifiedPlain = w.matcher.verified;
    const withRegions = summary(await searchByImage(regional, query));
    // Assess: u1 verified first both times, by the global top's two verifications only
    expect(plain[0]![0]).toBe('u1');
    expect(plain[0]![1]).toBeGreaterThan(0.9);
    expect(verifiedPlain).toBe(2);
    expect(withRegions[0]![0]).toBe('u1');
    expect(w.matcher.verified - verifiedPlain).toBe(2);
  });

  it('leaves the copies the walk confirmed out of the twin lookup, whose 24 neighbours go further', async () => {
    // Prepare: m00…m39 show the mug photo; a top 2 keeps m00 and sets m01…m07 aside (its walk's 8 groups)
    const w = world();
    const mugs = Array.from({ length: 40 }, (_, i) => `m${String(i).padStart(2, '0')}`);
    await put(
      w,
      mugs.map((id) => ({ id, vector: mug, image: 'red mug' })),
    );
    // Act
    const hits = await searchByImage(reranked(w, 2), { feedId: 's', image: scene, limit: 50, offset: 0 });
    // Assess: m00, its 7 copies and the 24 twins past them take its evidence; the last 8 rank unverified
    expect(hits).toHaveLength(40);
    expect(hits.filter((h) => h.score > 0.9).map((h) => h.product.product_id)).toEqual(mugs.slice(0, 32));
  });

  it('asks the k-NN for more groups when the walk past a shared photo runs off its answer', async () => {
    // Prepare: as above, with three variants per group of the shared photo: the k-NN of a page of 5
    // (35 images) holds only those groups
    const w = world();
    const xs = Array.from({ length: 12 }, (_, i) => `x${String(i).padStart(2, '0')}`);
    const x = near('query photo', 0.95, 'x');
    await put(w, [
      ...xs.flatMap((group) =>
        ['a', 'b', 'c'].map((v) => ({ id: group + v, group, vector: x, image: 'item x' })),
      ),
      { id: 'p', vector: mug, image: 'red mug' },
      { id: 'd', vector: near('query photo', 0.8, 'd'), image: 'item d' },
    ]);
    const d = reranked(w, 5);
    const search = (offset: number, limit: number) =>
      searchByImage(d, { feedId: 's', image: scene, limit, offset });
    // Act
    const all = summary(await search(0, 20));
    // Assess
    expect(all.map(([id]) => id)).toEqual(['p', ...xs.map((group) => `${group}a`), 'd']);
    for (const size of [1, 3, 5])
      expect(await paged(search, size, all.length), `pages of ${size}`).toEqual(all);
  });

  it('finds them past the verified group’s own variants, which share its photo', async () => {
    // Prepare: group g's 30 sizes show the mug photo, as do t1…t3; a top-1 shortlist verifies g
    const w = world();
    await put(w, [
      ...Array.from({ length: 30 }, (_, i) => ({
        id: `g${String(i).padStart(2, '0')}`,
        group: 'g',
        vector: mug,
        image: 'red mug',
      })),
      ...['t1', 't2', 't3'].map((id) => ({ id, vector: mug, image: 'red mug' })),
      { id: 'd', vector: near('query photo', 0.8, 'd'), image: 'item d' },
    ]);
    // Act
    const hits = await searchByImage(reranked(w, 1), { feedId: 's', image: scene, limit: 10, offset: 0 });
    // Assess
    expect(summary(hits).map(([id]) => id)).toEqual(['g00', 't1', 't2', 't3', 'd']);
    expect(new Set(hits.slice(0, 4).map((h) => h.score)).size).toBe(1);
  });

  it('looks for the twins of up to 5 distinct photos, however many verified groups share one', async () => {
    // Prepare: m0…m5 show the mug photo and p0…p7 the pliers photo, both in the query; a top-8 shortlist
    // verifies the six mugs and p0, p1, whose twins p2…p7 are
    const w = world();
    const pliers = near('query photo', 0.85, 'pliers');
    await put(w, [
      ...Array.from({ length: 6 }, (_, i) => ({ id: `m${i}`, vector: mug, image: 'red mug' })),
      ...Array.from({ length: 8 }, (_, i) => ({ id: `p${i}`, vector: pliers, image: 'blue pliers' })),
    ]);
    const photo = Buffer.from('query photo: a red mug and blue pliers');
    // Act
    const hits = await searchByImage(reranked(w, 8), { feedId: 's', image: photo, limit: 20, offset: 0 });
    // Assess: the six mugs alike, and the eight pliers alike
    expect(hits).toHaveLength(14);
    const scoresOf = (prefix: string) =>
      new Set(hits.filter((h) => h.product.product_id.startsWith(prefix)).map((h) => h.score));
    expect([scoresOf('m').size, scoresOf('p').size]).toEqual([1, 1]);
  });

  it('takes their verified group’s regional evidence too', async () => {
    // Prepare: m0…m7 show the mug photo, verified with 11 inliers (not confident, so regions count) and
    // resembling the photo's one region more than its whole; a top-5 shortlist verifies m0…m4
    const w = world();
    const regional = near('query photo', 0.5, 'mug');
    await put(
      w,
      Array.from({ length: 8 }, (_, i) => ({ id: `m${i}`, vector: regional, image: 'red mug' })),
    );
    const verify = w.matcher.verify.bind(w.matcher);
    w.matcher.verify = (query, candidates) => verify(query, candidates).map((n) => (n >= 20 ? 11 : n));
    const d: SearchDeps = {
      ...reranked(w, 5),
      vision: async () => ({ ...(await w.deps.vision()), regional: { regions: async () => [regional] } }),
      regional: { topN: 2 },
    };
    // Act
    const hits = await searchByImage(d, { feedId: 's', image: scene, limit: 10, offset: 0 });
    const withoutRegions = await searchByImage(reranked(w, 5), {
      feedId: 's',
      image: scene,
      limit: 10,
      offset: 0,
    });
    // Assess: all eight alike, above what they score on the whole image alone
    expect(hits).toHaveLength(8);
    expect(new Set(hits.map((h) => h.score)).size).toBe(1);
    expect(hits[0]!.score).toBeGreaterThan(withoutRegions[0]!.score);
  });

  it('never proposes the reference of related products, which shares a verified product’s photo', async () => {
    // Prepare: ref and t1 show p7's photo (the mug); a top-1 shortlist of ref's related products
    const w = await rankedCatalogue({ count: 10, top: 0.95, mug: 'p7' });
    const key = vectorDocumentId('s', 'p7', 0);
    const p7 = (await w.index.getVectors([key])).get(key)!;
    await put(w, [
      { id: 'ref', vector: p7, image: 'red mug' },
      { id: 't1', vector: p7, image: 'red mug' },
    ]);
    // Act
    const hits = await relatedProducts(reranked(w, 1), {
      feedId: 's',
      productId: 'ref',
      limit: 20,
      offset: 0,
    });
    // Assess
    const ids = hits.map((h) => h.product.product_id);
    expect(ids.slice(0, 2)).toEqual(['p7', 't1']);
    expect(ids).not.toContain('ref');
  });

  it('loses only the twins when their lookup fails, and the copies’ evidence when vectors cannot be read', async () => {
    // Prepare: m00…m15 share the mug photo: a top-3 walks 12 groups (m00 kept, the rest its copies),
    // m12…m15 are twins; the twin lookup's k-NN fails, then every vector read
    const w = world();
    await put(
      w,
      Array.from({ length: 16 }, (_, i) => ({
        id: `m${String(i).padStart(2, '0')}`,
        vector: mug,
        image: 'red mug',
      })),
    );
    const searchMany = w.index.searchMany.bind(w.index);
    w.index.searchMany = async (queries) => {
      if (queries.some((query) => query.k === 24)) throw new Error('msearch down');
      return searchMany(queries);
    };
    const search = () => searchByImage(reranked(w, 3), { feedId: 's', image: scene, limit: 20, offset: 0 });
    // Act
    const noLookup = await search();
    w.index.getVectors = async () => {
      throw new Error('mget down');
    };
    const noReads = await search();
    // Assess: without the lookup, the kept group and its 11 copies verified, the twins not; without
    // vectors, copies cannot be told from other photos: three verified (the top 3), the rest not
    expect(noLookup).toHaveLength(16);
    expect(noLookup.filter((h) => h.score > 0.9)).toHaveLength(12);
    expect(noReads).toHaveLength(16);
    expect(noReads.filter((h) => h.score > 0.9).map((h) => h.product.product_id)).toEqual([
      'm00',
      'm01',
      'm02',
    ]);
  });
});

describe('relatedProducts', () => {
  async function catalogue() {
    const w = world();
    await seed(w, [
      {
        product: make('s', 'ref', { item_group_id: 'g', group: 'g' }),
        image: 'ref',
        fields: { brand: ['acme'] },
      },
      {
        product: make('s', 'ref-v', { item_group_id: 'g', group: 'g' }),
        image: 'ref',
        fields: { brand: ['acme'] },
      },
      {
        product: make('s', 'p1', { brand: 'Acme' }),
        image: 'p1',
        fields: { brand: ['acme'], color: ['red'], category: ['home', 'home > kitchen'] },
      },
      { product: make('s', 'p2', { brand: 'Zed' }), image: 'p2', fields: { brand: ['zed'], color: ['red'] } },
      {
        product: make('s', 'p3', { brand: 'Acme' }),
        image: 'p3',
        fields: { brand: ['acme'], color: ['blue'], category: ['garden'] },
      },
    ]);
    return w;
  }

  it('reuses the stored vector of a productId and excludes the product and its variants', async () => {
    const w = await catalogue();
    w.embedder.embedded = 0;
    const hits = await relatedProducts(deps(w), { feedId: 's', productId: 'ref', limit: 10, offset: 0 });
    expect(hits.map((h) => h.product.product_id).sort()).toEqual(['p1', 'p2', 'p3']);
    expect(w.embedder.embedded).toBe(0);
  });

  it('names the field of an image it refuses, in the message and the detail', async () => {
    const w = await catalogue();
    const bad = Buffer.from('BAD image');
    const query = { feedId: 's', productId: 'unknown', limit: 10, offset: 0 };
    await expect(relatedProducts(deps(w), { ...query, fallback: bad })).rejects.toMatchObject({
      code: 'invalid_image',
      message: 'Invalid fallback: the data is not a decodable image.',
      details: [{ path: 'fallback', message: 'the data is not a decodable image', reason: 'undecodable' }],
    });
    await expect(
      relatedProducts(deps(w), { feedId: 's', image: bad, limit: 10, offset: 0 }),
    ).rejects.toMatchObject({
      message: 'Invalid imageData: the data is not a decodable image.',
      details: [{ path: 'imageData' }],
    });
  });

  it('searches the fallback when imageData is refused as an image, with or without a productId', async () => {
    // Prepare: imageData refused at inspection, or only when decoded for the embedding (a header that
    // reads, pixels that do not)
    const w = await catalogue();
    const embed = w.embedder.embed.bind(w.embedder);
    w.embedder.embed = async (images) => {
      if (images.some((image) => image.toString().startsWith('TRUNCATED')))
        throw new InvalidImageError({ reason: 'undecodable', problem: 'the image could not be decoded' });
      return embed(images);
    };
    const hasProducts = vi.spyOn(w.products, 'hasProducts');
    for (const image of [Buffer.from('BAD image'), Buffer.from('TRUNCATED image')]) {
      for (const productId of ['nope', undefined]) {
        hasProducts.mockClear();
        // Act
        const hits = await relatedProducts(deps(w), {
          feedId: 's',
          ...(productId ? { productId } : {}),
          image,
          fallback: Buffer.from('p2'),
          limit: 1,
          offset: 0,
        });
        // Assess: whether the feed is empty asked once, whichever image is searched
        expect(hits[0]?.product.product_id, `${image.toString()} ${productId}`).toBe('p2');
        expect(hasProducts.mock.calls.length).toBeLessThanOrEqual(1);
      }
    }
  });

  it('names both images when imageData and the fallback are both refused', async () => {
    const w = await catalogue();
    const refusal = await relatedProducts(deps(w), {
      feedId: 's',
      productId: 'nope',
      image: Buffer.from('BAD image'),
      fallback: Buffer.from('BAD fallback'),
      limit: 10,
      offset: 0,
    }).catch((error: unknown) => error);
    expect(refusal).toMatchObject({
      code: 'invalid_image',
      message:
        'Invalid imageData: the data is not a decodable image. Invalid fallback: the data is not a decodable image.',
      details: [
        { path: 'imageData', reason: 'undecodable' },
        { path: 'fallback', reason: 'undecodable' },
      ],
    });
  });

  it('does not read imageData or the fallback of a known product', async () => {
    const w = await catalogue();
    const hits = await relatedProducts(deps(w), {
      feedId: 's',
      productId: 'ref',
      image: Buffer.from('BAD image'),
      fallback: Buffer.from('BAD fallback'),
      limit: 10,
      offset: 0,
    });
    expect(hits.map((h) => h.product.product_id).sort()).toEqual(['p1', 'p2', 'p3']);
  });

  it('applies filters: AND across keys, OR within a key, case-insensitive', async () => {
    const w = await catalogue();
    const ids = async (filters: { key: string; value: string }[]) =>
      (await relatedProducts(deps(w), { feedId: 's', productId: 'ref', limit: 10, offset: 0, filters }))
        .map((h) => h.product.product_id)
        .sort();
    expect(await ids([{ key: 'brand', value: 'ACME' }])).toEqual(['p1', 'p3']);
    expect(
      await ids([
        { key: 'brand', value: 'acme' },
        { key: 'color', value: 'red' },
      ]),
    ).toEqual(['p1']);
    expect(
      await ids([
        { key: 'color', value: 'red' },
        { key: 'color', value: 'blue' },
      ]),
    ).toEqual(['p1', 'p2', 'p3']);
  });

  it('narrows by context.category, parents included', async () => {
    const w = await catalogue();
    const hits = await relatedProducts(deps(w), {
      feedId: 's',
      productId: 'ref',
      limit: 10,
      offset: 0,
      context: { category: 'Home' },
    });
    expect(hits.map((h) => h.product.product_id)).toEqual(['p1']);
    const spaced = await relatedProducts(deps(w), {
      feedId: 's',
      productId: 'ref',
      limit: 10,
      offset: 0,
      filters: [{ key: 'category', value: ' HOME>Kitchen ' }],
    });
    expect(spaced.map((h) => h.product.product_id)).toEqual(['p1']);
  });

  it('does not narrow by a context.category that names no category, separators only or empty', async () => {
    const w = await catalogue();
    const all = await relatedProducts(deps(w), { feedId: 's', productId: 'ref', limit: 10, offset: 0 });
    for (const category of [' > ', '', '>>']) {
      const hits = await relatedProducts(deps(w), {
        feedId: 's',
        productId: 'ref',
        limit: 10,
        offset: 0,
        context: { category },
      });
      expect(hits.map((h) => h.product.product_id)).toEqual(all.map((h) => h.product.product_id));
    }
    expect(all.length).toBeGreaterThan(1);
  });

  it('narrows by a category filter rather than context.category when both are sent', async () => {
    // Prepare
    const w = await catalogue();
    // Act
    const hits = await relatedProducts(deps(w), {
      feedId: 's',
      productId: 'ref',
      limit: 10,
      offset: 0,
      filters: [{ key: 'category', value: 'Garden' }],
      context: { category: 'Home' },
    });
    // Assess
    expect(hits.map((h) => h.product.product_id)).toEqual(['p3']);
  });

  it('applies the minimum score to an image query, not to a known productId', async () => {
    // Prepare: a cut-off only the same image passes (it scores about 0.5, the others under 0.01)
    const w = await catalogue();
    const strict: SearchDeps = { ...deps(w), minScore: 0.3 };
    // Act
    const byImage = await relatedProducts(strict, {
      feedId: 's',
      image: Buffer.from('p2'),
      limit: 10,
      offset: 0,
    });
    const byId = await relatedProducts(strict, { feedId: 's', productId: 'ref', limit: 10, offset: 0 });
    // Assess
    expect(byImage.map((h) => h.product.product_id)).toEqual(['p2']);
    expect(byId.map((h) => h.product.product_id).sort()).toEqual(['p1', 'p2', 'p3']);
  });

  it('falls back to imageData, then fallback, when the productId is unknown', async () => {
    const w = await catalogue();
    const hits = await relatedProducts(deps(w), {
      feedId: 's',
      productId: 'nope',
      fallback: Buffer.from('p2'),
      limit: 1,
      offset: 0,
    });
    expect(hits[0]?.product.product_id).toBe('p2');
  });

  it('throws product_not_found when neither the product nor an image applies', async () => {
    const w = await catalogue();
    await expect(
      relatedProducts(deps(w), { feedId: 's', productId: 'nope', limit: 10, offset: 0 }),
    ).rejects.toBeInstanceOf(NotFoundError);
  });
});

describe('image refusals past the inspection', () => {
  it('name imageData when a stage decoding the pixels refuses the image (image search, detect)', async () => {
    // Prepare: a header the inspector reads, pixels the models cannot decode
    const w = world();
    await seed(w, [{ product: make('s', 'table'), image: 'table' }]);
    const truncated = new InvalidImageError({
      reason: 'undecodable',
      problem: 'the image could not be decoded (it may be damaged or cut short)',
    });
    w.embedder.embed = async () => {
      throw truncated;
    };
    const d: SearchDeps = {
      ...deps(w),
      vision: async () => ({
        embedder: w.embedder,
        detector: {
          detect: async () => {
            throw truncated;
          },
        },
      }),
    };
    const image = Buffer.from('table');
    const named = {
      code: 'invalid_image',
      message: 'Invalid imageData: the image could not be decoded (it may be damaged or cut short).',
      details: [{ path: 'imageData', reason: 'undecodable' }],
    };
    // Act / Assess
    await expect(searchByImage(d, { feedId: 's', image, limit: 3, offset: 0 })).rejects.toMatchObject(named);
    await expect(detectObjects(d, { feedId: 's', image, search: false, limit: 3 })).rejects.toMatchObject(
      named,
    );
  });
});

describe('detectObjects', () => {
  it('adds the products of each detected object with OD+SEARCH, found by its crop', async () => {
    // The photo looks like the table, its detected box like the mug: each object's products are those of
    // its crop, not of the whole photo.
    const w = world();
    await seed(w, [
      { product: make('s', 'table'), image: 'table' },
      { product: make('s', 'mug'), image: 'mug' },
    ]);
    w.detections.push({ box: [0, 0, 5, 5], label: 'cup', score: 0.9 });
    const d: SearchDeps = {
      ...deps(w),
      images: { ...fakeInspector, crops: async (_bytes, boxes) => boxes.map(() => Buffer.from('mug')) },
    };
    const result = await detectObjects(d, {
      feedId: 's',
      image: Buffer.from('table'),
      search: true,
      limit: 3,
    });
    expect(result.objects).toHaveLength(1);
    expect(result.objects[0]?.products?.[0]?.product.product_id).toBe('mug');
    const whole = await searchByImage(deps(w), {
      feedId: 's',
      image: Buffer.from('table'),
      limit: 3,
      offset: 0,
    });
    expect(whole[0]?.product.product_id).toBe('table');
  });
});

describe('response shapes', () => {
  const hit = {
    product: make('s', 'p', {
      metadata: { campaign: 'x' },
      additional_image_links: ['https://a', 'https://b'],
    }),
    variants: [make('s', 'p')],
    score: 0.75,
  };

  it('image search: in_stock, highlight array, no id or timestamps', () => {
    const item = imageSearchItem(hit);
    expect(item).toMatchObject({
      availability: 'in_stock',
      product_highlight: ['Light', 'Strong'],
      score: 0.75,
      variant_count: 1,
      price: 1000,
    });
    expect(item).not.toHaveProperty('id');
    expect(item).not.toHaveProperty('metadata');
    expect(item.variants[0]).not.toHaveProperty('id');
  });

  it('related: text availability, string highlight, id, metadata, version, timestamps', () => {
    const item = relatedItem(hit);
    expect(item).toMatchObject({
      availability: 'in stock',
      product_highlight: 'Light, Strong',
      metadata: { campaign: 'x' },
      version: 1,
      additional_image_links: 'https://a,https://b',
    });
    expect(item.variants[0]).toMatchObject({
      id: hit.variants[0]!.id,
      item_group_id: 'p',
      availability: 'in stock',
      metadata: {},
    });
  });

  it('every endpoint: a product without an item group shows its product_id as item_group_id', () => {
    // Prepare: the feed gave no item_group_id (make leaves it '' and the group the product id)
    const ungrouped = { product: make('s', 'solo'), variants: [make('s', 'solo')], score: 0.5 };
    // Act
    const items = [imageSearchItem(ungrouped), relatedItem(ungrouped), rootSearchItem(ungrouped)];
    // Assess
    for (const item of items) expect(item.item_group_id).toBe('solo');
    expect(relatedItem(ungrouped).variants[0]!.item_group_id).toBe('solo');
  });

  it('related and root search: every underscore of availability as a space', () => {
    // Prepare
    const out = make('s', 'gone', { availability: 'out_of_stock' });
    const sold = { product: out, variants: [out], score: 0.5 };
    // Act
    const related = relatedItem(sold);
    const root = rootSearchItem(sold);
    // Assess: the text form, as "in stock"; image search keeps the code
    expect([related.availability, related.variants[0]!.availability, root.availability]).toEqual([
      'out of stock',
      'out of stock',
      'out of stock',
    ]);
    expect(imageSearchItem(sold).availability).toBe('out_of_stock');
  });

  it('root search: prices as strings and the score under the empty-named property', () => {
    const item = rootSearchItem(hit);
    expect(item).toMatchObject({ price: '1000', sale_price: '', '': '0.750000', id: hit.product.id });
    expect(item).not.toHaveProperty('variants');
  });
});

describe('searchByImage with the keypoint shortlist', () => {
  /** Ten products at decreasing global similarity; p8 (the red mug) is far down the global order. */
  const catalogue = () =>
    rankedCatalogue({
      count: 10,
      top: 0.95,
      mug: 'p8',
      fieldsOf: (id) => ({ brand: [id === 'p8' ? 'acme' : 'other'] }),
    });
  const scene = Buffer.from('query photo: a red mug on a table');

  /** A word index answering with fixed hits (p8 and p9 share words with any query), recording queries. */
  function wordIndex(hits = ['p8', 'p9']) {
    const queries: VisualWordQuery[] = [];
    const index: VisualWordIndex = {
      upsert: async () => undefined,
      deleteProducts: async () => undefined,
      deleteFeed: async () => undefined,
      flush: async () => undefined,
      search: async (query) => {
        queries.push(query);
        return hits
          .filter((id) => !query.excludeItemGroupIds?.includes(id))
          .map((id, i) => ({
            id: vectorDocumentId('s', id, 0),
            productId: id,
            itemGroupId: id,
            score: 10 - i,
          }));
      },
    };
    return { index, queries };
  }

  function withWords(w: World, words: VisualWordIndex, topN = 3, wordTopN = 2): SearchDeps {
    return {
      ...deps(w),
      reranking: { matcher: async () => w.matcher, features: w.features, topN, words, wordTopN },
    };
  }

  it('pages the same list at every page size when a word hit ranks below its k-NN place', async () => {
    // Prepare: ten groups at cosine 0.95, 0.90, … to the photo; p5's other image (cosine 0.40) is the one
    // whose words match, so p5 ranks last, by that image, while the k-NN places it sixth. A window cut
    // at p5's k-NN place used to leave p6 out of the page that should show it.
    const w = await rankedCatalogue({ count: 10, top: 0.95 });
    await w.index.upsert([
      {
        id: vectorDocumentId('s', 'p5', 1),
        feedId: 's',
        productId: 'p5',
        itemGroupId: 'p5',
        vector: near('query photo', 0.4, 'p5 back'),
        fields: {},
      },
    ]);
    const words: VisualWordIndex = {
      ...wordIndex().index,
      search: async () => [
        { id: vectorDocumentId('s', 'p5', 1), productId: 'p5', itemGroupId: 'p5', score: 9 },
      ],
    };
    const search = (offset: number, limit: number) =>
      searchByImage(withWords(w, words, 3, 2), {
        feedId: 's',
        image: Buffer.from('query photo'),
        limit,
        offset,
      });
    // Act
    const full = (await search(0, 10)).map((h) => h.product.product_id);
    // Assess
    expect(full).toEqual(['p0', 'p1', 'p2', 'p3', 'p4', 'p6', 'p7', 'p8', 'p9', 'p5']);
    for (const size of [1, 2, 3, 4]) {
      const paged: string[] = [];
      for (let offset = 0; offset < full.length; offset += size)
        paged.push(...(await search(offset, size)).map((h) => h.product.product_id));
      expect(paged, `pages of ${size}`).toEqual(full);
    }
  });

  it('asks the k-NN for more groups when the shortlist took its places, and still pages one list', async () => {
    // Prepare: 60 groups at falling cosine; the words match the other image (cosine ≈ 0.1) of p0…p49, so
    // those groups rank last but p0…p2 (the verified global top), while their k-NN places are the first:
    // the 32 images a page at offset 3 asks for hold no other group past p2.
    const w = await rankedCatalogue({ count: 60, top: 0.99 });
    w.index.docs.clear();
    const ids = Array.from({ length: 60 }, (_, i) => `p${i}`);
    await w.index.upsert(
      ids.flatMap((id, i) => [
        {
          id: vectorDocumentId('s', id, 0),
          feedId: 's',
          productId: id,
          itemGroupId: id,
          vector: near('query photo', 0.99 - i * 0.01, id),
          fields: {},
        },
        {
          id: vectorDocumentId('s', id, 1),
          feedId: 's',
          productId: id,
          itemGroupId: id,
          vector: near('query photo', 0.1 - i * 0.001, `${id} back`),
          fields: {},
        },
      ]),
    );
    const searched: number[] = [];
    const search = w.index.search.bind(w.index);
    w.index.search = async (query) => {
      searched.push(query.k);
      return search(query);
    };
    const words: VisualWordIndex = {
      ...wordIndex().index,
      search: async () =>
        ids.slice(0, 50).map((id, i) => ({
          id: vectorDocumentId('s', id, 1),
          productId: id,
          itemGroupId: id,
          score: 99 - i,
        })),
    };
    const page = async (offset: number, limit: number) =>
      (
        await searchByImage(withWords(w, words, 3, 50), {
          feedId: 's',
          image: Buffer.from('query photo'),
          limit,
          offset,
        })
      ).map((h) => h.product.product_id);
    // Act
    const full = await page(0, 60);
    searched.length = 0;
    const fourth = await page(3, 1);
    // Assess: p0…p2, then p50… by cosine, then the word hits by their other image
    expect(full).toEqual([...ids.slice(0, 3), ...ids.slice(50), ...ids.slice(3, 50)]);
    expect(fourth).toEqual(['p50']);
    expect(searched, 'a second k-NN round').toHaveLength(2);
    for (const size of [1, 4, 7]) {
      const paged: string[] = [];
      for (let offset = 0; offset < 60; offset += size) paged.push(...(await page(offset, size)));
      expect(paged, `pages of ${size}`).toEqual(full);
    }
  });

  it('finds a product the global top N misses, and keeps unverified word hits in global order', async () => {
    // Prepare
    const w = await catalogue();
    const words = wordIndex();
    // Act
    const hits = await searchByImage(withWords(w, words.index), {
      feedId: 's',
      image: scene,
      limit: 10,
      offset: 0,
    });
    // Assess: p8 verified first; p9 (a word hit that does not verify) stays last by similarity
    expect(hits.map((h) => h.product.product_id)).toEqual([
      'p8',
      'p0',
      'p1',
      'p2',
      'p3',
      'p4',
      'p5',
      'p6',
      'p7',
      'p9',
    ]);
    expect(hits[0]!.score).toBeGreaterThan(0.9);
    expect(words.queries).toHaveLength(1);
    expect(words.queries[0]!.words.length).toBeGreaterThan(0);
    // Without the shortlist p8 is outside the top 3 and keeps its global place.
    const without = await searchByImage(withWords(w, words.index, 3, 0), {
      feedId: 's',
      image: scene,
      limit: 10,
      offset: 0,
    });
    expect(without[0]!.product.product_id).toBe('p0');
  });

  it('reads the global top’s stored features while the query’s keypoints are still being extracted', async () => {
    // Prepare: the query's extraction waits until the first stored-features read (or 2 s); every read
    // records whether the keypoints were out yet
    const w = await catalogue();
    const words = wordIndex();
    let released = false;
    let release!: () => void;
    const keypoints = new Promise<void>((resolve) => (release = resolve)).then(() => (released = true));
    const fallback = setTimeout(release, 2000);
    const extract = w.matcher.extract.bind(w.matcher);
    w.matcher.extract = async (image, role) => {
      if (role === 'query') await keypoints;
      return extract(image, role);
    };
    const reads: { products: string[]; beforeKeypoints: boolean }[] = [];
    const getMany = w.features.getMany.bind(w.features);
    w.features.getMany = (refs) => {
      reads.push({ products: refs.map((ref) => ref.productId), beforeKeypoints: !released });
      release();
      return getMany(refs);
    };
    // Act
    const hits = await searchByImage(withWords(w, words.index), {
      feedId: 's',
      image: scene,
      limit: 10,
      offset: 0,
    });
    clearTimeout(fallback);
    // Assess: the global top 3 first, before the keypoints; then only the word hits it lacks; the
    // ranking is the one of the test above
    expect(reads).toEqual([
      { products: ['p0', 'p1', 'p2'], beforeKeypoints: true },
      { products: ['p8', 'p9'], beforeKeypoints: false },
    ]);
    expect(hits.map((h) => h.product.product_id).slice(0, 3)).toEqual(['p8', 'p0', 'p1']);
    expect(hits[0]!.score).toBeGreaterThan(0.9);
  });

  it('a failed early read of stored features fails the search at verification, not the process', async () => {
    // Prepare: the store fails while the word lookup is still pending; unhandled rejections are recorded
    const unhandled: unknown[] = [];
    const record = (reason: unknown) => unhandled.push(reason);
    process.on('unhandledRejection', record);
    const w = await catalogue();
    const words = wordIndex();
    const search = words.index.search;
    words.index.search = async (query) => {
      await new Promise((resolve) => setTimeout(resolve, 20));
      return search(query);
    };
    w.features.getMany = () => Promise.reject(new Error('S3 unavailable'));
    try {
      // Act / Assess
      await expect(
        searchByImage(withWords(w, words.index), { feedId: 's', image: scene, limit: 10, offset: 0 }),
      ).rejects.toThrow('S3 unavailable');
      // Node reports an unhandled rejection after the microtask queue drains: give it a macrotask.
      await new Promise((resolve) => setImmediate(resolve));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', record);
    }
  });

  it('answers in global order when the matcher cannot be built (its workers cannot start)', async () => {
    // Prepare: the scene would verify p8 first (test above), but no matcher can be had
    const w = await catalogue();
    const words = wordIndex();
    const d: SearchDeps = withWords(w, words.index);
    const broken: SearchDeps = {
      ...d,
      reranking: { ...d.reranking!, matcher: () => Promise.reject(new Error('worker entry cannot load')) },
    };
    // Act
    const hits = await searchByImage(broken, { feedId: 's', image: scene, limit: 3, offset: 0 });
    // Assess
    expect(hits.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2']);
  });

  it('drops a weakly verified word hit under the cut-off before it can cap the others', async () => {
    // Prepare: p8 is verified with just 10 inliers and looks nothing like the photo (own score ~0.31)
    const w = await catalogue();
    await w.index.upsert([
      {
        id: vectorDocumentId('s', 'p8', 0),
        feedId: 's',
        productId: 'p8',
        itemGroupId: 'p8',
        vector: near('query photo', 0.1, 'p8'),
        fields: {},
      },
    ]);
    const matcher = {
      extract: w.matcher.extract.bind(w.matcher),
      verify: (q: LocalFeatures, cs: readonly (LocalFeatures | undefined)[]) =>
        w.matcher.verify(q, cs).map((inliers) => (inliers === 40 ? 10 : inliers)),
    };
    const d: SearchDeps = {
      ...withWords(w, wordIndex(['p8']).index),
      reranking: {
        matcher: async () => matcher,
        features: w.features,
        topN: 3,
        words: wordIndex(['p8']).index,
        wordTopN: 1,
      },
      minScore: 0.4,
    };
    // Act
    const hits = await searchByImage(d, { feedId: 's', image: scene, limit: 5, offset: 0 });
    const all = await searchByImage(
      { ...d, minScore: 0 },
      { feedId: 's', image: scene, limit: 5, offset: 0 },
    );
    // Assess: without the cut-off p8 leads (verified) and caps everything under it at its ~0.31
    expect(all[0]!.product.product_id).toBe('p8');
    expect(all[1]!.score).toBeLessThan(0.4);
    expect(hits.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2', 'p3']);
    expect(hits.every((h) => h.score >= 0.4)).toBe(true);
  });

  it('represents a word-shortlisted group by its verified image whatever the page size', async () => {
    // Prepare: p8 has a second image (the one whose words match, and that verifies)
    const w = await catalogue();
    await w.index.upsert([
      {
        id: vectorDocumentId('s', 'p8', 1),
        feedId: 's',
        productId: 'p8',
        itemGroupId: 'p8',
        vector: near('query photo', 0.3, 'p8-side'),
        fields: {},
      },
    ]);
    await w.features.put(
      { feedId: 's', productId: 'p8', imageIndex: 0 },
      await w.matcher.extract(Buffer.from('item p8'), 'catalogue'),
    );
    await w.features.put(
      { feedId: 's', productId: 'p8', imageIndex: 1 },
      await w.matcher.extract(Buffer.from('red mug'), 'catalogue'),
    );
    const words = wordIndex(['p8']);
    words.index.search = async () => [
      { id: vectorDocumentId('s', 'p8', 1), productId: 'p8', itemGroupId: 'p8', score: 5 },
    ];
    const d = withWords(w, words.index, 3, 1);
    // Act: a page of 5 (p8 outside the k-NN window) and of 10 (inside it)
    const five = await searchByImage(d, { feedId: 's', image: scene, limit: 5, offset: 0 });
    const ten = await searchByImage(d, { feedId: 's', image: scene, limit: 10, offset: 0 });
    const second = await searchByImage(d, { feedId: 's', image: scene, limit: 5, offset: 5 });
    // Assess
    expect(five[0]!.product.product_id).toBe('p8');
    expect(ten[0]).toEqual(five[0]);
    expect(ten.slice(0, 5)).toEqual(five);
    expect(second).toEqual(ten.slice(5, 10));
  });

  it('a word hit whose vector is gone is left out, and a failing word index only loses its candidates', async () => {
    const w = await catalogue();
    await w.index.deleteProducts('s', ['p8']);
    const gone = await searchByImage(withWords(w, wordIndex().index), {
      feedId: 's',
      image: scene,
      limit: 10,
      offset: 0,
    });
    expect(gone.map((h) => h.product.product_id)).not.toContain('p8');
    const failing = wordIndex();
    failing.index.search = async () => {
      throw new Error('index down');
    };
    const hits = await searchByImage(withWords(w, failing.index), {
      feedId: 's',
      image: scene,
      limit: 3,
      offset: 0,
    });
    expect(hits.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2']);
  });

  it('related products: excludes the reference group from word hits; filtered queries skip the word index', async () => {
    // Prepare: the reference shows a red mug as well
    const w = await catalogue();
    await storeFeatures(w, [{ productId: 'p0', image: 'packshot of a red mug' }]);
    const words = wordIndex(['p0', 'p8']);
    // Act
    const related = await relatedProducts(withWords(w, words.index), {
      feedId: 's',
      productId: 'p0',
      limit: 3,
      offset: 0,
    });
    const filtered = await relatedProducts(withWords(w, words.index), {
      feedId: 's',
      productId: 'p0',
      limit: 3,
      offset: 0,
      filters: [{ key: 'brand', value: 'other' }],
    });
    // Assess
    expect(related[0]!.product.product_id).toBe('p8');
    expect(words.queries).toHaveLength(1);
    expect(words.queries[0]!.excludeItemGroupIds).toEqual(['p0']);
    expect(filtered.map((h) => h.product.product_id)).not.toContain('p8');
  });
});

describe('searchByImage with a second look', () => {
  /** Ten products at decreasing global similarity; p8 is the red mug, far down the global order. */
  const catalogue = () => rankedCatalogue({ count: 10, top: 0.95, mug: 'p8' });
  /** The mug is too small for the whole photo's keypoints: only a region of the photo shows it. */
  const shelf = Buffer.from('query photo: a shelf | small: a red mug');

  /**
   * Re-ranking with a word index that proposes p8 and p9 for any query (or what `hits` gives for its
   * n-th lookup), and the second look on.
   */
  function looking(
    w: World,
    secondLook: SearchDeps['secondLook'] = { boxes: 2, minScore: 0.05, wordTopN: 10 },
    options: { wordTopN?: number; hits?: (lookup: number) => string[] } = {},
  ): SearchDeps {
    let lookups = 0;
    const words: VisualWordIndex = {
      upsert: async () => undefined,
      deleteProducts: async () => undefined,
      deleteFeed: async () => undefined,
      flush: async () => undefined,
      search: async () =>
        (options.hits?.(lookups++) ?? ['p8', 'p9']).map((id, i) => ({
          id: vectorDocumentId('s', id, 0),
          productId: id,
          itemGroupId: id,
          score: 9 - i,
        })),
    };
    return {
      ...deps(w),
      reranking: {
        matcher: async () => w.matcher,
        features: w.features,
        topN: 3,
        words,
        wordTopN: options.wordTopN ?? 2,
      },
      ...(secondLook ? { secondLook } : {}),
    };
  }
  const search = (d: SearchDeps, image = shelf) =>
    searchByImage(d, { feedId: 's', image, limit: 5, offset: 0 });

  it('when nothing verified, verifies the shortlist of a detected box and puts the product it shows first', async () => {
    // Prepare: a weak box (0.1, under the API's 0.35) around the mug, and a box covering most of the photo
    const w = await catalogue();
    w.detections.push(
      { box: [0, 0, 9, 9], label: 'dining table', score: 0.6 },
      { box: [2, 3, 5, 6], label: 'cup', score: 0.1 },
      { box: [6, 6, 7, 7], label: 'cup', score: 0.01 },
    );
    // Act
    const first = await search(looking(w, { boxes: 0, minScore: 0.05, wordTopN: 10 }));
    const second = await search(looking(w));
    // Assess: without the second look nothing verifies and p8 stays under the global top
    expect(first.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(second.map((h) => h.product.product_id)).toEqual(['p8', 'p0', 'p1', 'p2', 'p3']);
    expect(second[0]!.score).toBeGreaterThan(0.9);
    // Only the small box above the threshold was looked at, widened by 15 % on each side
    const regions = w.matcher.extracted.filter((e) => e.region).map((e) => e.region!);
    expect(regions).toHaveLength(1);
    expect(regions[0]![0]).toBeCloseTo(1.55);
    expect(regions[0]![1]).toBeCloseTo(2.55);
    expect(regions[0]![2]).toBeCloseTo(5.45);
    expect(regions[0]![3]).toBeCloseTo(6.45);
  });

  it('does not look again when the first look verified a product', async () => {
    // Prepare: the photo shows p0's item plainly
    const w = await catalogue();
    w.detections.push({ box: [2, 3, 5, 6], label: 'cup', score: 0.9 });
    // Act
    const hits = await search(looking(w), Buffer.from('query photo: item p0 | small: a red mug'));
    // Assess
    expect(hits[0]!.product.product_id).toBe('p0');
    expect(hits.map((h) => h.product.product_id)).not.toContain('p8');
    expect(w.matcher.extracted.some((e) => e.region)).toBe(false);
  });

  it('adds a group only a box proposes, from 12 inliers', async () => {
    // Prepare: the photo's own words propose p9 only (each search's first lookup), the box's p8, which
    // it verifies with 11, then 12 inliers
    const w = await catalogue();
    w.detections.push({ box: [2, 3, 5, 6], label: 'cup', score: 0.5 });
    const verify = w.matcher.verify.bind(w.matcher);
    let verified = 11;
    w.matcher.verify = (query, candidates) => verify(query, candidates).map((n) => (n === 40 ? verified : n));
    const d = looking(
      w,
      { boxes: 1, minScore: 0.05, wordTopN: 10 },
      { hits: (lookup) => (lookup % 2 === 0 ? ['p9'] : ['p8']) },
    );
    // Act
    const eleven = await search(d);
    verified = 12;
    const twelve = await search(d);
    // Assess
    expect(eleven.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(twelve.map((h) => h.product.product_id)).toEqual(['p8', 'p0', 'p1', 'p2', 'p3']);
  });

  it("verifies a box's shortlist to its own depth (wordTopN), not the photo's", async () => {
    // Prepare: the photo's words propose p9 (its shortlist is 2 deep); the box's propose p9, p7, then p8
    const w = await catalogue();
    w.detections.push({ box: [2, 3, 5, 6], label: 'cup', score: 0.5 });
    const hits = (lookup: number) => (lookup % 2 === 0 ? ['p9'] : ['p9', 'p7', 'p8']);
    // Act
    const two = await search(looking(w, { boxes: 1, minScore: 0.05, wordTopN: 2 }, { hits }));
    const three = await search(looking(w, { boxes: 1, minScore: 0.05, wordTopN: 3 }, { hits }));
    // Assess: only the three-deep box shortlist reaches the mug
    expect(two.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(three.map((h) => h.product.product_id)).toEqual(['p8', 'p0', 'p1', 'p2', 'p3']);
  });

  it('looks at no more boxes than asked, and a box that fails loses only its own evidence', async () => {
    // Prepare: two boxes; the first one's extraction fails
    const w = await catalogue();
    w.detections.push(
      { box: [1, 1, 4, 4], label: 'cup', score: 0.6 },
      { box: [5, 5, 8, 8], label: 'cup', score: 0.5 },
    );
    // Act
    const one = await search(looking(w, { boxes: 1, minScore: 0.05, wordTopN: 10 }));
    const regionsOfOne = w.matcher.extracted.filter((e) => e.region).length;
    const extract = w.matcher.extract.bind(w.matcher);
    let failed = false;
    w.matcher.extract = async (image, role, region) => {
      if (region && !failed) {
        failed = true;
        throw new Error('extraction failed');
      }
      return extract(image, role, region);
    };
    const two = await search(looking(w, { boxes: 2, minScore: 0.05, wordTopN: 10 }));
    // Assess
    expect(regionsOfOne).toBe(1);
    expect(one[0]!.product.product_id).toBe('p8');
    expect(failed).toBe(true);
    expect(two[0]!.product.product_id).toBe('p8');
  });

  /**
   * The catalogue with q1…q3 showing p0's photo (its vector and features): the top 3 keeps p0, sets them
   * aside and keeps p1 and p2, so q3 is walked past the top 3; one box shows p0's item and its words
   * propose q3.
   */
  async function copiesOfP0() {
    const w = await catalogue();
    const key = vectorDocumentId('s', 'p0', 0);
    const p0 = (await w.index.getVectors([key])).get(key)!;
    const copies = ['q1', 'q2', 'q3'];
    await w.products.putMany(copies.map((id) => make('s', id)));
    await w.index.upsert(
      copies.map((id) => ({
        id: vectorDocumentId('s', id, 0),
        feedId: 's',
        productId: id,
        itemGroupId: id,
        vector: p0,
        fields: {},
      })),
    );
    await storeFeatures(
      w,
      copies.map((productId) => ({ productId, image: 'item p0' })),
    );
    w.detections.push({ box: [2, 3, 5, 6], label: 'cup', score: 0.5 });
    const d = looking(
      w,
      { boxes: 1, minScore: 0.05, wordTopN: 10 },
      { hits: (lookup) => (lookup % 2 === 0 ? ['p9'] : ['q3']) },
    );
    return { w, d };
  }

  it('adds no confirmed copy of the global top’s kept group again when a box verifies it', async () => {
    // Prepare: copiesOfP0 (q3 walked past the top 3 is a candidate whatever the window)
    const { w, d } = await copiesOfP0();
    // Act
    const hits = await searchByImage(d, {
      feedId: 's',
      image: Buffer.from('query photo: a shelf | small: item p0'),
      limit: 20,
      offset: 0,
    });
    // Assess: the box looked, and every group is listed once
    expect(w.matcher.extracted.some((e) => e.region)).toBe(true);
    const ids = hits.map((h) => h.product.product_id);
    expect(ids).toHaveLength(13);
    expect(new Set(ids).size).toBe(13);
  });

  it('gives a box’s verification of a confirmed copy to its kept group and the group’s other copies', async () => {
    // Prepare
    const { d } = await copiesOfP0();
    // Act
    const hits = await searchByImage(d, {
      feedId: 's',
      image: Buffer.from('query photo: a shelf | small: item p0'),
      limit: 5,
      offset: 0,
    });
    // Assess: the four groups showing p0's photo lead, verified alike
    expect(hits.slice(0, 4).map((h) => h.product.product_id)).toEqual(['p0', 'q1', 'q2', 'q3']);
    expect(hits[0]!.score).toBeGreaterThan(0.9);
    expect(new Set(hits.slice(0, 4).map((h) => h.score)).size).toBe(1);
  });

  it('does not look again without a keypoint shortlist to ask', async () => {
    // Prepare
    const w = await catalogue();
    w.detections.push({ box: [2, 3, 5, 6], label: 'cup', score: 0.5 });
    // Act
    const hits = await search(looking(w, { boxes: 1, minScore: 0.05, wordTopN: 10 }, { wordTopN: 0 }));
    // Assess
    expect(hits[0]!.product.product_id).toBe('p0');
    expect(w.matcher.extracted.some((e) => e.region)).toBe(false);
  });

  it('a failing detector or no box only loses the second look', async () => {
    // Prepare
    const w = await catalogue();
    const failing = looking(w);
    failing.vision = async () => ({
      ...(await w.deps.vision()),
      detector: {
        detect: async () => {
          throw new Error('detector down');
        },
      },
    });
    // Act
    const withoutBoxes = await search(looking(w));
    const withFailure = await search(failing);
    // Assess
    expect(withoutBoxes.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(withFailure.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
  });
});

describe('score calibration', () => {
  it('puts a nearly verified group (8–9 inliers) ahead of more similar unverified ones', async () => {
    // Prepare: p3, 4th by similarity, shows partly in the photo (9 inliers); the others get 2 by chance
    const w = await rankedCatalogue({ count: 5, top: 0.6, mug: 'p3' });
    const query = { feedId: 's', image: Buffer.from('scene with partly red mug'), limit: 5, offset: 0 };
    // Act
    const hits = await searchByImage(reranked(w), query);
    // Assess: p3 first, the rest in global order, scores never increasing
    expect(hits.map((h) => h.product.product_id)).toEqual(['p3', 'p0', 'p1', 'p2', 'p4']);
    for (let i = 1; i < hits.length; i += 1)
      expect(hits[i - 1]!.score).toBeGreaterThanOrEqual(hits[i]!.score);
  });

  it('reads the global cosine on the configured embedding scale (projected vectors sit lower)', async () => {
    // Prepare: one product at cosine 0.5 to the query, no verification
    const w = world();
    await w.products.putMany([make('s', 'p')]);
    await w.index.upsert([
      {
        id: vectorDocumentId('s', 'p', 0),
        feedId: 's',
        productId: 'p',
        itemGroupId: 'p',
        vector: near('query photo', 0.5, 'p'),
        fields: {},
      },
    ]);
    w.embedder.embed = async () => [vectorOf(Buffer.from('query photo'))];
    const query = { feedId: 's', image: Buffer.from('query photo'), limit: 1, offset: 0 };
    // Act
    const [raw] = await searchByImage(deps(w), query);
    const [projected] = await searchByImage(
      { ...deps(w), cosineScale: { cosineFloor: 0.2, cosineCeiling: 0.6 } },
      query,
    );
    // Assess: raw scale (0.4 → 0, 0.9 → 1): global evidence 0.5 · 0.2; projected scale (0.2 → 0,
    // 0.6 → 1): 0.5 · 0.75; no inliers leave the geometric evidence at 1 / (1 + e^(12 / 2.5))
    const geometric = 1 / (1 + Math.exp(12 / 2.5));
    expect(raw!.score).toBeCloseTo(1 - (1 - geometric) * (1 - 0.1), 5);
    expect(projected!.score).toBeCloseTo(1 - (1 - geometric) * (1 - 0.375), 5);
  });
});

describe('searchByImage with regional matching', () => {
  /** Twelve products at decreasing global similarity to the photo (0.6 down to 0.05), none verifiable. */
  const catalogue = () => rankedCatalogue({ count: 12, top: 0.6 });
  const photo = Buffer.from('query photo');

  /** A regional embedder whose windows are the given products' vectors (one each) and a stranger. */
  function withRegions(w: World, windows: Float32Array[] | Error, topN = 2): SearchDeps {
    const base = reranked(w, 3);
    return {
      ...base,
      vision: async () => ({
        ...(await w.deps.vision()),
        regional: {
          regions: async () => {
            if (windows instanceof Error) throw windows;
            return windows;
          },
        },
      }),
      regional: { topN },
    };
  }

  it('finds a product by the region that holds it, beyond the global shortlist, first', async () => {
    // Prepare: one window is p11's image (cosine ~1), another a stranger
    const w = await catalogue();
    const p11 = (await w.index.getVectors([vectorDocumentId('s', 'p11', 0)])).get(
      vectorDocumentId('s', 'p11', 0),
    )!;
    const d = withRegions(w, [vectorOf(Buffer.from('a window of wall')), p11]);
    // Act
    const hits = await searchByImage(d, { feedId: 's', image: photo, limit: 5, offset: 0 });
    const verified = w.matcher.verified;
    const page = await searchByImage(d, { feedId: 's', image: photo, limit: 2, offset: 1 });
    // Assess: p11 leads on its regional evidence (mapped onto the raw scale: well above p0's 0.6) and was
    // verified along with the global top 3 (and the other regional group, unless it is in that top 3);
    // paging agrees with the full list
    expect(hits[0]!.product.product_id).toBe('p11');
    expect(page.map((h) => h.product.product_id)).toEqual(hits.slice(1, 3).map((h) => h.product.product_id));
    expect(verified).toBeGreaterThanOrEqual(3 + 1);
    expect(hits[0]!.score).toBeGreaterThan(hits[1]!.score);
    expect(hits[0]!.score).toBeLessThan(0.52);
    // Without regional matching p11 is not even in the first five.
    const without = await searchByImage(
      { ...d, regional: undefined },
      { feedId: 's', image: photo, limit: 5, offset: 0 },
    );
    expect(without.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2', 'p3', 'p4']);
    expect(hits.map((h) => h.product.product_id)).toContain('p0');
  });

  it('keeps every page a slice of one list when a region resembles a product beyond the shortlists', async () => {
    // Prepare: a window that is p8's image; p8 is outside the global top 3 and no regional shortlist
    // proposes it (top 0), so only a deeper page's k-NN window reaches it
    const w = await catalogue();
    const p8 = (await w.index.getVectors([vectorDocumentId('s', 'p8', 0)])).get(
      vectorDocumentId('s', 'p8', 0),
    )!;
    const d = withRegions(w, [p8], 0);
    const query = (offset: number, limit: number) => ({ feedId: 's', image: photo, limit, offset });
    // Act
    const all = await searchByImage(d, query(0, 12));
    const pages = [];
    for (const offset of [0, 3, 6, 9]) pages.push(...(await searchByImage(d, query(offset, 3))));
    // Assess: the same groups in the same order with the same scores, p8 in its whole-image place
    expect(pages.map((h) => [h.product.product_id, h.score])).toEqual(
      all.map((h) => [h.product.product_id, h.score]),
    );
    expect(all.map((h) => h.product.product_id).indexOf('p8')).toBe(8);
  });

  it('answers a confidently verified query without waiting for the regions', async () => {
    // Prepare: p2's image is in the photo (40 inliers; p2 is in the global top 3); the regional pass
    // never finishes
    const w = await catalogue();
    await storeFeatures(w, [{ productId: 'p2', image: 'red mug' }]);
    const d = withRegions(w, []);
    let regionalQueries = 0;
    const searchMany = w.index.searchMany.bind(w.index);
    // Regional k-NN queries ask 5 neighbours (the twin search of the verified p2 asks more).
    w.index.searchMany = (queries) => (
      (regionalQueries += queries.filter((q) => q.k === 5).length),
      searchMany(queries)
    );
    const stuck: SearchDeps = {
      ...d,
      vision: async () => ({
        ...(await w.deps.vision()),
        regional: { regions: () => new Promise<Float32Array[]>(() => undefined) },
      }),
    };
    // Act
    const hits = await searchByImage(stuck, {
      feedId: 's',
      image: Buffer.from('query photo: a red mug on a table'),
      limit: 3,
      offset: 0,
    });
    // Assess: and no regional k-NN was asked for
    expect(hits.map((h) => h.product.product_id)).toEqual(['p2', 'p0', 'p1']);
    expect(hits[0]!.score).toBeGreaterThan(0.9);
    expect(regionalQueries).toBe(0);
  });

  it('a failing regional embedder or no regions only loses the regional evidence', async () => {
    const w = await catalogue();
    for (const windows of [new Error('model crashed'), []]) {
      const hits = await searchByImage(withRegions(w, windows), {
        feedId: 's',
        image: photo,
        limit: 3,
        offset: 0,
      });
      expect(hits.map((h) => h.product.product_id)).toEqual(['p0', 'p1', 'p2']);
    }
  });

  it('keeps an unrelated photo under the cut-off when only a region resembles a product', async () => {
    // Prepare: the best window sits at the regional floor's level of an unrelated photo (cosine 0.6)
    const w = await catalogue();
    const window = near('a window of wall', 1, 'x');
    await w.index.upsert([
      {
        id: vectorDocumentId('s', 'p11', 0),
        feedId: 's',
        productId: 'p11',
        itemGroupId: 'p11',
        vector: near('a window of wall', 0.6, 'p11'),
        fields: {},
      },
    ]);
    w.embedder.embed = async () => [vectorOf(Buffer.from('unrelated photo'))];
    // Act
    const scaled = { ...withRegions(w, [window]), cosineScale: { cosineFloor: 0.3, cosineCeiling: 0.65 } };
    const hits = await searchByImage(
      { ...scaled, minScore: 0.4 },
      { feedId: 's', image: photo, limit: 5, offset: 0 },
    );
    const uncut = await searchByImage(
      { ...scaled, minScore: 0 },
      { feedId: 's', image: photo, limit: 5, offset: 0 },
    );
    // Assess: the region does bring p11 first, under the cut-off
    expect(uncut[0]?.product.product_id).toBe('p11');
    expect(uncut[0]!.score).toBeLessThan(0.4);
    expect(hits).toEqual([]);
  });
});
