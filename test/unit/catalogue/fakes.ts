import { createHash } from 'node:crypto';
import { FetchError, type ImportRecord } from '#lib/domain/catalogue/imports.ts';
import { DomainError, InvalidImageError, ValidationError } from '#lib/domain/errors.ts';
import type { Feed } from '#lib/domain/feeds.ts';
import type { Product } from '#lib/domain/products.ts';
import { MAX_PRODUCT_ID_LENGTH } from '#lib/domain/schemas.ts';
import { ObjectStoreFeatureStore } from '#lib/adapters/object-store-feature-store.ts';
import type { IngestDeps } from '#lib/ingest/run-import.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';
import type {
  DetectedObject,
  Embedder,
  FeedFileStore,
  FeedStore,
  FetchLimits,
  ImageFetcher,
  ImageInspector,
  ImportStore,
  LocalFeatureMatcher,
  ObjectStore,
  PixelBox,
  ProductStore,
  VectorDocument,
  VectorHit,
  VectorIndex,
  VectorQuery,
} from '#lib/ports.ts';

/**
 * String order of DynamoDB's sort keys: by UTF-8 bytes, which differs from JavaScript's `<` (UTF-16 code
 * units) for characters past U+FFFF against U+E000–U+FFFF.
 */
const byUtf8 = (a: string, b: string) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));

/** In-memory fakes of the catalogue's ports, for use-case tests. */
export class MemoryProductStore implements ProductStore {
  readonly rows = new Map<string, Product>();
  private key = (feedId: string, productId: string) => `${feedId}\u0000${productId}`;
  async hasProducts(feedId: string) {
    return [...this.rows.values()].some((p) => p.feed_id === feedId);
  }
  async get(feedId: string, productId: string) {
    const p = this.rows.get(this.key(feedId, productId));
    return p && structuredClone(p);
  }
  async getMany(feedId: string, ids: string[]) {
    const out = new Map<string, Product>();
    for (const id of ids) {
      const p = await this.get(feedId, id);
      if (p) out.set(id, p);
    }
    return out;
  }
  async listGroup(feedId: string, group: string) {
    return this.all(feedId).filter((p) => p.group === group);
  }
  async putMany(products: Product[]) {
    for (const p of products) this.rows.set(this.key(p.feed_id, p.product_id), structuredClone(p));
  }
  async deleteMany(feedId: string, ids: string[]) {
    for (const id of ids) this.rows.delete(this.key(feedId, id));
  }
  /** As DynamoDbProductStore pages: in the table's key order, the cursor a product id in base64url. */
  async page(feedId: string, limit: number, cursor?: string) {
    let after: string | undefined;
    if (cursor) {
      // A cursor it did not write is refused, as the adapter refuses it (not read as some product id).
      after = Buffer.from(cursor, 'base64url').toString('utf8');
      if (
        after.length === 0 ||
        after.length > MAX_PRODUCT_ID_LENGTH ||
        Buffer.from(after, 'utf8').toString('base64url') !== cursor
      )
        throw new ValidationError('Invalid cursor.', [
          { path: 'cursor', message: 'not a cursor of this listing' },
        ]);
    }
    const all = this.all(feedId)
      .sort((a, b) => byUtf8(a.product_id, b.product_id))
      .filter((p) => after === undefined || byUtf8(p.product_id, after) > 0);
    const items = all.slice(0, limit);
    const last = items.at(-1)?.product_id;
    return {
      items,
      ...(all.length > limit && last !== undefined
        ? { cursor: Buffer.from(last, 'utf8').toString('base64url') }
        : {}),
    };
  }
  async listUnseen(feedId: string, importId: string) {
    return this.all(feedId)
      .filter((p) => p.seen_import !== importId)
      .map((p) => p.product_id);
  }
  async deleteFeed(feedId: string) {
    for (const p of this.all(feedId)) this.rows.delete(this.key(feedId, p.product_id));
  }
  all(feedId: string): Product[] {
    return [...this.rows.values()]
      .filter((p) => p.feed_id === feedId)
      .sort((a, b) => (a.product_id < b.product_id ? -1 : 1));
  }
}

/**
 * As DynamoDbImportStore keeps them: ids sorted in the table's key order, and only ids starting with
 * `imp_` (every import's; the adapter's lease shares the table) are found.
 */
export class MemoryImportStore implements ImportStore {
  readonly rows = new Map<string, ImportRecord>();
  puts = 0;
  /** Throws on the n-th put (simulates a crash mid-import). */
  failOnPut?: number;
  async create(record: ImportRecord) {
    const key = `${record.feedId}/${record.importId}`;
    if (this.rows.has(key)) throw new DomainError('conflict', `Import ${record.importId} already exists.`);
    this.rows.set(key, structuredClone(record));
  }
  async get(feedId: string, importId: string) {
    const r = this.rows.get(`${feedId}/${importId}`);
    return r && r.importId.startsWith('imp_') ? structuredClone(r) : undefined;
  }
  async list(feedId: string, limit: number, after?: string) {
    return this.imports(feedId)
      .filter((r) => after === undefined || byUtf8(r.importId, after) < 0)
      .reverse()
      .slice(0, limit)
      .map((r) => structuredClone(r));
  }
  /** The feed's imports, oldest first. */
  private imports(feedId: string) {
    return [...this.rows.values()]
      .filter((r) => r.feedId === feedId && r.importId.startsWith('imp_'))
      .sort((a, b) => byUtf8(a.importId, b.importId));
  }
  async page(feedId: string, limit: number, after?: string) {
    const records = await this.list(feedId, limit + 1, after);
    return { records: records.slice(0, limit), more: records.length > limit };
  }
  async put(record: ImportRecord) {
    this.puts += 1;
    if (this.failOnPut === this.puts) throw new Error('crash');
    this.rows.set(`${record.feedId}/${record.importId}`, structuredClone(record));
  }
  async listUnfinished(feedId: string) {
    return this.imports(feedId)
      .filter((r) => r.status === 'queued' || r.status === 'running')
      .map((r) => structuredClone(r));
  }
  async delete(feedId: string, importId: string) {
    this.rows.delete(`${feedId}/${importId}`);
  }
  async deleteFeed(feedId: string) {
    for (const [key, record] of this.rows) if (record.feedId === feedId) this.rows.delete(key);
  }
  readonly leases = new Map<string, { owner: string; until: Date }>();
  async takeLease(feedId: string, owner: string, until: Date, now: Date) {
    const held = this.leases.get(feedId);
    if (held && held.owner !== owner && held.until >= now) return false;
    this.leases.set(feedId, { owner, until });
    return true;
  }
  async renewLease(feedId: string, owner: string, until: Date) {
    if (this.leases.get(feedId)?.owner !== owner) return false;
    this.leases.set(feedId, { owner, until });
    return true;
  }
  async leasedFeeds() {
    return [...this.leases.keys()];
  }
  async releaseLease(feedId: string, owner?: string) {
    if (owner === undefined || this.leases.get(feedId)?.owner === owner) this.leases.delete(feedId);
  }
}

export class MemoryObjectStore implements ObjectStore, FeedFileStore {
  readonly objects = new Map<string, Buffer>();
  async put(key: string, body: Buffer | string) {
    this.objects.set(key, Buffer.from(body));
  }
  async get(key: string) {
    return this.objects.get(key);
  }
  async delete(key: string) {
    this.objects.delete(key);
  }
  async deleteMany(keys: readonly string[]) {
    for (const key of keys) this.objects.delete(key);
  }
  async list(prefix: string) {
    return [...this.objects.keys()].filter((k) => k.startsWith(prefix));
  }
  /** Pages of 1000, as S3 lists them. */
  async *listPages(prefix: string) {
    const keys = await this.list(prefix);
    for (let i = 0; i < keys.length; i += 1000) yield keys.slice(i, i + 1000);
  }
  async write(key: string, body: AsyncIterable<Uint8Array>) {
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(Buffer.from(chunk));
    this.objects.set(key, Buffer.concat(chunks));
    return this.objects.get(key)!.length;
  }
  async read(key: string) {
    const bytes = this.objects.get(key);
    if (!bytes) return undefined;
    // Small chunks, so readers see records split across chunk boundaries.
    return (async function* () {
      for (let i = 0; i < bytes.length; i += 64) yield bytes.subarray(i, i + 64);
    })();
  }
}

/** Serves URLs from a map; anything else is unreachable. Counts fetches. */
export class MapFetcher implements ImageFetcher {
  fetched: string[] = [];
  /** Runs first in every fetch: a delay, or a side effect when a given URL is asked for. */
  before: (url: string) => unknown = () => undefined;
  constructor(readonly files: Map<string, Buffer>) {}
  async fetch(url: string, _limits: FetchLimits) {
    await this.before(url);
    this.fetched.push(url);
    const bytes = this.files.get(url);
    if (!bytes) throw new FetchError('HTTP 404.');
    return { bytes, contentType: undefined, url };
  }
  async open(url: string, limits: FetchLimits) {
    const { bytes } = await this.fetch(url, limits);
    return {
      body: (async function* () {
        yield bytes;
      })(),
      contentType: undefined,
      url,
    };
  }
}

/** Accepts any bytes except those starting with "BAD" (refused as the real inspector refuses junk). */
export const fakeInspector: ImageInspector = {
  async inspect(bytes) {
    if (bytes.subarray(0, 3).toString() === 'BAD')
      throw new InvalidImageError({ reason: 'undecodable', problem: 'the data is not a decodable image' });
    return { format: 'png', width: 10, height: 10 };
  },
  async crops(bytes, boxes) {
    return boxes.map(() => bytes);
  },
  async bounded(bytes) {
    return { bytes, width: 10, height: 10 };
  },
};

/** A unit vector derived from the bytes' hash: identical bytes → identical vectors. */
export function vectorOf(bytes: Buffer, dimension = 16): Float32Array {
  const digest = createHash('sha256').update(bytes).digest();
  const v = new Float32Array(dimension);
  for (let i = 0; i < dimension; i += 1) v[i] = (digest[i % digest.length]! - 128) / 128;
  const norm = Math.hypot(...v);
  return v.map((x) => x / norm);
}

export class FakeEmbedder implements Embedder {
  readonly dimension = 16;
  modelVersion = 'fake-1';
  embedded = 0;
  async embed(images: Buffer[]) {
    this.embedded += images.length;
    return images.map((image) => vectorOf(image));
  }
}

/**
 * Local features that carry the image's text (as keypoint coordinates, which survive the real codec), and
 * a verification that finds many inliers when the query's text contains the candidate's: a query
 * "scene with red mug" verifies the item "red mug" (40 inliers; "partly red mug": 9, nearly verified;
 * anything else: 2, chance). Images starting with "NOFEAT" fail extraction. A photo
 * "<scene> | small: <object>" shows an object too small for the whole photo's keypoints: extracted whole it
 * is "<scene>", and "<object>" only when a region of it is extracted.
 */
export class FakeFeatureMatcher implements LocalFeatureMatcher {
  extracted: { text: string; role: string; region?: PixelBox }[] = [];
  verified = 0;
  async extract(image: Buffer, role: 'catalogue' | 'query', region?: PixelBox): Promise<LocalFeatures> {
    const [whole, small] = image.toString('utf8').split(' | small: ');
    const text = region ? (small ?? whole!) : whole!;
    if (text.startsWith('NOFEAT')) throw new Error('no features');
    this.extracted.push({ text, role, ...(region ? { region } : {}) });
    const codes = [...text].map((c) => c.codePointAt(0)! % 4096);
    if (codes.length % 2 === 1) codes.push(0);
    const count = codes.length / 2;
    const set = {
      width: 1000,
      height: 1000,
      points: Float32Array.from(codes),
      descriptors: new Uint32Array(count * 8),
    };
    return role === 'catalogue' ? { original: set, mirrored: set } : { original: set };
  }
  verify(query: LocalFeatures, candidates: readonly (LocalFeatures | undefined)[]): number[] {
    this.verified += candidates.length;
    const q = textOf(query);
    return candidates.map((c) => {
      const text = c ? textOf(c) : '';
      if (text === '') return 2;
      if (q.includes(`partly ${text}`)) return 9;
      return q.includes(text) ? 40 : 2;
    });
  }
}

function textOf(features: LocalFeatures): string {
  return String.fromCodePoint(...[...features.original.points].filter((c) => c !== 0));
}

export class MemoryVectorIndex implements VectorIndex {
  readonly dimension = 16;
  readonly docs = new Map<string, VectorDocument>();
  async upsert(documents: VectorDocument[]) {
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
  async search(query: VectorQuery): Promise<VectorHit[]> {
    const hits: VectorHit[] = [];
    for (const d of this.docs.values()) {
      if (d.feedId !== query.feedId || query.excludeItemGroupIds?.includes(d.itemGroupId)) continue;
      const pass = Object.entries(query.filter ?? {}).every(([key, values]) =>
        (d.fields[key] ?? []).some((v) => values.includes(v)),
      );
      if (!pass) continue;
      let dot = 0;
      for (let i = 0; i < d.vector.length; i += 1) dot += d.vector[i]! * query.vector[i]!;
      hits.push({ id: d.id, productId: d.productId, itemGroupId: d.itemGroupId, similarity: dot });
    }
    return hits
      .sort((a, b) => b.similarity - a.similarity || (a.productId < b.productId ? -1 : 1))
      .slice(0, query.k);
  }
  async searchMany(queries: VectorQuery[]): Promise<VectorHit[][]> {
    const lists: VectorHit[][] = [];
    for (const query of queries) lists.push(await this.search(query));
    return lists;
  }
  async getVectors(ids: string[]) {
    const out = new Map<string, Float32Array>();
    for (const id of ids) {
      const d = this.docs.get(id);
      if (d) out.set(id, d.vector);
    }
    return out;
  }
  async count(feedId: string) {
    return [...this.docs.values()].filter((d) => d.feedId === feedId).length;
  }
  /** The documents as of the last flush: what a local index would find again after a restart. */
  durable = new Set<string>();
  async flush() {
    this.durable = new Set(this.docs.keys());
  }
}

/**
 * The feed lookups of imports: every feed exists (created before any import) unless a test deletes it,
 * starts its deletion, or re-creates it; `afterGets` runs a test's step after the n-th lookup.
 */
export class LiveFeeds implements Pick<FeedStore, 'get'> {
  readonly gone = new Set<string>();
  readonly deleting = new Set<string>();
  readonly recreated = new Set<string>();
  gets = 0;
  afterGets = new Map<number, () => void>();
  async get(feedId: string): Promise<Feed | undefined> {
    this.gets += 1;
    this.afterGets.get(this.gets)?.();
    if (this.gone.has(feedId)) return undefined;
    return {
      feedId,
      name: feedId,
      plan: 'free',
      domains: [],
      requireOrigin: false,
      createdAt: this.recreated.has(feedId) ? '2026-11-23T00:00:00.000Z' : '2026-11-01T00:00:00.000Z',
      updatedAt: '2026-11-01T00:00:00.000Z',
      ...(this.deleting.has(feedId) ? { deletingAt: '2026-11-22T12:00:00.000Z' } : {}),
    };
  }
}

export interface World {
  deps: IngestDeps;
  feeds: LiveFeeds;
  products: MemoryProductStore;
  imports: MemoryImportStore;
  objects: MemoryObjectStore;
  fetcher: MapFetcher;
  embedder: FakeEmbedder;
  index: MemoryVectorIndex;
  detections: DetectedObject[];
  /** The real feature store over `objects`, with the fake matcher's features. */
  features: ObjectStoreFeatureStore;
  matcher: FakeFeatureMatcher;
}

/** Every port faked, wired like the container wires the real adapters. */
export function world(files = new Map<string, Buffer>()): World {
  const feeds = new LiveFeeds();
  const products = new MemoryProductStore();
  const imports = new MemoryImportStore();
  const objects = new MemoryObjectStore();
  const fetcher = new MapFetcher(files);
  const embedder = new FakeEmbedder();
  const index = new MemoryVectorIndex();
  const detections: DetectedObject[] = [];
  const features = new ObjectStoreFeatureStore(objects, { cacheItems: 100 });
  const matcher = new FakeFeatureMatcher();
  let tick = Date.parse('2026-11-22T00:00:00Z');
  const deps: IngestDeps = {
    feeds,
    products,
    imports,
    feedFiles: objects,
    objects,
    fetcher,
    images: fakeInspector,
    clock: { now: () => new Date((tick += 1000)) },
    vision: async () => ({
      embedder,
      detector: {
        // Every detection, or those at or above the call's threshold when it gives one.
        detect: async (_image: Buffer, options?: { scoreThreshold?: number }) =>
          detections.filter((d) => d.score >= (options?.scoreThreshold ?? 0)),
      },
    }),
    vectors: async () => index,
    localFeatures: { store: features, matcher: async () => matcher },
    limits: {
      image: { maxBytes: 1e6, timeoutMs: 1000 },
      feed: { maxBytes: 1e7, timeoutMs: 1000 },
      imageConcurrency: 4,
      chunkSize: 3,
    },
  };
  return { deps, feeds, products, imports, objects, fetcher, embedder, index, detections, features, matcher };
}
