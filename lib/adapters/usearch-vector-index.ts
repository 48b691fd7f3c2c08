import { mkdir, open, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { Index, MetricKind, ScalarKind, exactSearch, type BatchMatches, type Matches } from 'usearch';
import type { VectorDocument, VectorFilter, VectorHit, VectorIndex, VectorQuery } from '#lib/ports.ts';

/** Tuning of the local index; the defaults meet the k-NN target of DESIGN §6 (see docs/benchmarks.md). */
export interface UsearchVectorIndexOptions {
  /** Folder holding one sub-folder per feed (`config.vectorIndex.dir`, `.data/vectors` by default). */
  dir: string;
  /** Embedding dimension; every document and query vector must have exactly this length. */
  dimension: number;
  /** HNSW graph degree (M). */
  connectivity?: number;
  /** Candidate list size while inserting (efConstruction). */
  expansionAdd?: number;
  /**
   * Candidate list size while searching (ef); usearch raises it to the number of results asked for.
   * Default 256: unfiltered top-100 recall@10 at 1M vectors is 0.97 at 128 and 0.99 at 256 for +0.1 ms.
   */
  expansionSearch?: number;
  /**
   * A filtered query whose filter matches at most this many documents of the feed is answered by exact
   * search over just those documents instead of the graph.
   */
  exactThreshold?: number;
  /**
   * A filtered query also scans its m matching documents when m ≤ scanRatio × the number of results the
   * graph would have to be asked for (default 2; 0 turns this off).
   */
  scanRatio?: number;
  /**
   * Scalar type of the vectors inside the graph of newly created feeds (a saved feed keeps its own). `i8`
   * (cosine over 8-bit codes) quarters the graph's memory and speeds up building and deep searches; results
   * are re-scored with the exact f32 vectors, so similarities and tie order stay exact either way.
   * Default i8: see docs/benchmarks.md (## k-NN) for the f32/i8 comparison.
   */
  quantization?: GraphQuantization;
}

export type GraphQuantization = 'f32' | 'f16' | 'i8';

interface RowMeta {
  id: string;
  productId: string;
  itemGroupId: string;
  fields: Record<string, string[]>;
}

/** Format 1 (read only): each row's fields as an object. */
type PersistedRowV1 =
  [id: string, productId: string, itemGroupId: string, fields: Record<string, string[]>] | null;

/** Format 2: each row's fields as pairs of indices into `names` and `lists`. */
type PersistedRowV2 = [id: string, productId: string, itemGroupId: string, fields: number[]] | null;

interface PersistedMetaBase {
  feedId: string;
  dimension: number;
  /** Absent in files written before quantization was configurable: f32. */
  quantization?: GraphQuantization;
}

/**
 * Format 2 keeps each distinct field name and value list once: a catalogue's rows repeat a few brands,
 * categories and availabilities, and at 100k products parsing them per row was 372 ms of a 834-ms load
 * (docs/benchmarks.md "Vector metadata"). The rows then share the lists as parsed.
 */
type PersistedMeta =
  | (PersistedMetaBase & { format: 1; rows: PersistedRowV1[] })
  | (PersistedMetaBase & { format: 2; names: string[]; lists: string[][]; rows: PersistedRowV2[] });

/** Threads of one batched graph search (`searchMany`): the JS thread waits for it, so every core. */
const BATCH_SEARCH_THREADS = availableParallelism();

/** Oversampling margin on top of the expected number of graph results needed to keep k that pass the filter. */
const OVERSAMPLE_FACTOR = 1.5;
const OVERSAMPLE_MARGIN = 32;
/** Once the graph would have to return this share of the feed, a scan of the matching rows is cheaper. */
const GRAPH_SHARE_LIMIT = 0.25;
/**
 * Scanning a row means gathering its vector from a scattered slot (a cache miss) and one SIMD distance; a
 * graph search for `wanted` results walks a few nodes per result over compact, cache-friendlier data.
 * Measured on 448-d clustered vectors (docs/benchmarks.md, 100k vectors, a filter matching 10k): asking the
 * graph for 1,532 results took 3.6 ms (i8) where scanning the 10k took 6–7.5 ms, so the scan only wins while
 * m ≤ 2 × wanted.
 */
const DEFAULT_SCAN_RATIO = 2;
/**
 * How far below the k-th exact similarity a scan's last result must score for no row it left out to tie
 * with the k-th: well above usearch's f32 rounding (~2e-8), well below any real difference of two images.
 */
const TIE_TOLERANCE = 1e-6;

/** Numbers the distinct field names a save writes once, in first-seen order. */
class NameNumbering {
  readonly items: string[] = [];
  readonly #numbers = new Map<string, number>();

  of(name: string): number {
    let number = this.#numbers.get(name);
    if (number === undefined) this.#numbers.set(name, (number = this.items.push(name) - 1));
    return number;
  }
}

/**
 * Numbers the distinct value lists a save writes once. Most hold one value, keyed by it (no string to
 * build), longer ones by their JSON, in two maps: a value may itself read like the JSON of a longer list.
 */
class ListNumbering {
  readonly items: string[][] = [];
  readonly #singles = new Map<string, number>();
  readonly #longer = new Map<string, number>();

  of(values: string[]): number {
    const [numbers, key] =
      values.length === 1 ? [this.#singles, values[0]!] : [this.#longer, JSON.stringify(values)];
    let number = numbers.get(key);
    if (number === undefined) numbers.set(key, (number = this.items.push(values) - 1));
    return number;
  }
}

/**
 * The fields of a loaded row. Format 2 rows share the file's lists as parsed. Format 1 rows get one array
 * for each list of values that rows repeat, instead of one parsed copy per row (at 100k products this took
 * ~60 MB off the heap: docs/benchmarks.md "The rest of the memory at 100k"). Row fields are never changed
 * in place (upserts replace them), so sharing is safe.
 */
function persistedFields(
  meta: PersistedMeta,
): (persisted: Record<string, string[]> | number[]) => Record<string, string[]> {
  if (meta.format === 2) {
    const { names, lists } = meta;
    return (persisted) => {
      const pairs = persisted as number[];
      const fields: Record<string, string[]> = {};
      for (let i = 0; i < pairs.length; i += 2) {
        const [name, list] = [names[pairs[i]!], lists[pairs[i + 1]!]];
        if (name !== undefined && list !== undefined) setField(fields, name, list);
      }
      return fields;
    };
  }
  const lists = new ListNumbering();
  return (persisted) => {
    const fields: Record<string, string[]> = {};
    for (const [name, values] of Object.entries(persisted as Record<string, string[]>))
      setField(fields, name, lists.items[lists.of(values)]!);
    return fields;
  };
}

/**
 * Sets a row's field. Field names are the merchant's (`metadata.<name>`) and plain names: assigned,
 * `__proto__` would set the object's prototype instead, so it is defined as an own key (reads go through
 * `ownField`). Plain objects, not null-prototype ones: those are dictionaries in V8, and 100k rows of them
 * took ~40 MB more heap at load (docs/benchmarks.md "Vector metadata").
 */
function setField(fields: Record<string, string[]>, name: string, values: string[]): void {
  if (name === '__proto__')
    Object.defineProperty(fields, name, {
      value: values,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  else fields[name] = values;
}

function normaliseFields(fields: Record<string, string[]>): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [key, values] of Object.entries(fields)) {
    const unique = [...new Set(values.map((value) => value.toLowerCase()))];
    if (unique.length > 0) setField(out, key, unique);
  }
  return out;
}

/** A row's values of a field; undefined, not an `Object.prototype` member, for a field it lacks. */
function ownField(fields: Record<string, string[]>, field: string): string[] | undefined {
  return Object.hasOwn(fields, field) ? fields[field] : undefined;
}

/** Empty value lists impose no constraint, like an absent key. */
function normaliseFilter(filter: VectorFilter | undefined): Array<[string, Set<string>]> {
  if (!filter) return [];
  return Object.entries(filter)
    .filter(([, values]) => values.length > 0)
    .map(([key, values]) => [key, new Set(values.map((value) => value.toLowerCase()))]);
}

function compareHits(a: VectorHit, b: VectorHit): number {
  if (a.similarity !== b.similarity) return b.similarity - a.similarity;
  if (a.productId !== b.productId) return a.productId < b.productId ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

/**
 * Reads a file of little-endian floats straight into `target`: reading into a Buffer first would hold a
 * second copy of every vector (180 MB per 100k 448-d vectors) at start.
 */
async function readInto(path: string, target: Float32Array, floats: number): Promise<void> {
  const bytes = new Uint8Array(target.buffer, target.byteOffset, floats * 4);
  const file = await open(path, 'r');
  try {
    let offset = 0;
    while (offset < bytes.length) {
      const { bytesRead } = await file.read(bytes, offset, bytes.length - offset, offset);
      if (bytesRead === 0) throw new Error(`${path} is truncated: ${offset} of ${bytes.length} bytes`);
      offset += bytesRead;
    }
  } finally {
    await file.close();
  }
}

/**
 * Exact inner product of a query and row `row` of a flat matrix, clamped against float rounding: every
 * hit's similarity, whichever path found it.
 */
function rowSimilarity(matrix: Float32Array, row: number, query: Float32Array): number {
  const dimension = query.length;
  const base = row * dimension;
  let sum = 0;
  for (let i = 0; i < dimension; i += 1) sum += (matrix[base + i] as number) * (query[i] as number);
  return Math.max(-1, Math.min(1, sum));
}

/** Inner product on f32 graphs; cosine on quantized ones (usearch's i8 codes are meant for cosine). */
function graphMetric(quantization: GraphQuantization): { metric: MetricKind; scalar: ScalarKind } {
  if (quantization === 'f32') return { metric: MetricKind.IP, scalar: ScalarKind.F32 };
  return { metric: MetricKind.Cos, scalar: quantization === 'f16' ? ScalarKind.F16 : ScalarKind.I8 };
}

/** The documents, vectors and HNSW graph of one feed. Rows are slots; a row number is the usearch key. */
class FeedShard {
  readonly rows: Array<RowMeta | undefined> = [];
  readonly byId = new Map<string, number>();
  /** Rows of each product: a few images each, so arrays (Sets cost 85 MB more heap at 1M rows). */
  readonly #byProduct = new Map<string, number[]>();
  /**
   * Rows by field, then value. Two levels, not one map of `field + value` strings: loading 100k rows built
   * and hashed a new key string per (row, value), most of the load's time (docs/benchmarks.md "The rest of
   * the memory at 100k").
   */
  readonly #postings = new Map<string, Map<string, Set<number>>>();
  /**
   * Whether `#byProduct` and `#postings` hold every row. A loaded shard builds them at their first use (a
   * filter, a write): an image search needs neither, and at 100k rows they were ~0.5 s of a start's first
   * request (docs/benchmarks.md "The rest of the memory at 100k").
   */
  #indexed: boolean;
  readonly freeRows: number[] = [];
  vectors: Float32Array;
  live = 0;
  dirty = false;
  generation = 0;

  constructor(
    readonly feedId: string,
    readonly dimension: number,
    readonly graph: Index,
    readonly quantization: GraphQuantization,
    options: { initialCapacity?: number; indexed?: boolean } = {},
  ) {
    this.vectors = new Float32Array((options.initialCapacity ?? 1024) * dimension);
    this.#indexed = options.indexed ?? true;
  }

  vectorOf(row: number): Float32Array {
    return this.vectors.subarray(row * this.dimension, (row + 1) * this.dimension);
  }

  allocateRow(): number {
    const row = this.freeRows.pop() ?? this.rows.length;
    if (row === this.rows.length) {
      this.rows.push(undefined);
      const needed = this.rows.length * this.dimension;
      if (needed > this.vectors.length) {
        const grown = new Float32Array(Math.max(needed, this.vectors.length * 2));
        grown.set(this.vectors);
        this.vectors = grown;
      }
    }
    return row;
  }

  /** Records metadata of a row whose vector is already in place (the graph is updated by the caller). */
  attach(row: number, meta: RowMeta): void {
    this.rows[row] = meta;
    this.byId.set(meta.id, row);
    if (this.#indexed) this.#index(row, meta);
    this.live += 1;
  }

  /** The rows of a product's images. */
  rowsOfProduct(productId: string): readonly number[] | undefined {
    this.#indexAll();
    return this.#byProduct.get(productId);
  }

  postingOf(field: string, value: string): Set<number> | undefined {
    this.#indexAll();
    return this.#postings.get(field)?.get(value);
  }

  /** Removes a row from metadata, postings and graph, and frees it for reuse. */
  detach(row: number): void {
    const meta = this.rows[row];
    if (!meta) return;
    this.graph.remove(BigInt(row));
    this.rows[row] = undefined;
    this.byId.delete(meta.id);
    if (this.#indexed) this.#unindex(row, meta);
    this.vectorOf(row).fill(0);
    this.freeRows.push(row);
    this.live -= 1;
  }

  #indexAll(): void {
    if (this.#indexed) return;
    this.#indexed = true;
    this.rows.forEach((meta, row) => {
      if (meta) this.#index(row, meta);
    });
  }

  #index(row: number, meta: RowMeta): void {
    const productRows = this.#byProduct.get(meta.productId);
    if (productRows) productRows.push(row);
    else this.#byProduct.set(meta.productId, [row]);
    for (const [field, values] of Object.entries(meta.fields)) {
      let byValue = this.#postings.get(field);
      if (!byValue) this.#postings.set(field, (byValue = new Map()));
      for (const value of values) {
        let posting = byValue.get(value);
        if (!posting) byValue.set(value, (posting = new Set()));
        posting.add(row);
      }
    }
  }

  #unindex(row: number, meta: RowMeta): void {
    const productRows = this.#byProduct.get(meta.productId)?.filter((other) => other !== row) ?? [];
    if (productRows.length === 0) this.#byProduct.delete(meta.productId);
    else this.#byProduct.set(meta.productId, productRows);
    for (const [field, values] of Object.entries(meta.fields)) {
      const byValue = this.#postings.get(field);
      for (const value of values) {
        const posting = byValue?.get(value);
        posting?.delete(row);
        if (posting?.size === 0) byValue!.delete(value);
      }
      if (byValue?.size === 0) this.#postings.delete(field);
    }
  }
}

/**
 * The local default `VectorIndex`: one usearch HNSW graph (inner product over L2-normalised vectors, i.e.
 * cosine) per feed, persisted under `dir` and loaded, not rebuilt, at start.
 *
 * Why one graph per feed: feed isolation is then structural (a query never walks another feed's nodes) and
 * filtered search only has to cope with the selectivity of the merchant's own filter, not with the feed's
 * share of a global index. usearch's Node binding has no filtered (predicate) search, so filters are
 * applied with posting lists kept beside the graph:
 * - a filter whose most selective key matches m documents (counted from its postings) is answered by exact
 *   search over those m vectors when m ≤ `exactThreshold` or when the graph would have to be asked for more
 *   than m / 2 results (`scanRatio`): exact, and cheaper than a graph walk that deep;
 * - a broader filter asks the graph for k / (estimated selectivity) * 1.5 + 32 neighbours and post-filters,
 *   quadrupling the request while fewer than k pass, and falls back to the exact scan once the graph
 *   would have to return a quarter of the feed.
 * The exact f32 vectors live in a flat Float32Array (slot-indexed) used by `getVectors`, the exact path and
 * the re-scoring of graph results; the graph itself holds 8-bit codes by default (`quantization`), so the
 * second copy costs a quarter of the f32 vectors (≈45 MB per 100k 448-d vectors) instead of all of them.
 *
 * Writes (upsert, deletes, flush) are serialised through one promise queue; searches run between them and
 * only ever see complete writes because every in-memory mutation is synchronous.
 */
export class UsearchVectorIndex implements VectorIndex {
  readonly dimension: number;
  readonly #dir: string;
  readonly #connectivity: number;
  readonly #expansionAdd: number;
  readonly #expansionSearch: number;
  readonly #exactThreshold: number;
  readonly #scanRatio: number;
  readonly #quantization: GraphQuantization;
  readonly #feeds = new Map<string, FeedShard>();
  /** Document id → feed, so that `getVectors` and cross-feed id reuse need no feed id. */
  readonly #feedOfId = new Map<string, string>();
  #loaded: Promise<void> | undefined;
  #scratch = new Float32Array(0);
  #queue: Promise<unknown> = Promise.resolve();

  constructor(options: UsearchVectorIndexOptions) {
    if (!Number.isInteger(options.dimension) || options.dimension <= 0) {
      throw new RangeError(`dimension must be a positive integer, got ${options.dimension}`);
    }
    this.dimension = options.dimension;
    this.#dir = options.dir;
    this.#connectivity = options.connectivity ?? 16;
    this.#expansionAdd = options.expansionAdd ?? 128;
    this.#expansionSearch = options.expansionSearch ?? 256;
    this.#exactThreshold = options.exactThreshold ?? 4096;
    this.#scanRatio = options.scanRatio ?? DEFAULT_SCAN_RATIO;
    this.#quantization = options.quantization ?? 'i8';
  }

  /**
   * Removes a feed's files from every model version's index under `root` (one folder per version) but
   * those named in `except` (and other folders beside them), without opening any: for a feed's deletion
   * when the models (whose dimension an index needs) cannot load, and for the versions no process has
   * open. An index open on one of them keeps the feed in memory: delete through it instead.
   */
  static async deleteFeedFiles(root: string, feedId: string, except: readonly string[] = []): Promise<void> {
    const versions = await readdir(root, { withFileTypes: true }).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return [];
      throw error;
    });
    for (const version of versions) {
      if (!version.isDirectory() || except.includes(version.name)) continue;
      await rm(join(root, version.name, feedDirName(feedId)), { recursive: true, force: true });
    }
  }

  /** Opens an index and loads what `dir` holds before returning. */
  static async open(options: UsearchVectorIndexOptions): Promise<UsearchVectorIndex> {
    const index = new UsearchVectorIndex(options);
    await index.#ready();
    return index;
  }

  async upsert(documents: VectorDocument[]): Promise<void> {
    for (const document of documents) this.#assertVector(document.vector, `document ${document.id}`);
    await this.#exclusive(() => {
      const byFeed = new Map<string, Map<string, VectorDocument>>();
      for (const document of documents) {
        let feedDocuments = byFeed.get(document.feedId);
        if (!feedDocuments) byFeed.set(document.feedId, (feedDocuments = new Map()));
        // A later document with the same id in one batch wins, like sequential upserts.
        feedDocuments.set(document.id, document);
      }
      for (const [feedId, feedDocuments] of byFeed) {
        const shard = this.#shardFor(feedId);
        const rows: number[] = [];
        for (const document of feedDocuments.values()) {
          const previousFeedId = this.#feedOfId.get(document.id);
          const previousShard = previousFeedId === undefined ? undefined : this.#feeds.get(previousFeedId);
          const previousRow = previousShard?.byId.get(document.id);
          if (previousShard && previousRow !== undefined) {
            previousShard.detach(previousRow);
            previousShard.dirty = true;
          }
          const row = shard.allocateRow();
          shard.vectorOf(row).set(document.vector);
          shard.attach(row, {
            id: document.id,
            productId: document.productId,
            itemGroupId: document.itemGroupId,
            fields: normaliseFields(document.fields),
          });
          this.#feedOfId.set(document.id, feedId);
          rows.push(row);
        }
        if (rows.length === 0) continue;
        const keys = BigUint64Array.from(rows, (row) => BigInt(row));
        const matrix = new Float32Array(rows.length * this.dimension);
        rows.forEach((row, i) => matrix.set(shard.vectorOf(row), i * this.dimension));
        shard.graph.add(keys, matrix, 0);
        shard.dirty = true;
      }
    });
  }

  async deleteProducts(feedId: string, productIds: string[], except: readonly string[] = []): Promise<void> {
    const kept = new Set(except);
    await this.#exclusive(() => {
      const shard = this.#feeds.get(feedId);
      if (!shard) return;
      for (const productId of productIds) {
        for (const row of [...(shard.rowsOfProduct(productId) ?? [])]) {
          const id = shard.rows[row]?.id;
          if (id !== undefined && kept.has(id)) continue;
          shard.detach(row);
          if (id !== undefined) this.#feedOfId.delete(id);
          shard.dirty = true;
        }
      }
    });
  }

  async deleteFeed(feedId: string): Promise<void> {
    await this.#exclusive(async () => {
      const shard = this.#feeds.get(feedId);
      if (shard) {
        for (const id of shard.byId.keys()) this.#feedOfId.delete(id);
        this.#feeds.delete(feedId);
      }
      await rm(this.#feedDir(feedId), { recursive: true, force: true });
    });
  }

  async search(query: VectorQuery): Promise<VectorHit[]> {
    this.#assertVector(query.vector, 'query');
    await this.#ready();
    return this.#search(query);
  }

  /**
   * Each query answered by the same code as `search`, synchronously once loaded: every query sees the same
   * state (no write can land between two of them), and no microtask hop is paid per query.
   */
  async searchMany(queries: VectorQuery[]): Promise<VectorHit[][]> {
    for (const query of queries) this.#assertVector(query.vector, 'query');
    if (queries.length === 0) return [];
    await this.#ready();
    const answers: (VectorHit[] | undefined)[] = new Array(queries.length);
    // Plain queries (no filter, no exclusion) of one feed with one k go to the graph in one call, on every
    // core: an image search's ~75 regional windows took ~15 ms of the JS thread one by one. Each query is
    // answered exactly as alone (usearch searches a batch's queries independently).
    const batches = new Map<string, { shard: FeedShard; k: number; indices: number[] }>();
    queries.forEach((query, i) => {
      const shard = this.#feeds.get(query.feedId);
      const plain = normaliseFilter(query.filter).length === 0 && !query.excludeItemGroupIds?.length;
      // An empty shard or k ≤ 0 is left to #search, which answers [] (the graph refuses k 0).
      if (!shard || shard.live === 0 || !plain || query.k <= 0) return;
      const k = Math.min(Math.floor(query.k), shard.live);
      const key = `${query.feedId}\u0000${k}`;
      const batch = batches.get(key);
      if (batch) batch.indices.push(i);
      else batches.set(key, { shard, k, indices: [i] });
    });
    for (const { shard, k, indices } of batches.values()) {
      if (indices.length < 2) continue;
      const matrix = new Float32Array(indices.length * this.dimension);
      indices.forEach((index, i) => matrix.set(queries[index]!.vector, i * this.dimension));
      const matches = shard.graph.search(matrix, k, BATCH_SEARCH_THREADS) as BatchMatches;
      indices.forEach((index, i) => {
        answers[index] = this.#hitsOf(shard, matches.get(i).keys, queries[index]!.vector, () => true, k);
      });
    }
    return queries.map((query, i) => answers[i] ?? this.#search(query));
  }

  #search(query: VectorQuery): VectorHit[] {
    const shard = this.#feeds.get(query.feedId);
    if (!shard || shard.live === 0 || query.k <= 0) return [];
    const filter = normaliseFilter(query.filter);
    const excluded = new Set(query.excludeItemGroupIds ?? []);
    const k = Math.min(Math.floor(query.k), shard.live);

    if (filter.length === 0 && excluded.size === 0)
      return this.#graphSearch(shard, query.vector, k, () => true, k);

    /** Whether a row passes exclusions and the filter, skipping one key already known to match. */
    const passes = (row: number, knownField?: string): boolean => {
      const meta = shard.rows[row];
      if (!meta || (excluded.size > 0 && excluded.has(meta.itemGroupId))) return false;
      for (const [field, values] of filter) {
        if (field === knownField) continue;
        const have = ownField(meta.fields, field);
        if (!have) return false;
        let hit = false;
        for (const value of have) {
          if (values.has(value)) {
            hit = true;
            break;
          }
        }
        if (!hit) return false;
      }
      return true;
    };
    const accepts = (row: number): boolean => passes(row);

    // Count the rows of each filter key exactly (sum of its values' postings; a document rarely holds two
    // values of one key) and estimate the conjunction assuming independent keys.
    let narrowest: { field: string; values: Set<string>; size: number } | undefined;
    let selectivity = 1;
    for (const [field, values] of filter) {
      let size = 0;
      for (const value of values) size += shard.postingOf(field, value)?.size ?? 0;
      if (size === 0) return [];
      if (!narrowest || size < narrowest.size) narrowest = { field, values, size };
      selectivity *= Math.min(1, size / shard.live);
    }

    const candidates = (): number[] => {
      const rows: number[] = [];
      if (!narrowest) {
        for (const row of shard.byId.values()) if (accepts(row)) rows.push(row);
        return rows;
      }
      // A document holding two values of the narrowest key sits in two postings: dedupe only then.
      const seen = narrowest.values.size > 1 ? new Set<number>() : undefined;
      for (const value of narrowest.values) {
        for (const row of shard.postingOf(narrowest.field, value) ?? []) {
          if (seen) {
            if (seen.has(row)) continue;
            seen.add(row);
          }
          if (passes(row, narrowest.field)) rows.push(row);
        }
      }
      return rows;
    };

    const upperBound = narrowest?.size ?? shard.live;
    let wanted = Math.ceil((k / Math.max(selectivity, 1e-6)) * OVERSAMPLE_FACTOR) + OVERSAMPLE_MARGIN;
    if (upperBound <= this.#exactThreshold || upperBound <= wanted * this.#scanRatio) {
      return this.#exactSearch(shard, query.vector, k, candidates());
    }
    for (;;) {
      if (wanted >= shard.live * GRAPH_SHARE_LIMIT)
        return this.#exactSearch(shard, query.vector, k, candidates());
      const hits = this.#graphSearch(shard, query.vector, wanted, accepts, k);
      if (hits.length >= k) return hits;
      wanted *= 4;
    }
  }

  async getVectors(ids: string[]): Promise<Map<string, Float32Array>> {
    await this.#ready();
    const out = new Map<string, Float32Array>();
    for (const id of ids) {
      const feedId = this.#feedOfId.get(id);
      const shard = feedId === undefined ? undefined : this.#feeds.get(feedId);
      const row = shard?.byId.get(id);
      if (shard && row !== undefined) out.set(id, shard.vectorOf(row).slice());
    }
    return out;
  }

  async count(feedId: string): Promise<number> {
    await this.#ready();
    return this.#feeds.get(feedId)?.live ?? 0;
  }

  /** Saves every changed feed: a new generation folder, then an atomic switch of its CURRENT pointer. */
  async flush(): Promise<void> {
    await this.#exclusive(async () => {
      for (const shard of this.#feeds.values()) {
        if (!shard.dirty) continue;
        await this.#save(shard);
        shard.dirty = false;
      }
    });
  }

  #graphSearch(
    shard: FeedShard,
    vector: Float32Array,
    wanted: number,
    accepts: (row: number) => boolean,
    k: number,
  ): VectorHit[] {
    const matches = shard.graph.search(vector, Math.min(wanted, shard.live), 1) as Matches;
    return this.#hitsOf(shard, matches.keys, vector, accepts, k);
  }

  /** The graph's answer as hits: accepted rows, re-scored exactly, best k. */
  #hitsOf(
    shard: FeedShard,
    keys: BigUint64Array,
    vector: Float32Array,
    accepts: (row: number) => boolean,
    k: number,
  ): VectorHit[] {
    const hits: VectorHit[] = [];
    for (let i = 0; i < keys.length; i += 1) {
      const row = Number(keys[i]);
      const meta = shard.rows[row];
      if (!meta || !accepts(row)) continue;
      // Re-scored exactly: graph distances are approximate on quantized graphs and would break ties.
      hits.push({
        id: meta.id,
        productId: meta.productId,
        itemGroupId: meta.itemGroupId,
        similarity: rowSimilarity(shard.vectors, row, vector),
      });
    }
    return hits.sort(compareHits).slice(0, k);
  }

  #exactSearch(shard: FeedShard, vector: Float32Array, k: number, rows: number[]): VectorHit[] {
    if (rows.length === 0) return [];
    // Gathered into a reused buffer: a fresh one per query costs more in page faults than the search itself.
    // Safe without locking because nothing awaits between this copy and the search.
    const length = rows.length * this.dimension;
    if (this.#scratch.length < length) this.#scratch = new Float32Array(length);
    const dataset = this.#scratch.subarray(0, length);
    rows.forEach((row, i) => dataset.set(shard.vectorOf(row), i * this.dimension));
    // usearch 2.26's exactSearch reads a typed array from the start of its ArrayBuffer, ignoring byteOffset:
    // a query that is a view into a larger buffer (a batch, a Buffer pool) must be copied first.
    const query =
      vector.byteOffset === 0 && vector.buffer.byteLength === vector.byteLength ? vector : vector.slice();
    // Asked for exactly k, usearch keeps whichever rows tied with the k-th it met first, not the lowest
    // productIds: a page of k then left out a tied product that a deeper page ranked above it (the port
    // breaks ties by productId for stable paging). One result more shows whether the tie goes past k;
    // while it does, twice as many are asked for, until a result falls clearly below the k-th.
    let count = Math.min(k + 1, rows.length);
    for (;;) {
      const hits = this.#exactHits(shard, vector, query, rows, dataset, count);
      const kth = hits[Math.min(k, hits.length) - 1];
      const last = hits.at(-1);
      // usearch's f32 scores differ from the exact ones in the last bits (~2e-8): a row it did not return
      // scores at most a few of those above the last one it did.
      if (count === rows.length || !kth || !last || last.similarity < kth.similarity - TIE_TOLERANCE)
        return hits.slice(0, k);
      count = Math.min(rows.length, count * 2);
    }
  }

  /** The `count` best of `rows` by usearch's exact search, re-scored exactly and ranked. */
  #exactHits(
    shard: FeedShard,
    vector: Float32Array,
    query: Float32Array,
    rows: number[],
    dataset: Float32Array,
    count: number,
  ): VectorHit[] {
    const matches = exactSearch(dataset, query, this.dimension, count, MetricKind.IP, 1);
    const hits: VectorHit[] = [];
    for (let i = 0; i < matches.keys.length; i += 1) {
      const row = rows[Number(matches.keys[i])];
      const meta = row === undefined ? undefined : shard.rows[row];
      if (row === undefined || !meta) continue;
      // Re-scored as the graph's hits are: usearch's f32 distance differs in the last bits (~2e-8), and
      // whether a filtered query scans or walks the graph depends on its k, so pages of different depths
      // scored one product differently.
      hits.push({
        id: meta.id,
        productId: meta.productId,
        itemGroupId: meta.itemGroupId,
        similarity: rowSimilarity(shard.vectors, row, vector),
      });
    }
    return hits.sort(compareHits);
  }

  #assertVector(vector: Float32Array, what: string): void {
    if (!(vector instanceof Float32Array) || vector.length !== this.dimension) {
      throw new RangeError(`${what}: expected a Float32Array of length ${this.dimension}`);
    }
  }

  #newGraph(quantization: GraphQuantization): Index {
    const { metric, scalar } = graphMetric(quantization);
    return new Index({
      dimensions: this.dimension,
      metric,
      quantization: scalar,
      connectivity: this.#connectivity,
      expansion_add: this.#expansionAdd,
      expansion_search: this.#expansionSearch,
      multi: false,
    });
  }

  #shardFor(feedId: string): FeedShard {
    let shard = this.#feeds.get(feedId);
    if (!shard) {
      shard = new FeedShard(feedId, this.dimension, this.#newGraph(this.#quantization), this.#quantization);
      this.#feeds.set(feedId, shard);
    }
    return shard;
  }

  /** Feed ids are arbitrary strings: base64url keeps them safe as folder names. */
  #feedDir(feedId: string): string {
    return join(this.#dir, feedDirName(feedId));
  }

  #ready(): Promise<void> {
    this.#loaded ??= this.#loadAll();
    return this.#loaded;
  }

  /** Runs a write after every earlier write, once the index is loaded; a failed write does not block later ones. */
  #exclusive<T>(work: () => T | Promise<T>): Promise<T> {
    const run = this.#queue.then(async () => {
      await this.#ready();
      return work();
    });
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #loadAll(): Promise<void> {
    let entries: string[];
    try {
      entries = await readdir(this.#dir);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
    for (const entry of entries) {
      const feedDir = join(this.#dir, entry);
      let generation: number;
      try {
        generation = Number((await readFile(join(feedDir, 'CURRENT'), 'utf8')).trim());
      } catch (error) {
        if (
          (error as NodeJS.ErrnoException).code === 'ENOENT' ||
          (error as NodeJS.ErrnoException).code === 'ENOTDIR'
        ) {
          continue;
        }
        throw error;
      }
      await this.#loadShard(join(feedDir, String(generation)), generation);
    }
  }

  async #loadShard(genDir: string, generation: number): Promise<void> {
    const meta = JSON.parse(await readFile(join(genDir, 'meta.json'), 'utf8')) as PersistedMeta;
    // Two refusals with their own words: a file from a newer build (format) is not a dimension mismatch.
    if (meta.format !== 1 && meta.format !== 2) {
      const { format } = meta as { format: unknown };
      throw new Error(
        `Vector index at ${genDir} is metadata format ${String(format)}, this build reads 1 and 2: ` +
          'run the build that wrote it or rebuild it',
      );
    }
    if (meta.dimension !== this.dimension) {
      throw new Error(
        `Vector index at ${genDir} holds dimension ${meta.dimension}, expected ${this.dimension}: rebuild it`,
      );
    }
    const quantization = meta.quantization ?? 'f32';
    const graph = this.#newGraph(quantization);
    const shard = new FeedShard(meta.feedId, this.dimension, graph, quantization, {
      initialCapacity: Math.max(1, meta.rows.length),
      indexed: false,
    });
    await readInto(join(genDir, 'vectors.f32'), shard.vectors, meta.rows.length * this.dimension);
    const fieldsOf = persistedFields(meta);
    meta.rows.forEach((persisted, row) => {
      shard.rows.push(undefined);
      if (!persisted) {
        shard.freeRows.push(row);
        return;
      }
      const [id, productId, itemGroupId] = persisted;
      shard.attach(row, { id, productId, itemGroupId, fields: fieldsOf(persisted[3]) });
      this.#feedOfId.set(id, meta.feedId);
    });
    graph.load(join(genDir, 'index.usearch'));
    if (graph.size() !== shard.live) {
      throw new Error(
        `Vector index at ${genDir} is inconsistent: graph ${graph.size()} vs ${shard.live} rows`,
      );
    }
    shard.generation = generation;
    this.#feeds.set(meta.feedId, shard);
  }

  async #save(shard: FeedShard): Promise<void> {
    const feedDir = this.#feedDir(shard.feedId);
    const generation = shard.generation + 1;
    const genDir = join(feedDir, String(generation));
    await rm(genDir, { recursive: true, force: true });
    await mkdir(genDir, { recursive: true });
    const names = new NameNumbering();
    const lists = new ListNumbering();
    const meta: PersistedMeta = {
      format: 2,
      feedId: shard.feedId,
      dimension: this.dimension,
      quantization: shard.quantization,
      rows: shard.rows.map((row) => {
        if (!row) return null;
        const fields: number[] = [];
        for (const [name, values] of Object.entries(row.fields))
          fields.push(names.of(name), lists.of(values));
        return [row.id, row.productId, row.itemGroupId, fields];
      }),
      names: names.items,
      lists: lists.items,
    };
    await writeFile(join(genDir, 'meta.json'), JSON.stringify(meta));
    const used = shard.rows.length * this.dimension;
    await writeFile(join(genDir, 'vectors.f32'), new Uint8Array(shard.vectors.buffer, 0, used * 4));
    shard.graph.save(join(genDir, 'index.usearch'));
    await writeFile(join(feedDir, 'CURRENT.tmp'), String(generation));
    await rename(join(feedDir, 'CURRENT.tmp'), join(feedDir, 'CURRENT'));
    if (shard.generation > 0)
      await rm(join(feedDir, String(shard.generation)), { recursive: true, force: true });
    shard.generation = generation;
  }
}

/** A feed's folder in an index folder: its id as base64url (any id is one safe folder name). */
function feedDirName(feedId: string): string {
  return Buffer.from(feedId, 'utf8').toString('base64url');
}
