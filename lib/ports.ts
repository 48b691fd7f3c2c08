/**
 * What the domain needs from the outside world. Adapters in lib/adapters implement these, one file per
 * technology; lib/container.ts picks them by configuration. Use cases depend on these interfaces only.
 */
import type { Feed } from '#lib/domain/feeds.ts';
import type { SearchKey } from '#lib/domain/keys.ts';
import type { Product } from '#lib/domain/products.ts';
import type { ImportRecord } from '#lib/domain/catalogue/imports.ts';
import type { LocalFeatures } from '#lib/vision/local-features/types.ts';

export interface Clock {
  now(): Date;
}

/** Feeds (catalogues) with their plan and allowed domains. */
export interface FeedStore {
  /** Stores a new feed; throws DomainError('conflict') when the id exists. */
  create(feed: Feed): Promise<void>;
  /**
   * `fresh`: a strongly consistent read past any cache, for checks that must see a deletion that has
   * just started (imports and key creation racing a feed's deletion).
   */
  get(feedId: string, options?: { fresh?: boolean }): Promise<Feed | undefined>;
  list(): Promise<Feed[]>;
  /**
   * Replaces the stored feed; throws NotFoundError('feed_not_found') when it does not exist, is being
   * deleted, or is another feed of the same id than the one read (its createdAt differs). Given
   * `expectedUpdatedAt` (the updatedAt of the feed as read; null for a feed stored without one), only
   * while the stored feed still has it,
   * else DomainError('conflict'): an optimistic-concurrency check, which holds because every write of a
   * feed's fields gives it a later updatedAt (updateFeed) and the deletion mark is checked on its own.
   */
  put(feed: Feed, expectedUpdatedAt?: string | null): Promise<void>;
  /**
   * Marks the feed as being deleted (keeps the first mark); throws NotFoundError when it does not exist
   * or, given `createdAt`, is another feed of the same id (created again since it was read), or, given
   * `updatedAt` (null: stored without one), was changed since it was read (a DELETE with If-Match).
   */
  markDeleting(feedId: string, at: Date, createdAt?: string, updatedAt?: string | null): Promise<void>;
  /** Deletes the feed; with `createdAt`, only that feed (not one created again under the same id since). */
  delete(feedId: string, createdAt?: string): Promise<void>;
}

/** Search ids. A lookup by id is one read. */
export interface KeyStore {
  create(key: SearchKey): Promise<void>;
  get(searchId: string): Promise<SearchKey | undefined>;
  listByFeed(feedId: string): Promise<SearchKey[]>;
  /** Marks the key revoked (kept, so a revoked id is told apart from an unknown one). */
  revoke(searchId: string, at: Date): Promise<void>;
  /** Records the last use; callers throttle how often. */
  touch(searchId: string, at: Date): Promise<void>;
  delete(searchId: string): Promise<void>;
  deleteByFeed(feedId: string): Promise<void>;
}

/** Outcome of one attempt to spend a request from an hourly allowance. */
export interface RateLimitDecision {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** Seconds until the allowance is fully available again (lib/domain/rate-window.ts). */
  resetSeconds: number;
  /** Seconds a refused client should wait before the next attempt can succeed. */
  retryAfterSeconds: number;
}

/** Public endpoints, as metered. */
export type Endpoint = 'search_image' | 'detect' | 'related' | 'root_search';

export type UsageOutcome = 'ok' | 'client_error' | 'server_error' | 'rate_limited';

/** A meter's counters: requests, and those by outcome. */
export interface UsageCounters {
  requests: number;
  ok: number;
  clientErrors: number;
  serverErrors: number;
  rateLimited: number;
}

export interface UsageRow extends UsageCounters {
  day: string;
  endpoint: Endpoint;
  searchId: string;
  /** createdAt of the feed the request was answered for (absent on rows written before it was kept). */
  feedCreatedAt?: string;
}

/**
 * Where a related-products widget runs, as its request's `context` says (type and domain; the page URL
 * is not kept: it may carry a shopper's data).
 */
export interface UsageContext {
  type: string;
  domain: string;
}

/** Related-products requests of one day from one context. */
export interface UsageContextRow extends UsageContext {
  day: string;
  /** As on UsageRow. */
  feedCreatedAt?: string;
  requests: number;
}

/** One answered request, as the daily meter counts it. */
export interface UsageEntry {
  feedId: string;
  feedCreatedAt: string;
  searchId: string;
  endpoint: Endpoint;
  outcome: UsageOutcome;
  at: Date;
  /** The request's context, counted per day beside the meter (related products). */
  context?: UsageContext;
}

/** Request counters: the rolling-hour allowance per search id and the daily meter per endpoint. */
export interface UsageStore {
  /** Atomically spends one request of `limit` per rolling hour; never over-admits under concurrency. */
  consume(searchId: string, limit: number, now: Date): Promise<RateLimitDecision>;
  record(entry: UsageEntry): Promise<void>;
  /** Daily rows of a feed for days in [fromDay, toDay] (YYYY-MM-DD, inclusive). */
  list(feedId: string, fromDay: string, toDay: string): Promise<UsageRow[]>;
  /** Daily context rows of a feed for days in [fromDay, toDay]. */
  listContexts(feedId: string, fromDay: string, toDay: string): Promise<UsageContextRow[]>;
  /**
   * Removes every daily row and context of the feed (a feed re-created with the same id starts from
   * none); stops between pages once `signal` aborts.
   */
  deleteFeed(feedId: string, options?: { signal?: AbortSignal }): Promise<void>;
}

/** Blobs: feed files, product images, derived features. */
export interface ObjectStore {
  put(key: string, body: Buffer | string, contentType?: string): Promise<void>;
  get(key: string): Promise<Buffer | undefined>;
  delete(key: string): Promise<void>;
  /** Deletes many objects in few calls (S3's DeleteObjects takes 1000); absent keys are no error. */
  deleteMany(keys: readonly string[]): Promise<void>;
  list(prefix: string): Promise<string[]>;
  /** The same keys a page (S3: up to 1000) at a time, for work on more keys than one call should wait for. */
  listPages(prefix: string): AsyncIterable<string[]>;
}

/** Mirrors search ids into the API gateway's usage plans (AWS); a no-op locally. */
export interface ApiKeyRegistry {
  register(key: SearchKey, plan: Feed['plan']): Promise<void>;
  unregister(searchId: string): Promise<void>;
}

/** Basic facts about a submitted image, read without decoding its pixels. */
export interface ImageInfo {
  format: string;
  width: number;
  height: number;
}

/**
 * Validates submitted image bytes: format allow-list and pixel limits, before any full decode. Refusals
 * are InvalidImageError without a field: the use case that read the bytes names it (`forField`).
 */
export interface ImageInspector {
  inspect(bytes: Buffer): Promise<ImageInfo>;
  /**
   * Cuts boxes (pixels of the EXIF-oriented image) out of an image, each re-encoded losslessly at no more
   * than the models read; the image is decoded once for all of them.
   */
  crops(bytes: Buffer, boxes: readonly PixelBox[]): Promise<Buffer[]>;
  /**
   * The image as the search stages read it, and its size (the frame of the second look's boxes): the
   * same bytes, or for a large image a copy scaled down once, which each stage then decodes cheaply.
   */
  bounded(bytes: Buffer): Promise<{ bytes: Buffer; width: number; height: number }>;
}

/** x0, y0, x1, y1 in pixels of an image after its EXIF orientation. */
export type PixelBox = [number, number, number, number];

/** One object found in an image: box = [x_min, y_min, x_max, y_max] in pixels of the submitted image. */
export interface DetectedObject {
  box: PixelBox;
  label: string;
  score: number;
}

/** Finds COCO objects in an encoded image (EXIF orientation applied before boxes are measured). */
export interface Detector {
  /** `scoreThreshold` overrides the detector's own minimum score for this call (lower: more boxes). */
  detect(image: Buffer, options?: { scoreThreshold?: number }): Promise<DetectedObject[]>;
}

/** Turns encoded images into L2-normalised vectors; one model version per index. */
export interface Embedder {
  readonly dimension: number;
  /** Identifies the model and preprocessing; vectors of different versions are never compared. */
  readonly modelVersion: string;
  embed(images: Buffer[]): Promise<Float32Array[]>;
}

/**
 * Regional descriptors of a query: one vector per window of the image, in the embedder's vector space,
 * so a product filling part of a photo is compared by the window that holds it (lib/vision/regional.ts).
 */
export interface RegionalEmbedder {
  regions(image: Buffer): Promise<Float32Array[]>;
}

/** The model layer, loaded lazily once per process. */
export interface Vision {
  embedder: Embedder;
  detector: Detector;
  /**
   * Present when the layer was loaded with regional matching (it needs the learned projection and the
   * window projection trained with it).
   */
  regional?: RegionalEmbedder;
}

/** Which side of a search an image is on: a stored catalogue image or a submitted query. */
export type FeatureRole = 'catalogue' | 'query';

/**
 * Local (keypoint) features for geometric verification of a search shortlist: extraction on either side,
 * and the inlier count of each candidate against a query (high only when the query shows that item).
 */
export interface LocalFeatureMatcher {
  /** Catalogue: both orientations, ~800 keypoints each; query: one orientation, ~1000 keypoints. */
  extract(image: Buffer, role: FeatureRole, region?: PixelBox): Promise<LocalFeatures>;
  /**
   * Inliers of each candidate, in order; candidates without features get 0. A promise when part of the
   * work runs on another thread.
   */
  verify(
    query: LocalFeatures,
    candidates: readonly (LocalFeatures | undefined)[],
  ): number[] | Promise<number[]>;
}

/** Stored local features of one product image, addressed like its vector document. */
export interface FeatureRef {
  feedId: string;
  productId: string;
  imageIndex: number;
}

/** Catalogue local features, written at ingestion and read back for every verified search candidate. */
export interface FeatureStore {
  put(ref: FeatureRef, features: LocalFeatures): Promise<void>;
  /** Features of each ref, in order; undefined where none are stored or they cannot be read. */
  getMany(refs: readonly FeatureRef[]): Promise<(LocalFeatures | undefined)[]>;
  /** Removes every stored image of these products, but those in `except`. */
  deleteProducts(
    feedId: string,
    productIds: readonly string[],
    except?: readonly FeatureRef[],
  ): Promise<void>;
  /** Removes every stored image of the feed. */
  /** `signal` stops it between batches (a feed deletion out of its request's time); what is left stays. */
  deleteFeed(feedId: string, options?: { signal?: AbortSignal }): Promise<void>;
}

/** One vector per product image, with what queries filter on. */
export interface VectorDocument {
  /** Unique per image: `${feedId}/${productId}/${imageIndex}`. */
  id: string;
  feedId: string;
  productId: string;
  itemGroupId: string;
  vector: Float32Array;
  /**
   * Filterable fields, values lower-cased: brand, color, category, product_type, gender, age_group,
   * condition, availability, size, material, item_group_id, currency and `metadata.<name>`.
   */
  fields: Record<string, string[]>;
}

/** AND across keys, OR within the values of a key (values lower-cased). */
export type VectorFilter = Record<string, string[]>;

export interface VectorQuery {
  feedId: string;
  vector: Float32Array;
  /** Number of nearest documents wanted (before grouping by item group). */
  k: number;
  filter?: VectorFilter;
  /** Item groups never returned (the reference product of related products). */
  excludeItemGroupIds?: string[];
}

export interface VectorHit {
  id: string;
  productId: string;
  itemGroupId: string;
  /** Cosine similarity in [-1, 1]; higher is closer. */
  similarity: number;
}

/**
 * Approximate nearest-neighbour search over product image vectors of one embedding model version.
 * Feeds are isolated by the feedId of every query; a feed never sees another feed's documents.
 */
export interface VectorIndex {
  readonly dimension: number;
  /** Inserts or replaces documents by id. */
  upsert(documents: VectorDocument[]): Promise<void>;
  /**
   * Removes every document of these products, but those whose ids are in `except` (an import that
   * replaced a product's images in place removes only what the new ones did not replace).
   */
  deleteProducts(feedId: string, productIds: string[], except?: readonly string[]): Promise<void>;
  /** `signal` stops it between batches (a feed deletion out of its request's time); what is left stays. */
  deleteFeed(feedId: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Nearest documents first; ties broken by productId for stable paging. */
  search(query: VectorQuery): Promise<VectorHit[]>;
  /**
   * Several searches in one call, one result list per query in query order, each exactly what `search`
   * returns for it (the regional shortlist asks ~75 small k-NN queries per image search: one round trip
   * on OpenSearch, `_msearch`, instead of 75).
   */
  searchMany(queries: VectorQuery[]): Promise<VectorHit[][]>;
  /** Stored vectors of documents (related products by productId reuse the product's own vectors). */
  getVectors(ids: string[]): Promise<Map<string, Float32Array>>;
  count(feedId: string): Promise<number>;
  /** Makes writes durable (the local index persists to disk); a no-op where writes already are. */
  flush(): Promise<void>;
}

/** The visual words (quantised local descriptors) of one product image, addressed like its vector document. */
export interface VisualWordDocument {
  /** `${feedId}/${productId}/${imageIndex}`, the id of the image's vector document. */
  id: string;
  feedId: string;
  productId: string;
  itemGroupId: string;
  /** Distinct words, ascending (lib/vision/local-features/visual-words.ts). */
  words: Float64Array;
}

export interface VisualWordQuery {
  feedId: string;
  words: Float64Array;
  /** Number of best images wanted (before grouping by item group). */
  k: number;
  excludeItemGroupIds?: string[];
}

export interface VisualWordHit {
  id: string;
  productId: string;
  itemGroupId: string;
  /** Sum of the idf weights of the words the image shares with the query; comparable within a query only. */
  score: number;
}

/**
 * Inverted index of visual words per product image: the shortlist feeder that finds a product by the
 * keypoints it shares with a query, however much background surrounds it. Written and deleted alongside
 * the stored local features; feeds are isolated like in the vector index.
 */
export interface VisualWordIndex {
  /** Inserts or replaces documents by id. */
  upsert(documents: VisualWordDocument[]): Promise<void>;
  deleteProducts(feedId: string, productIds: string[], except?: readonly string[]): Promise<void>;
  /** `signal` stops it between batches (a feed deletion out of its request's time); what is left stays. */
  deleteFeed(feedId: string, options?: { signal?: AbortSignal }): Promise<void>;
  /** Images sharing the most idf-weighted words with the query first; ties by id. */
  search(query: VisualWordQuery): Promise<VisualWordHit[]>;
  /** Makes writes durable (the local index persists to disk); a no-op where writes already are. */
  flush(): Promise<void>;
  /** Reads a feed's words ahead of its first search, where an index loads them on first use (local). */
  preload?(feedId: string): Promise<void>;
  /** Writes what is not yet durable and lets go of open files (the local index); a later call reopens them. */
  close?(): Promise<void>;
}

/** Products keyed by (feedId, productId); variants found through their item group. */
export interface ProductStore {
  hasProducts(feedId: string): Promise<boolean>;
  get(feedId: string, productId: string): Promise<Product | undefined>;
  /** Products of these ids (missing ones are absent from the map); any number of ids. */
  getMany(feedId: string, productIds: string[]): Promise<Map<string, Product>>;
  /** Every product of an item group, ordered by productId. */
  listGroup(feedId: string, itemGroupId: string): Promise<Product[]>;
  /** Inserts or replaces products (idempotent; any number). */
  putMany(products: Product[]): Promise<void>;
  deleteMany(feedId: string, productIds: string[]): Promise<void>;
  /** One page of a feed's products in productId order; `cursor` is opaque. */
  page(feedId: string, limit: number, cursor?: string): Promise<{ items: Product[]; cursor?: string }>;
  /** Ids of the feed's products not marked as seen by this import (what a full import removes). */
  listUnseen(feedId: string, importId: string): Promise<string[]>;
  /** `signal` stops it between pages (a feed deletion out of its request's time); what is left stays. */
  deleteFeed(feedId: string, options?: { signal?: AbortSignal }): Promise<void>;
}

/** An admin answer kept for the retries of its request (Idempotency-Key). */
export interface StoredResponse {
  statusCode: number;
  headers: Record<string, string>;
  body: string;
  /**
   * The createdAt of the feed the answer was given for (a feed created again under its id is another);
   * absent on answers kept before it was recorded, and on answers that name no feed.
   */
  feedCreatedAt?: string;
}

/** What `IdempotencyStore.begin` found under a key. */
export type IdempotencyClaim =
  /** The key is this request's now: run it, then `finish` or `abandon` with the same `owner`. */
  | { kind: 'started' }
  /** A request with this key and fingerprint was answered: the answer to give again. */
  | { kind: 'replay'; response: StoredResponse }
  /** A request with this key and fingerprint is still running (or stopped less than a lock ago). */
  | { kind: 'in_progress' }
  /** The key was used for another request (another path or body). */
  | { kind: 'mismatch' };

/**
 * Idempotency keys of the admin API's creates: a retried POST with the key of an answered one gets that
 * answer again instead of creating a second feed, search id or import (docs/api.md "Retries").
 */
export interface IdempotencyStore {
  /**
   * Claims `key` for a request (`fingerprint`: its method, path and body) until `now + lockMs`, unless a
   * live record holds it (kept `ttlMs` after its claim). `owner` names this attempt.
   */
  begin(
    key: string,
    claim: { fingerprint: string; owner: string; now: Date; lockMs: number; ttlMs: number },
  ): Promise<IdempotencyClaim>;
  /** Keeps the answer of the owner's request (nothing when another attempt took the key over). */
  finish(key: string, owner: string, response: StoredResponse): Promise<void>;
  /** Gives the key back (the request failed before creating anything, or with an error worth retrying). */
  abandon(key: string, owner: string): Promise<void>;
}

/** Feed imports with their progress; one record per (feedId, importId). */
export interface ImportStore {
  /** Stores a new import; throws DomainError('conflict') when the id exists. */
  create(record: ImportRecord): Promise<void>;
  get(feedId: string, importId: string): Promise<ImportRecord | undefined>;
  /** Newest first; given `after` (an import id), the ones older than it. */
  list(feedId: string, limit: number, after?: string): Promise<ImportRecord[]>;
  /**
   * One page of the listing for the API: up to `limit` records after `after`, and whether more follow.
   * A page may hold fewer than `limit` (DynamoDB stops a query at 1 MB: a page stays well inside a
   * response's 6 MB, records carrying up to 100 errors each).
   */
  page(feedId: string, limit: number, after?: string): Promise<{ records: ImportRecord[]; more: boolean }>;
  /** The feed's queued and running imports, oldest first (a consistent read). */
  listUnfinished(feedId: string): Promise<ImportRecord[]>;
  /** Replaces the record (progress checkpoints and status changes). */
  put(record: ImportRecord): Promise<void>;
  delete(feedId: string, importId: string): Promise<void>;
  /** Deletes the feed's import records (not its lease: the deletion holds it). */
  deleteFeed(feedId: string): Promise<void>;
  /**
   * Takes the feed's lease, which lets one actor at a time (an import runner, or the feed's deletion)
   * write the feed's catalogue: true when `owner` now holds it until `until`; false when another owner
   * holds it past `now`.
   */
  takeLease(feedId: string, owner: string, until: Date, now: Date): Promise<boolean>;
  /** Extends a lease `owner` holds; false when it no longer does (given up, or taken after expiring). */
  renewLease(feedId: string, owner: string, until: Date): Promise<boolean>;
  /** Gives the lease up (only `owner`'s; any holder's when owner is undefined). */
  releaseLease(feedId: string, owner?: string): Promise<void>;
  /** The feeds whose lease is held (a scan: for local start only). */
  leasedFeeds(): Promise<string[]>;
}

/** Limits of one fetch. */
export interface FetchLimits {
  maxBytes: number;
  timeoutMs: number;
}

/**
 * Fetches feed files and product images over HTTP(S), refusing private, loopback, link-local and
 * metadata addresses unless configured otherwise. Throws FetchError with a message fit for import errors.
 */
export interface ImageFetcher {
  /** `signal` stops the fetch where it is (connecting or reading) with FetchError('stopped.'). */
  fetch(
    url: string,
    limits: FetchLimits,
    options?: { signal?: AbortSignal },
  ): Promise<{ bytes: Buffer; contentType: string | undefined; url: string }>;
  /** Same checks, but the body is streamed (feed files); the size cap, deadline and signal apply while reading. */
  open(
    url: string,
    limits: FetchLimits,
    options?: { signal?: AbortSignal },
  ): Promise<{ body: AsyncIterable<Buffer>; contentType: string | undefined; url: string }>;
}

/** Feed files, streamed in and out so a large feed never sits in memory whole. */
export interface FeedFileStore {
  /** Stores the stream under `key`; returns its size in bytes. */
  write(key: string, body: AsyncIterable<Uint8Array>, contentType: string): Promise<number>;
  /** The stored file as a stream, or undefined when there is none. */
  read(key: string): Promise<AsyncIterable<Uint8Array> | undefined>;
}

/** Hands a queued import to whatever runs imports (in-process locally; the worker Lambda in AWS). */
export interface ImportDispatcher {
  dispatch(feedId: string, importId: string): Promise<void>;
}

/**
 * The import worker's trigger queue (SQS in AWS), for a trigger the worker could not run to the end: a
 * failed run is seen again after a back-off rather than after the queue's visibility timeout (90
 * minutes), and a deferred one (its feed busy) comes back as a new message, so that waiting for a feed
 * does not count as a failed receive (the third of which sends a trigger to the dead-letter queue).
 */
export interface TriggerQueue {
  /** The received message of `receiptHandle` becomes visible again in `seconds`. */
  retryIn(receiptHandle: string, seconds: number): Promise<void>;
  /** Sends a new message `body`, delivered in `seconds` (SQS allows at most 900). */
  sendIn(body: string, seconds: number): Promise<void>;
}
