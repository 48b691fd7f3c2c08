/**
 * Grows a feed to a large catalogue by writing synthetic products straight into the local stack's stores
 * (no fetch, no model), around a few real products imported the normal way: each synthetic product gets a
 * vector drawn around a real product's embedding (clustered, like a real catalogue; uniform random
 * vectors are HNSW's worst case and no catalogue looks like them), a copy of that product's stored local
 * features (so every re-ranked candidate has some) and visual words (so the keypoint shortlist searches an
 * index of the full size). Used by bench/search.ts and bench/memory.ts.
 */
import { contentHash, filterFieldsOf, type Product, vectorDocumentId } from '#lib/domain/products.ts';
import { featuresKey } from '#lib/adapters/object-store-feature-store.ts';
import type { Container } from '#lib/container.ts';
import { mapLimit } from '#lib/ingest/concurrency.ts';
import { decodeFeatures } from '#lib/vision/local-features/codec.ts';
import { SLICE_SPAN, visualWords } from '#lib/vision/local-features/visual-words.ts';
import type { VectorDocument } from '#lib/ports.ts';

/** What the synthetic products are drawn around: real products of the feed, imported the normal way. */
export interface GrowthSeeds {
  vectors: Float32Array[];
  /** Stored local features (encoded), per seed; undefined where the import stored none. */
  features: (Buffer | undefined)[];
  words: (Float64Array | undefined)[];
  /** A stored product whose fields the synthetic ones copy. */
  template: Product;
}

export async function readSeeds(c: Container, feedId: string, productIds: string[]): Promise<GrowthSeeds> {
  const vectors = await c.vectors();
  const byId = await vectors.getVectors(productIds.map((id) => vectorDocumentId(feedId, id, 0)));
  const seeds = productIds.filter((id) => byId.has(vectorDocumentId(feedId, id, 0)));
  const features = await Promise.all(
    seeds.map((productId) => c.objects.get(featuresKey({ feedId, productId, imageIndex: 0 }))),
  );
  const template = await c.products.get(feedId, seeds[0]!);
  if (!template) throw new Error(`no product ${seeds[0]} in feed ${feedId}`);
  return {
    vectors: seeds.map((id) => byId.get(vectorDocumentId(feedId, id, 0))!),
    features,
    words: features.map((bytes) => (bytes ? visualWords(decodeFeatures(bytes)) : undefined)),
    template,
  };
}

export interface GrowthOptions {
  feedId: string;
  /** Synthetic products `s<from>` … `s<to − 1>`; product i is drawn around seed i mod seeds. */
  from: number;
  to: number;
  random: () => number;
  categories: string[];
  /**
   * `copy`: a synthetic product has exactly its seed's words (each word's postings run then holds every
   * copy: longer runs than a real catalogue's). `own`: the seed's words with their 32 bits XORed with a
   * mask of the product's own, as many and spread over the slices alike, but shared with no other image
   * (a real catalogue's images have words of their own; the memory of the index depends on their number).
   */
  words: 'copy' | 'own';
}

const BATCH = 500;

export async function growFeed(c: Container, seeds: GrowthSeeds, options: GrowthOptions): Promise<void> {
  const { feedId, random, categories } = options;
  const vectors = await c.vectors();
  const now = new Date().toISOString();
  for (let start = options.from; start < options.to; start += BATCH) {
    const products: Product[] = [];
    const documents: VectorDocument[] = [];
    for (let i = start; i < Math.min(options.to, start + BATCH); i += 1) {
      const content = {
        ...seeds.template,
        product_id: `s${i}`,
        item_group_id: '',
        title: `Synthetic ${i}`,
        color: ['red', 'blue', 'green'][i % 3]!,
        category: categories[i % categories.length]!,
      };
      const product: Product = {
        ...content,
        id: crypto.randomUUID(),
        group: `s${i}`,
        update_hash: '',
        version: 1,
        created_at: now,
        updated_at: now,
        vector_count: 1,
      };
      product.update_hash = contentHash(product);
      const base = seeds.vectors[i % seeds.vectors.length]!;
      const vector = new Float32Array(base.length);
      let norm = 0;
      for (let d = 0; d < base.length; d += 1) {
        vector[d] = base[d]! + (random() - 0.5) * 0.08;
        norm += vector[d]! ** 2;
      }
      for (let d = 0; d < base.length; d += 1) vector[d] = vector[d]! / Math.sqrt(norm);
      products.push(product);
      documents.push({
        id: vectorDocumentId(feedId, product.product_id, 0),
        feedId,
        productId: product.product_id,
        itemGroupId: product.group,
        vector,
        fields: filterFieldsOf(product),
      });
    }
    await vectors.upsert(documents);
    await c.products.putMany(products);
    const seedOf = (product: Product) => Number(product.product_id.slice(1)) % seeds.vectors.length;
    await mapLimit(products, 16, async (product) => {
      const bytes = seeds.features[seedOf(product)];
      if (bytes)
        await c.objects.put(featuresKey({ feedId, productId: product.product_id, imageIndex: 0 }), bytes);
    });
    await c.visualWords.upsert(
      products.flatMap((product) => {
        const words = seeds.words[seedOf(product)];
        if (!words) return [];
        return [
          {
            id: vectorDocumentId(feedId, product.product_id, 0),
            feedId,
            productId: product.product_id,
            itemGroupId: product.group,
            words: options.words === 'copy' ? words : ownWords(words, random),
          },
        ];
      }),
    );
  }
  await vectors.flush();
  await c.visualWords.flush();
}

/** The words with their bits XORed with one random 32-bit mask: distinct as before, in the same slices. */
function ownWords(words: Float64Array, random: () => number): Float64Array {
  const mask = Math.floor(random() * SLICE_SPAN);
  return words.map((word) => {
    const slice = Math.floor(word / SLICE_SPAN);
    return slice * SLICE_SPAN + (((word - slice * SLICE_SPAN) ^ mask) >>> 0);
  });
}
