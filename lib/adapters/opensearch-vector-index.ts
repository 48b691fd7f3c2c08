import { Client } from '@opensearch-project/opensearch';
import {
  createIndexIfMissing,
  deleteFeedDocuments,
  deleteWholeFeed,
  statusOf,
} from '#lib/adapters/opensearch-index-ops.ts';
import { AwsSigv4Signer } from '@opensearch-project/opensearch/aws-v3';
import type { VectorDocument, VectorFilter, VectorHit, VectorIndex, VectorQuery } from '#lib/ports.ts';

export type OpenSearchSpaceType = 'innerproduct' | 'cosinesimil';
export type OpenSearchEngine = 'faiss' | 'lucene';

/** Options of the OpenSearch adapter; the defaults suit L2-normalised embeddings. */
export interface OpenSearchVectorIndexOptions {
  client: Client;
  /** Index name prefix (`config.vectorIndex.indexPrefix`); the index is `${indexPrefix}-${modelVersion}`. */
  indexPrefix: string;
  /** Embedding model version: vectors of different versions live in different indices. */
  modelVersion: string;
  dimension: number;
  /** innerproduct (default) equals cosine on L2-normalised vectors and skips a normalisation per distance. */
  spaceType?: OpenSearchSpaceType;
  /** Both engines support efficient (in-graph) filtering; faiss (default) since OpenSearch 2.9. */
  engine?: OpenSearchEngine;
  /**
   * Refresh policy of writes. `wait_for` (default) returns once the writes are searchable without forcing
   * extra segments, so a search after an upsert sees it (as the port promises) and bulk imports are not
   * slowed by forced refreshes.
   */
  refresh?: boolean | 'wait_for';
  shards?: number;
  replicas?: number;
  /** HNSW graph degree and build-time candidate list. */
  m?: number;
  efConstruction?: number;
}

/** The vector field; the other fields are keywords. */
const VECTOR_FIELD = 'vector';
const BULK_CHUNK = 200;
const IDS_CHUNK = 1000;
const MAX_K = 10_000;
/** Searches per `_msearch` request: bounds the request and the coordinating node's buffered responses. */
const MSEARCH_CHUNK = 100;

/**
 * Index settings and mapping of one embedding model version. Exported so a test can check that the mapped
 * dimension agrees with the model manifest.
 *
 * Filterable fields are stored as `key=value` keywords in one `filters` field (key URI-encoded so that its
 * first `=` ends it) instead of one keyword field per filter key: `metadata.<name>` keys are chosen by
 * merchants, and one index serves every feed, so a field per key would grow the mapping without bound
 * (OpenSearch caps an index at 1000 fields by default). AND across keys is one `terms` clause per key, OR
 * within a key is the `terms` clause itself.
 */
export function vectorIndexBody(options: {
  dimension: number;
  spaceType: OpenSearchSpaceType;
  engine: OpenSearchEngine;
  shards?: number;
  replicas?: number;
  m?: number;
  efConstruction?: number;
}): Record<string, unknown> {
  return {
    settings: {
      index: {
        knn: true,
        ...(options.shards === undefined ? {} : { number_of_shards: options.shards }),
        ...(options.replicas === undefined ? {} : { number_of_replicas: options.replicas }),
      },
    },
    mappings: {
      dynamic: 'strict',
      // Every document is written and queried with its feed id as routing: a feed's documents share a shard.
      _routing: { required: true },
      properties: {
        feed_id: { type: 'keyword' },
        product_id: { type: 'keyword' },
        item_group_id: { type: 'keyword' },
        filters: { type: 'keyword' },
        [VECTOR_FIELD]: {
          type: 'knn_vector',
          dimension: options.dimension,
          method: {
            name: 'hnsw',
            engine: options.engine,
            space_type: options.spaceType,
            parameters: { m: options.m ?? 16, ef_construction: options.efConstruction ?? 128 },
          },
        },
      },
    },
  };
}

/** Index names must be lower case and free of `\ / * ? " < > | , # :` and spaces. */
export function vectorIndexName(indexPrefix: string, modelVersion: string): string {
  return `${indexPrefix}-${modelVersion}`.toLowerCase().replace(/[\\/*?"<>|,#:\s]+/g, '_');
}

/**
 * Cosine similarity from an OpenSearch k-NN score, inverting the engine's documented score translation
 * (OpenSearch "Spaces"):
 * - innerproduct, faiss and lucene alike: score = dot + 1 when dot > 0, else 1 / (1 - dot);
 * - cosinesimil (OpenSearch ≥ 2.19 for faiss; always for lucene): score = (2 - (1 - cos)) / 2 = (1 + cos) / 2.
 * On L2-normalised vectors the inner product is the cosine.
 */
export function similarityFromScore(score: number, spaceType: OpenSearchSpaceType): number {
  const similarity = spaceType === 'innerproduct' ? (score >= 1 ? score - 1 : 1 - 1 / score) : 2 * score - 1;
  return Math.max(-1, Math.min(1, similarity));
}

/** A client for a plain HTTP(S) cluster, or Amazon OpenSearch Service with SigV4 request signing. */
export function createOpenSearchClient(config: { url: string; sigv4: boolean; region: string }): Client {
  if (!config.sigv4) return new Client({ node: config.url });
  // The signer loads @aws-sdk/credential-provider-node (the Lambda role's credentials) on first use.
  return new Client({ node: config.url, ...AwsSigv4Signer({ region: config.region, service: 'es' }) });
}

function encodeFilter(key: string, value: string): string {
  return `${encodeURIComponent(key)}=${value.toLowerCase()}`;
}

function filterClauses(filter: VectorFilter | undefined): Array<Record<string, unknown>> {
  return Object.entries(filter ?? {})
    .filter(([, values]) => values.length > 0)
    .map(([key, values]) => ({
      terms: { filters: [...new Set(values.map((value) => encodeFilter(key, value)))] },
    }));
}

function compareHits(a: VectorHit, b: VectorHit): number {
  if (a.similarity !== b.similarity) return b.similarity - a.similarity;
  if (a.productId !== b.productId) return a.productId < b.productId ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

interface SearchHit {
  _id: string;
  _score: number | null;
  _source?: { product_id?: string; item_group_id?: string; vector?: number[] };
}

/**
 * A feed's vectors in the index of every embedding model version, for the feed deletion. The function that
 * deletes feeds loads no model, so it cannot open the current version's index (OpenSearchVectorIndex needs
 * the model's version and dimension), and the indices of earlier versions hold the feed's vectors too.
 * Indices are found by name (`${indexPrefix}-*`, which includes the visual-word index: its documents of
 * the feed go too, as they do with the feed).
 */
export class OpenSearchFeedVectors implements Pick<VectorIndex, 'deleteFeed' | 'flush'> {
  constructor(
    private readonly client: Client,
    private readonly indexPrefix: string,
  ) {}

  async deleteFeed(feedId: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    const response = await this.client.indices.get({ index: `${this.indexPrefix}-*` });
    for (const index of Object.keys(response.body as Record<string, unknown>))
      await deleteWholeFeed(this.client, index, feedId, options);
  }

  /** Deletions are refreshed as they are made. */
  async flush(): Promise<void> {}
}

/**
 * `VectorIndex` on OpenSearch's k-NN plugin (Amazon OpenSearch Service in AWS): one HNSW index per
 * embedding model version shared by all feeds, never one per feed. Feed isolation is a `feed_id` term in the
 * k-NN query's efficient filter plus routing by feed id (a feed's documents share one shard, so a query
 * touches one shard). Filters and excluded item groups go into the same efficient filter, so the engine
 * returns k matching documents rather than post-filtering k neighbours.
 */
export class OpenSearchVectorIndex implements VectorIndex {
  readonly dimension: number;
  readonly indexName: string;
  readonly #client: Client;
  readonly #spaceType: OpenSearchSpaceType;
  readonly #engine: OpenSearchEngine;
  readonly #refresh: boolean | 'wait_for';
  readonly #options: OpenSearchVectorIndexOptions;
  #created: Promise<void> | undefined;

  constructor(options: OpenSearchVectorIndexOptions) {
    if (!Number.isInteger(options.dimension) || options.dimension <= 0) {
      throw new RangeError(`dimension must be a positive integer, got ${options.dimension}`);
    }
    this.dimension = options.dimension;
    this.indexName = vectorIndexName(options.indexPrefix, options.modelVersion);
    this.#client = options.client;
    this.#spaceType = options.spaceType ?? 'innerproduct';
    this.#engine = options.engine ?? 'faiss';
    this.#refresh = options.refresh ?? 'wait_for';
    this.#options = options;
  }

  async upsert(documents: VectorDocument[]): Promise<void> {
    for (const document of documents) this.#assertVector(document.vector, `document ${document.id}`);
    if (documents.length === 0) return;
    await this.#ensureIndex();
    for (let start = 0; start < documents.length; start += BULK_CHUNK) {
      const body: Array<Record<string, unknown>> = [];
      for (const document of documents.slice(start, start + BULK_CHUNK)) {
        body.push({ index: { _index: this.indexName, _id: document.id, routing: document.feedId } });
        body.push({
          feed_id: document.feedId,
          product_id: document.productId,
          item_group_id: document.itemGroupId,
          filters: [
            ...new Set(
              Object.entries(document.fields).flatMap(([key, values]) =>
                values.map((value) => encodeFilter(key, value)),
              ),
            ),
          ],
          [VECTOR_FIELD]: Array.from(document.vector),
        });
      }
      const response = await this.#client.bulk({ index: this.indexName, body, refresh: this.#refresh });
      if (response.body.errors) {
        const failed = response.body.items.find((item) => Object.values(item)[0]?.error);
        const error = failed ? Object.values(failed)[0]?.error : undefined;
        throw new Error(`OpenSearch bulk upsert failed: ${error?.type ?? 'unknown'}: ${error?.reason ?? ''}`);
      }
    }
  }

  async deleteProducts(feedId: string, productIds: string[], except: readonly string[] = []): Promise<void> {
    if (productIds.length === 0) return;
    await deleteFeedDocuments(
      this.#client,
      this.indexName,
      feedId,
      [{ term: { feed_id: feedId } }, { terms: { product_id: productIds } }],
      except,
    );
  }

  async deleteFeed(feedId: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    await deleteWholeFeed(this.#client, this.indexName, feedId, options);
  }

  async search(query: VectorQuery): Promise<VectorHit[]> {
    const request = this.#searchRequest(query);
    if (!request) return [];
    try {
      const response = await this.#client.search({
        index: this.indexName,
        routing: query.feedId,
        body: request.body,
      });
      return this.#hitsOf(response.body.hits.hits as SearchHit[], request.k);
    } catch (error) {
      if (statusOf(error) === 404) return [];
      throw error;
    }
  }

  /**
   * One `_msearch` per {@link MSEARCH_CHUNK} queries, each search routed by its feed id and built like
   * `search`'s. A search failing on a missing index answers [] like `search`; any other failed search throws.
   */
  async searchMany(queries: VectorQuery[]): Promise<VectorHit[][]> {
    // Every vector is checked before anything is asked, so a bad query fails the call without a request.
    const requests = queries.map((query) => this.#searchRequest(query));
    const results: VectorHit[][] = queries.map(() => []);
    const asked = requests.flatMap((request, i) =>
      request ? [{ i, routing: queries[i]?.feedId, request }] : [],
    );
    for (let start = 0; start < asked.length; start += MSEARCH_CHUNK) {
      const chunk = asked.slice(start, start + MSEARCH_CHUNK);
      let responses;
      try {
        const response = await this.#client.msearch({
          index: this.indexName,
          body: chunk.flatMap(({ routing, request }) => [{ routing }, request.body]),
        });
        responses = response.body.responses;
      } catch (error) {
        if (statusOf(error) === 404) continue;
        throw error;
      }
      if (responses.length !== chunk.length) {
        throw new Error(`OpenSearch msearch answered ${responses.length} of ${chunk.length} searches`);
      }
      chunk.forEach(({ i, request }, j) => {
        const item = responses[j];
        if (item && 'error' in item) {
          if (item.status === 404) return;
          throw new Error(`OpenSearch msearch failed: ${item.error.type}: ${item.error.reason ?? ''}`);
        }
        results[i] = this.#hitsOf((item?.hits.hits ?? []) as SearchHit[], request.k);
      });
    }
    return results;
  }

  async getVectors(ids: string[]): Promise<Map<string, Float32Array>> {
    const out = new Map<string, Float32Array>();
    const unique = [...new Set(ids)];
    // An ids query rather than _mget: _mget needs each document's routing, which the port does not pass.
    for (let start = 0; start < unique.length; start += IDS_CHUNK) {
      const chunk = unique.slice(start, start + IDS_CHUNK);
      try {
        const response = await this.#client.search({
          index: this.indexName,
          body: { size: chunk.length, _source: [VECTOR_FIELD], query: { ids: { values: chunk } } },
        });
        for (const hit of response.body.hits.hits as SearchHit[]) {
          const vector = hit._source?.vector;
          if (vector) out.set(hit._id, Float32Array.from(vector));
        }
      } catch (error) {
        if (statusOf(error) === 404) return out;
        throw error;
      }
    }
    return out;
  }

  async count(feedId: string): Promise<number> {
    try {
      const response = await this.#client.count({
        index: this.indexName,
        routing: feedId,
        body: { query: { term: { feed_id: feedId } } },
      });
      return response.body.count;
    } catch (error) {
      if (statusOf(error) === 404) return 0;
      throw error;
    }
  }

  /** Writes are durable once acknowledged (translog); nothing to do. */
  async flush(): Promise<void> {}

  /**
   * The `_search` body of a query and its effective k (capped at 10,000, OpenSearch's
   * index.max_result_window), shared by `search` and `searchMany`; undefined when k asks for nothing.
   */
  #searchRequest(query: VectorQuery) {
    this.#assertVector(query.vector, 'query');
    const k = Math.min(Math.floor(query.k), MAX_K);
    if (k <= 0) return undefined;
    const excluded = [...new Set(query.excludeItemGroupIds ?? [])];
    const filter = {
      bool: {
        filter: [{ term: { feed_id: query.feedId } }, ...filterClauses(query.filter)],
        ...(excluded.length > 0 ? { must_not: [{ terms: { item_group_id: excluded } }] } : {}),
      },
    };
    return {
      k,
      body: {
        size: k,
        _source: ['product_id', 'item_group_id'],
        query: { knn: { [VECTOR_FIELD]: { vector: Array.from(query.vector), k, filter } } },
      },
    };
  }

  /** Hits of one search, nearest first with `compareHits`'s tie order. */
  #hitsOf(hits: SearchHit[], k: number): VectorHit[] {
    return hits
      .map((hit) => ({
        id: hit._id,
        productId: hit._source?.product_id ?? '',
        itemGroupId: hit._source?.item_group_id ?? '',
        similarity: similarityFromScore(hit._score ?? 0, this.#spaceType),
      }))
      .sort(compareHits)
      .slice(0, k);
  }

  #assertVector(vector: Float32Array, what: string): void {
    if (!(vector instanceof Float32Array) || vector.length !== this.dimension) {
      throw new RangeError(`${what}: expected a Float32Array of length ${this.dimension}`);
    }
  }

  /** Creates the model version's index on first write; tolerates a concurrent creator. */
  #ensureIndex(): Promise<void> {
    this.#created ??= createIndexIfMissing(
      this.#client,
      this.indexName,
      vectorIndexBody({
        dimension: this.dimension,
        spaceType: this.#spaceType,
        engine: this.#engine,
        shards: this.#options.shards,
        replicas: this.#options.replicas,
        m: this.#options.m,
        efConstruction: this.#options.efConstruction,
      }),
    ).catch((error: unknown) => {
      this.#created = undefined;
      throw error;
    });
    return this.#created;
  }
}
