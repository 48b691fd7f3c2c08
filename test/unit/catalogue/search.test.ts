import { describe, expect, it } from 'vitest';
import { NotFoundError } from '#lib/domain/errors.ts';
import {
  contentHash,
  imageSearchItem,
  type Product,
  relatedItem,
  rootSearchItem,
  vectorDocumentId,
} from '#lib/domain/products.ts';
import { detectObjects, relatedProducts, searchByImage, type SearchDeps } from '#lib/domain/search.ts';
import { fakeInspector, vectorOf, world, type World } from './fakes.ts';

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
    expect(hits[0]?.score).toBe(1);
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

  it('never returns another feed’s products and answers [] for an empty feed without the models', async () => {
    const w = world();
    await seed(w, [{ product: make('other', 'x'), image: 'x' }]);
    const d = { ...deps(w), vision: () => Promise.reject(new Error('models must not load')) };
    expect(await searchByImage(d, { feedId: 's', image: Buffer.from('x'), limit: 10, offset: 0 })).toEqual(
      [],
    );
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

describe('detectObjects', () => {
  it('adds the products of each detected object with OD+SEARCH', async () => {
    const w = world();
    await seed(w, [{ product: make('s', 'p1'), image: 'whole' }]);
    w.detections.push({ box: [0, 0, 5, 5], label: 'cup', score: 0.9 });
    const result = await detectObjects(deps(w), {
      feedId: 's',
      image: Buffer.from('whole'),
      search: true,
      limit: 3,
    });
    expect(result.objects).toHaveLength(1);
    expect(result.objects[0]?.products?.[0]?.product.product_id).toBe('p1');
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

  it('root search: prices as strings and the score under the empty-named property', () => {
    const item = rootSearchItem(hit);
    expect(item).toMatchObject({ price: '1000', sale_price: '', '': '0.750000', id: hit.product.id });
    expect(item).not.toHaveProperty('variants');
  });
});
