import { decodeFeatures, encodeFeatures } from '#lib/vision/local-features/codec.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';
import { mapLimit } from '#lib/ingest/concurrency.ts';
import type { FeatureRef, FeatureStore, ObjectStore } from '#lib/ports.ts';

/** Key prefix of every stored feature record (the functions that read or write them are granted it). */
export const FEATURES_ROOT = 'features/';

/** Prefix of every stored feature record of a feed (deleting a feed removes everything under it). */
export function featuresPrefix(feedId: string): string {
  return `${FEATURES_ROOT}${encodeURIComponent(feedId)}/`;
}

/** Object key of one product image's features: `features/{feedId}/{productId}/{imageIndex}.gvlf`. */
export function featuresKey(ref: FeatureRef): string {
  return `${productPrefix(ref.feedId, ref.productId)}${ref.imageIndex}.gvlf`;
}

function productPrefix(feedId: string, productId: string): string {
  return `${featuresPrefix(feedId)}${keySegment(productId)}/`;
}

/**
 * A product id as one segment of a key: URL-encoded, so that product "a" never lists the records of
 * product "a/b", and never "." or "..", which a file-backed store (and any client that normalises
 * paths) reads as the folder itself or its parent: product ".." of every feed shared one record at
 * features/0.gvlf, which no feed's deletion removed.
 */
export function keySegment(id: string): string {
  const encoded = encodeURIComponent(id);
  return encoded === '.' || encoded === '..' ? encoded.replaceAll('.', '%2E') : encoded;
}

interface Cached {
  features: LocalFeatures | undefined;
  at: number;
  /** What the entry holds in typed arrays (what the cache's byte bound counts). */
  bytes: number;
}

/** Bytes of a decoded record's arrays: keypoints and descriptors, of the image and of its mirror. */
function byteSizeOf(features: LocalFeatures | undefined): number {
  if (!features) return 0;
  let bytes = 0;
  for (const set of [features.original, features.mirrored]) {
    if (set) bytes += set.points.byteLength + set.descriptors.byteLength;
  }
  return bytes;
}

export interface FeatureCacheOptions {
  /** Most records kept (0: no cache). */
  cacheItems: number;
  /**
   * Most bytes of decoded arrays kept, whatever the count: records differ in size with their keypoints,
   * and the server's memory budget is in bytes (DESIGN §6). Unbounded when absent.
   */
  cacheBytes?: number;
  ttlMs?: number;
  now?: () => number;
}

/**
 * Feature records in the ObjectStore (S3 in AWS, the S3-protocol server locally), in the versioned,
 * CRC-checked binary form of `encodeFeatures` (~29 KB per catalogue image). Reads go through a bounded
 * in-process LRU of decoded records (misses included, so an item without features costs one read per
 * `ttlMs`; a failed read is not remembered); writes and deletes of this process update it at once, those of another process (the AWS
 * import worker) are seen once the entry is older than `ttlMs`. An unreadable record counts as absent:
 * verification then treats the candidate as unverified rather than failing the search.
 */
export class ObjectStoreFeatureStore implements FeatureStore {
  private readonly cache = new Map<string, Cached>();
  /** Sum of the cached entries' `bytes`. */
  private cachedBytes = 0;
  /**
   * Keys being read from the store, with whether this process wrote or deleted them meanwhile: such a
   * read may carry the record as it was, and is not remembered (it put the old version back in the cache
   * until the TTL).
   */
  private readonly reading = new Map<string, { reads: number; changed: boolean }>();

  constructor(
    private readonly objects: ObjectStore,
    private readonly options: FeatureCacheOptions = { cacheItems: 2000 },
  ) {}

  async put(ref: FeatureRef, features: LocalFeatures): Promise<void> {
    const key = featuresKey(ref);
    await this.objects.put(key, encodeFeatures(features), 'application/octet-stream');
    this.changed(key);
    this.remember(key, features);
  }

  async getMany(refs: readonly FeatureRef[]): Promise<(LocalFeatures | undefined)[]> {
    return Promise.all(
      refs.map(async (ref) => {
        const key = featuresKey(ref);
        const cached = this.cache.get(key);
        if (cached && this.now() - cached.at < this.ttlMs) {
          // Refresh its place in the LRU order (a Map iterates in insertion order; the size is unchanged).
          this.cache.delete(key);
          this.cache.set(key, cached);
          return cached.features;
        }
        const read = this.reading.get(key) ?? { reads: 0, changed: false };
        read.reads += 1;
        this.reading.set(key, read);
        let bytes: Buffer | undefined;
        try {
          bytes = await this.objects.get(key);
        } catch {
          // Store unavailable: unverified this time, and not remembered as absent.
          return undefined;
        } finally {
          read.reads -= 1;
          if (read.reads === 0) this.reading.delete(key);
        }
        let features: LocalFeatures | undefined;
        try {
          features = bytes ? decodeFeatures(bytes) : undefined;
        } catch {
          features = undefined;
        }
        if (!read.changed) this.remember(key, features);
        return features;
      }),
    );
  }

  async deleteProducts(
    feedId: string,
    productIds: readonly string[],
    except: readonly FeatureRef[] = [],
  ): Promise<void> {
    const kept = new Set(except.map(featuresKey));
    // A product's records are listed (it has one per image), 16 products at a time, then deleted together.
    const listed = await mapLimit(productIds, 16, (productId) =>
      this.objects.list(productPrefix(feedId, productId)),
    );
    await this.forget(listed.flat().filter((key) => !kept.has(key)));
  }

  async deleteFeed(feedId: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    // One object per catalogue image, deleted a thousand per call: the feed deletion runs within an API
    // request's time (16 single deletions at a time took over 27 s for 10k images locally), a listed page
    // at a time (S3: 1000 keys), so that it stops between pages when that time is up: listing a large
    // feed's records whole could itself outlast the request.
    for await (const page of this.objects.listPages(featuresPrefix(feedId))) {
      options.signal?.throwIfAborted();
      await this.forget(page);
    }
  }

  private async forget(keys: string[]): Promise<void> {
    await this.objects.deleteMany(keys);
    for (const key of keys) {
      this.changed(key);
      this.drop(key);
    }
  }

  private changed(key: string): void {
    const read = this.reading.get(key);
    if (read) read.changed = true;
  }

  private drop(key: string): void {
    const cached = this.cache.get(key);
    if (!cached) return;
    this.cache.delete(key);
    this.cachedBytes -= cached.bytes;
  }

  private get ttlMs(): number {
    return this.options.ttlMs ?? 5 * 60_000;
  }

  private now(): number {
    return (this.options.now ?? Date.now)();
  }

  private remember(key: string, features: LocalFeatures | undefined): void {
    this.drop(key);
    const bytes = byteSizeOf(features);
    const maxBytes = this.options.cacheBytes ?? Infinity;
    // (A record larger than the whole byte bound is not kept: it would only push every other one out.)
    if (this.options.cacheItems <= 0 || bytes > maxBytes) return;
    this.cache.set(key, { features, at: this.now(), bytes });
    this.cachedBytes += bytes;
    while (this.cache.size > this.options.cacheItems || this.cachedBytes > maxBytes) {
      const oldest = this.cache.keys().next().value;
      if (oldest === undefined) break;
      this.drop(oldest);
    }
  }
}
