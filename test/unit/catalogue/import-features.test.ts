import { describe, expect, it } from 'vitest';
import { featuresKey } from '#lib/adapters/object-store-feature-store.ts';
import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import { runImport } from '#lib/ingest/run-import.ts';
import { startImport } from '#lib/ingest/start-import.ts';
import type { VisualWordDocument, VisualWordHit, VisualWordIndex } from '#lib/ports.ts';
import { CATALOGUE_FEATURES_VERSION } from '#lib/vision/local-features/recipe.ts';
import { VISUAL_WORDS_VERSION } from '#lib/vision/local-features/visual-words.ts';
import { world, type World } from './fakes.ts';

const FEED = 'shop';
const img = (name: string) => `https://cdn.example/${name}.jpg`;

function filesFor(...names: string[]): Map<string, Buffer> {
  return new Map(names.map((name) => [img(name), Buffer.from(`image ${name}`)]));
}

const product = (id: string, extra: Record<string, unknown> = {}) => ({
  id,
  title: `Product ${id}`,
  image_link: img(id),
  price: '10.00 USD',
  ...extra,
});

async function importRows(w: World, rows: Record<string, unknown>[]): Promise<ImportRecord> {
  const queued = await startImport(
    {
      feeds: { get: async (feedId: string) => ({ feedId }) } as never,
      imports: w.imports,
      objects: w.objects,
      dispatcher: { dispatch: async () => undefined },
      clock: w.deps.clock,
    },
    FEED,
    { content: rows.map((row) => JSON.stringify(row)).join('\n'), format: 'jsonl', mode: 'full' },
  );
  return runImport(w.deps, FEED, queued.importId);
}

const featureKeys = (w: World) =>
  [...w.objects.objects.keys()].filter((k) => k.startsWith('features/')).sort();

describe('runImport: local features', () => {
  it('stores catalogue features of every embedded image under its vector document address', async () => {
    // Prepare
    const w = world(filesFor('a', 'b', 'b2'));
    // Act
    const record = await importRows(w, [product('a'), product('b', { additional_image_link: img('b2') })]);
    // Assess
    expect(record.embedded).toBe(2);
    expect(featureKeys(w)).toEqual([
      featuresKey({ feedId: FEED, productId: 'a', imageIndex: 0 }),
      featuresKey({ feedId: FEED, productId: 'b', imageIndex: 0 }),
      featuresKey({ feedId: FEED, productId: 'b', imageIndex: 1 }),
    ]);
    expect(w.matcher.extracted.every((e) => e.role === 'catalogue')).toBe(true);
    const [b1] = await w.features.getMany([{ feedId: FEED, productId: 'b', imageIndex: 1 }]);
    expect(b1?.mirrored).toBeDefined();
  });

  it('extracts nothing again for unchanged images, and replaces the features of a changed image', async () => {
    // Prepare
    const files = filesFor('a', 'b', 'b-new');
    const w = world(files);
    await importRows(w, [product('a'), product('b')]);
    w.matcher.extracted = [];
    // Act: a's title changes (same image), b's image changes
    await importRows(w, [product('a', { title: 'Renamed' }), product('b', { image_link: img('b-new') })]);
    // Assess
    expect(w.matcher.extracted.map((e) => e.text)).toEqual(['image b-new']);
    expect(featureKeys(w)).toHaveLength(2);
    const [a, b] = await w.features.getMany([
      { feedId: FEED, productId: 'a', imageIndex: 0 },
      { feedId: FEED, productId: 'b', imageIndex: 0 },
    ]);
    expect(a).toBeDefined();
    expect(w.matcher.verify(await w.matcher.extract(Buffer.from('image b-new'), 'query'), [b])).toEqual([40]);
  });

  it('removes the features of products a full import no longer lists', async () => {
    const w = world(filesFor('a', 'b'));
    await importRows(w, [product('a'), product('b')]);
    await importRows(w, [product('a')]);
    expect(featureKeys(w)).toEqual([featuresKey({ feedId: FEED, productId: 'a', imageIndex: 0 })]);
  });

  it('gives products imported before local features existed their features at the next import, once', async () => {
    // Prepare: an import without local features
    const w = world(filesFor('a', 'b'));
    const localFeatures = w.deps.localFeatures;
    delete w.deps.localFeatures;
    await importRows(w, [product('a'), product('b')]);
    expect(featureKeys(w)).toEqual([]);
    w.deps.localFeatures = localFeatures;
    // Act
    const backfill = await importRows(w, [product('a'), product('b')]);
    const again = await importRows(w, [product('a'), product('b')]);
    // Assess
    expect(backfill).toMatchObject({ embedded: 2, skipped: 0 });
    expect(featureKeys(w)).toHaveLength(2);
    expect(again).toMatchObject({ embedded: 0, skipped: 2 });
  });

  it('embeds and stores a product whose features cannot be extracted, with no features', async () => {
    // Prepare
    const files = filesFor('a');
    files.set(img('plain'), Buffer.from('NOFEAT plain'));
    const w = world(files);
    // Act
    const record = await importRows(w, [product('a'), product('plain')]);
    // Assess
    expect(record.embedded).toBe(2);
    expect(record.failed).toBe(0);
    expect(featureKeys(w)).toEqual([featuresKey({ feedId: FEED, productId: 'a', imageIndex: 0 })]);
  });

  it('extracts the features of products stored with an older recipe again at the next import, once', async () => {
    // Prepare: a product whose stored features came from recipe 1
    const w = world(filesFor('a', 'b'));
    await importRows(w, [product('a'), product('b')]);
    const a = (await w.products.get(FEED, 'a'))!;
    await w.products.putMany([{ ...a, local_features: CATALOGUE_FEATURES_VERSION - 1 }]);
    w.matcher.extracted = [];
    // Act
    const refreshed = await importRows(w, [product('a'), product('b')]);
    const again = await importRows(w, [product('a'), product('b')]);
    // Assess
    expect(refreshed).toMatchObject({ embedded: 1, skipped: 1 });
    expect(w.matcher.extracted.map((e) => e.text)).toEqual(['image a']);
    expect((await w.products.get(FEED, 'a'))?.local_features).toBe(CATALOGUE_FEATURES_VERSION);
    expect(again).toMatchObject({ embedded: 0, skipped: 2 });
  });

  it('keeps the vectors and features of an older-recipe product whose image cannot be fetched again', async () => {
    // Prepare: product a on recipe 1, then its image server fails and its brand changes
    const w = world(filesFor('a', 'b'));
    await importRows(w, [product('a'), product('b')]);
    const a = (await w.products.get(FEED, 'a'))!;
    await w.products.putMany([{ ...a, local_features: CATALOGUE_FEATURES_VERSION - 1 }]);
    w.fetcher.files.delete(img('a'));
    // Act
    const record = await importRows(w, [product('a', { brand: 'Acme' }), product('b')]);
    // Assess: still searchable, filed under its new brand, on the old recipe, so the next import tries again
    expect(record).toMatchObject({ processed: 2, embedded: 0, skipped: 1, failed: 1 });
    expect(record.errors).toEqual([
      expect.objectContaining({
        productId: 'a',
        message: expect.stringContaining('keeps its stored vectors'),
        // Counted in failed, as its row's error.
        severity: 'error',
      }),
    ]);
    const stored = (await w.products.get(FEED, 'a'))!;
    expect(stored).toMatchObject({ vector_count: 1, local_features: CATALOGUE_FEATURES_VERSION - 1 });
    expect(stored.brand).toBe('Acme');
    expect([...w.index.docs.values()].filter((d) => d.productId === 'a')).toEqual([
      expect.objectContaining({ fields: expect.objectContaining({ brand: ['acme'] }) }),
    ]);
    expect(featureKeys(w)).toContain(featuresKey({ feedId: FEED, productId: 'a', imageIndex: 0 }));
    // Act: the image is back
    w.fetcher.files.set(img('a'), Buffer.from('image a'));
    const next = await importRows(w, [product('a', { brand: 'Acme' }), product('b')]);
    // Assess
    expect(next).toMatchObject({ embedded: 1, skipped: 1, failed: 0 });
    expect((await w.products.get(FEED, 'a'))?.local_features).toBe(CATALOGUE_FEATURES_VERSION);
  });

  it('does not keep the vectors of a product whose images changed and cannot be fetched', async () => {
    // Prepare
    const w = world(filesFor('a', 'b'));
    await importRows(w, [product('a'), product('b')]);
    // Act: a new image link that does not answer
    const record = await importRows(w, [product('a', { image_link: img('gone') }), product('b')]);
    // Assess
    expect(record).toMatchObject({ embedded: 0, skipped: 1, failed: 1 });
    expect((await w.products.get(FEED, 'a'))?.vector_count).toBe(0);
    expect([...w.index.docs.values()].map((d) => d.productId)).toEqual(['b']);
  });
});

describe('runImport: visual words', () => {
  /** A word index that keeps documents by id (a fake of our own port). */
  class RecordingWordIndex implements VisualWordIndex {
    readonly docs = new Map<string, VisualWordDocument>();
    flushed = 0;
    async upsert(documents: VisualWordDocument[]) {
      for (const d of documents) this.docs.set(d.id, d);
    }
    async deleteProducts(feedId: string, productIds: string[], except: readonly string[] = []) {
      for (const [id, d] of this.docs)
        if (d.feedId === feedId && productIds.includes(d.productId) && !except.includes(id))
          this.docs.delete(id);
    }
    async deleteFeed(feedId: string) {
      for (const [id, d] of this.docs) if (d.feedId === feedId) this.docs.delete(id);
    }
    async search(): Promise<VisualWordHit[]> {
      return [];
    }
    /** The documents as of the last flush: what a local index would find again after a restart. */
    durable = new Set<string>();
    async flush() {
      this.flushed += 1;
      this.durable = new Set(this.docs.keys());
    }
  }

  function withWords(w: World): RecordingWordIndex {
    const words = new RecordingWordIndex();
    w.deps.localFeatures = { ...w.deps.localFeatures!, words };
    return words;
  }

  it('indexes the words of every image with its item group, durable before the records that say so', async () => {
    // Prepare: every product record stored with its words' version must find its words flushed (a
    // process killed in between would leave records that later imports skip, without words behind them)
    const w = world(filesFor('a', 'b', 'b2'));
    const words = withWords(w);
    const missing: string[] = [];
    const putMany = w.products.putMany.bind(w.products);
    w.products.putMany = async (products) => {
      for (const p of products)
        if (p.visual_words !== undefined && !words.durable.has(`${p.feed_id}/${p.product_id}/0`))
          missing.push(p.product_id);
      return putMany(products);
    };
    // Act
    await importRows(w, [
      product('a', { item_group_id: 'g' }),
      product('b', { additional_image_link: img('b2') }),
    ]);
    // Assess
    expect([...words.docs.keys()].sort()).toEqual(['shop/a/0', 'shop/b/0', 'shop/b/1']);
    expect(words.docs.get('shop/a/0')).toMatchObject({ feedId: FEED, productId: 'a', itemGroupId: 'g' });
    expect(words.docs.get('shop/a/0')!.words.length).toBeGreaterThan(0);
    expect(missing).toEqual([]);
    expect((await w.products.get(FEED, 'a'))?.visual_words).toBe(VISUAL_WORDS_VERSION);
  });

  it('removes the words of changed and unlisted products; a product moving group is indexed again', async () => {
    // Prepare
    const w = world(filesFor('a', 'b', 'c', 'c-new'));
    const words = withWords(w);
    await importRows(w, [product('a'), product('b'), product('c')]);
    w.matcher.extracted = [];
    // The removal saves b's removed words before its record goes (a kill in between would leave words
    // of a product that is gone, taking shortlist places)
    const stillDurable: string[] = [];
    const deleteMany = w.products.deleteMany.bind(w.products);
    w.products.deleteMany = async (feedId, ids) => {
      for (const id of ids) if (words.durable.has(`${feedId}/${id}/0`)) stillDurable.push(id);
      return deleteMany(feedId, ids);
    };
    // Act: a moves to group g (same image), b is no longer listed, c's image changes
    await importRows(w, [product('a', { item_group_id: 'g' }), product('c', { image_link: img('c-new') })]);
    // Assess
    expect(stillDurable).toEqual([]);
    expect([...words.docs.keys()].sort()).toEqual(['shop/a/0', 'shop/c/0']);
    expect(words.docs.get('shop/a/0')!.itemGroupId).toBe('g');
    expect(w.matcher.extracted.map((e) => e.text).sort()).toEqual(['image a', 'image c-new']);
  });

  it('keeps the vectors of a product moving group whose image cannot be fetched, without its old words', async () => {
    // Prepare: a and b in no group; then a moves to group g while its image server fails
    const w = world(filesFor('a', 'b'));
    const words = withWords(w);
    await importRows(w, [product('a'), product('b')]);
    w.fetcher.files.delete(img('a'));
    // Act
    const record = await importRows(w, [product('a', { item_group_id: 'g' }), product('b')]);
    // Assess: still searchable, filed under g; its words (filed under the group it left) are gone, and
    // its record says so, so that the next import extracts them again
    expect(record).toMatchObject({ status: 'succeeded', embedded: 0, skipped: 1, failed: 1, removed: 0 });
    expect(record.errors).toEqual([
      expect.objectContaining({
        productId: 'a',
        message: expect.stringContaining('keeps its stored vectors'),
      }),
    ]);
    const stored = (await w.products.get(FEED, 'a'))!;
    expect(stored).toMatchObject({ item_group_id: 'g', vector_count: 1 });
    expect(stored.visual_words).toBeUndefined();
    expect(w.index.docs.get('shop/a/0')).toMatchObject({ productId: 'a', itemGroupId: 'g' });
    expect([...words.docs.keys()]).toEqual(['shop/b/0']);
    // Act: the image is back
    w.fetcher.files.set(img('a'), Buffer.from('image a'));
    const next = await importRows(w, [product('a', { item_group_id: 'g' }), product('b')]);
    // Assess
    expect(next).toMatchObject({ embedded: 1, skipped: 1, failed: 0 });
    expect(words.docs.get('shop/a/0')).toMatchObject({ itemGroupId: 'g' });
    expect((await w.products.get(FEED, 'a'))?.visual_words).toBe(VISUAL_WORDS_VERSION);
  });

  it('keeps what an unfetched older-recipe product has while its chunk re-extracts the others', async () => {
    // Prepare: a (two images) and b both on recipe 1; a's image server fails
    const w = world(filesFor('a', 'a2', 'b'));
    const words = withWords(w);
    const rows = [product('a', { additional_image_link: img('a2') }), product('b')];
    await importRows(w, rows);
    const stored = await w.products.getMany(FEED, ['a', 'b']);
    await w.products.putMany(
      [...stored.values()].map((p) => ({ ...p, local_features: CATALOGUE_FEATURES_VERSION - 1 })),
    );
    w.fetcher.files.delete(img('a'));
    w.fetcher.files.delete(img('a2'));
    // Act: b is extracted again (its old records are removed in the same chunk); a is listed twice
    const record = await importRows(w, [...rows, product('a')]);
    // Assess: a keeps its vectors, features and words; b is current
    expect(record).toMatchObject({ embedded: 1, failed: 2 });
    expect([...w.index.docs.keys()].sort()).toEqual(['shop/a/0', 'shop/a/1', 'shop/b/0']);
    expect([...words.docs.keys()].sort()).toEqual(['shop/a/0', 'shop/a/1', 'shop/b/0']);
    expect(featureKeys(w)).toEqual(
      ['a', 'a', 'b'].map((productId, i) => featuresKey({ feedId: FEED, productId, imageIndex: i % 2 })),
    );
    expect((await w.products.get(FEED, 'b'))?.local_features).toBe(CATALOGUE_FEATURES_VERSION);
    // Assess: the note is on a's main-image error only
    const noted = record.errors.filter((e) => e.message.includes('keeps its stored vectors'));
    expect(noted).toEqual([expect.objectContaining({ row: 1, productId: 'a' })]);
    expect(noted[0]!.message).toMatch(/^image_link /);
    // (One error for a's row: its additional image's failure is not reported besides its main image's.)
    expect(record.errors.map((e) => e.row).sort()).toEqual([1, 3]);
  });

  it('replaces a changed product in place, so it stays searchable and verifiable throughout', async () => {
    // Prepare: a has two images; its new version has one, a new one
    const w = world(filesFor('a', 'a2', 'a-new'));
    const words = withWords(w);
    await importRows(w, [product('a', { additional_image_link: img('a2') })]);
    const gaps: string[] = [];
    const watch = <T extends object>(target: T, method: keyof T & string) => {
      const original = (target[method] as (...args: unknown[]) => Promise<unknown>).bind(target);
      (target as Record<string, unknown>)[method] = async (...args: unknown[]) => {
        const out = await original(...args);
        const [features] = await w.features.getMany([{ feedId: FEED, productId: 'a', imageIndex: 0 }]);
        if (!w.index.docs.has('shop/a/0') || !features || !words.docs.has('shop/a/0'))
          gaps.push(`after ${method}`);
        return out;
      };
    };
    watch(w.index, 'upsert');
    watch(w.index, 'deleteProducts');
    watch(words, 'upsert');
    watch(words, 'deleteProducts');
    watch(w.features, 'put');
    watch(w.features, 'deleteProducts');
    // Act
    await importRows(w, [product('a', { image_link: img('a-new') })]);
    // Assess: never without its first image; the second image is gone everywhere
    expect(gaps).toEqual([]);
    expect([...w.index.docs.keys()]).toEqual(['shop/a/0']);
    expect([...words.docs.keys()]).toEqual(['shop/a/0']);
    expect(featureKeys(w)).toEqual([featuresKey({ feedId: FEED, productId: 'a', imageIndex: 0 })]);
    expect(w.matcher.extracted.at(-1)?.text).toBe('image a-new');
  });

  it('removes the old features and words of an image whose new version yields none', async () => {
    // Prepare
    const w = world(new Map([...filesFor('a'), [img('a-new'), Buffer.from('NOFEAT a-new')]]));
    const words = withWords(w);
    await importRows(w, [product('a')]);
    // Act
    const record = await importRows(w, [product('a', { image_link: img('a-new') })]);
    // Assess: embedded with the new image, and nothing of the old image's keypoints left
    expect(record.embedded).toBe(1);
    expect(w.index.docs.has('shop/a/0')).toBe(true);
    expect(featureKeys(w)).toEqual([]);
    expect(words.docs.size).toBe(0);
  });

  it('gives products imported without a word index their words at the next import, once', async () => {
    // Prepare
    const w = world(filesFor('a'));
    await importRows(w, [product('a')]);
    const words = withWords(w);
    // Act
    const backfill = await importRows(w, [product('a')]);
    const again = await importRows(w, [product('a')]);
    // Assess
    expect(backfill).toMatchObject({ embedded: 1, skipped: 0 });
    expect(words.docs.size).toBe(1);
    expect(again).toMatchObject({ embedded: 0, skipped: 1 });
  });
});
