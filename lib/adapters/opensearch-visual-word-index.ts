import type { Client } from '@opensearch-project/opensearch';
import {
  createIndexIfMissing,
  deleteFeedDocuments,
  deleteWholeFeed,
  statusOf,
} from '#lib/adapters/opensearch-index-ops.ts';
import type { VisualWordDocument, VisualWordHit, VisualWordIndex, VisualWordQuery } from '#lib/ports.ts';
import { wordTerm } from '#lib/vision/local-features/visual-words.ts';

/**
 * `VisualWordIndex` on OpenSearch (Amazon OpenSearch Service in AWS): one index for every feed,
 * `${indexPrefix}-visual-words-v1`, documents routed by feed id so a feed's images share one shard and a
 * query touches one shard (like the vector index).
 *
 * Scoring. `words` is a `text` field (whitespace analyzer: a word's term, `wordTerm`, is one token) with a
 * custom BM25 similarity of k1 = 0: BM25's term-frequency factor freq / (freq + k1·…) is then 1, so a shared
 * word scores exactly its idf, and a document's score is the sum of the idf of the words it shares with the
 * query, the port's definition. (Words are distinct per document anyway; `index_options: docs` and `norms:
 * false` drop frequencies, positions and length norms, which k1 = 0 never reads.) The idf is Lucene's ln(1 +
 * (N − df + 0.5)/(df + 0.5)), not the local index's ln(1 + N/df), and N and df count the documents of the
 * *shard* (every feed routed there, plus deleted documents until their segments merge), not of the feed: both
 * weigh rare words more, and scores are comparable within one query only, so the rankings agree closely (sums
 * of two different idfs can still swap near-ties) as long as word frequencies are alike across the feeds of a
 * shard (ORB words carry no catalogue semantics). A per-feed idf would need the feed's df of ~8,000 terms per
 * query (an aggregation as large as the query), so it is not done. Measured through this adapter against the
 * test fake's BM25 (same benchmark as below, all query words): R@1 0.586 / R@20 0.733 / R@60 0.791, the local
 * index's 0.586 / 0.733 / 0.793.
 *
 * The clause limit. A `match` query with operator `or` becomes one Lucene boolean SHOULD clause per token,
 * and a query has up to 8 words × 1,000 keypoints = 8,000 tokens, while `indices.query.bool.max_clause_count`
 * defaults to 1,024 (Amazon OpenSearch Service: advanced option, default "1024"; exceeding it is a
 * TooManyClauses error). Since Lucene 9 the limit counts every leaf clause of the rewritten query tree
 * (LUCENE-8811), so splitting the words into nested bool clauses does not get around it; splitting them into
 * separate requests would need every partial score of every image to sum them (a top-k per part is not the
 * top-k of the sum), and dropping words loses recall: measured on the project benchmark (seed 1, 532 queries,
 * shortlist alone, top 60), all query words (~5,300) give R@1 0.586 / R@20 0.733 / R@60 0.793 (scene queries
 * 0.505 / 0.665 / 0.738), an even 1,022-word subset 0.472 / 0.654 / 0.703 (scene 0.359 / 0.552 / 0.613), the
 * words of the 127 strongest keypoints (ORB capped at 127) 0.491 / 0.656 / 0.727 (scene 0.416 / 0.573 /
 * 0.647). So the domain raises the limit instead: the CDK stack sets the advanced option
 * `indices.query.bool.max_clause_count` to `SEARCH_MAX_CLAUSE_COUNT` (infra/stacks/stateful-stack.ts; dynamic
 * since OpenSearch 2.16, the domain runs 2.19; a self-managed cluster sets it in opensearch.yml or as a
 * cluster setting), and an infra test checks that it covers `VISUAL_WORD_MAX_QUERY_TERMS` plus the filter
 * clauses. A query with more distinct words than `maxQueryTerms` (more keypoints than the extractor's
 * default) is thinned to an evenly spaced subset of its sorted words, which keeps every slice represented;
 * that path loses recall and is not taken at the default 1,000 query keypoints. (Raising the option on an
 * existing domain runs a blue/green deployment; a larger limit only admits larger queries, and this service
 * is the cluster's only client.) Sources: Amazon OpenSearch Service API reference, AdvancedOptions
 * ("indices.query.bool.max_clause_count", default 1,024, TooManyClauses); OpenSearch docs, cluster-level
 * index settings (the setting, dynamic from 2.16); Lucene IndexSearcher (the clause check visits every leaf:
 * one per term query, one per terms query) and BM25Similarity (k1 ≥ 0 allowed; tf = 1 − 1/(1 + freq/(k1·…)),
 * exactly 1 when k1 = 0).
 *
 * Ties. Hits are sorted by score, then by an `image_id` keyword (= document id), in the query itself, so
 * images tied at the k-th place are cut by id like the local index does. (Sorting on a field besides the
 * score costs Lucene's top-score skipping; the disjunction is scored exhaustively on the feed's shard.)
 */

/** Bumped with the word definition (VISUAL_WORDS_VERSION) or the mapping. */
export const VISUAL_WORDS_INDEX_SUFFIX = 'visual-words-v1';

/**
 * Most query terms sent in one query: 8 slices × 1,000 query keypoints fit. The domain's
 * `indices.query.bool.max_clause_count` must be at least this plus `VISUAL_WORD_FILTER_CLAUSES`.
 */
export const VISUAL_WORD_MAX_QUERY_TERMS = 8_192;
/** Leaf clauses of a query besides its words: the feed filter and the excluded item groups. */
export const VISUAL_WORD_FILTER_CLAUSES = 2;

const WORDS_FIELD = 'words';
const SIMILARITY = 'visual_word_idf';
/** Documents per bulk request, and words: ~10 bytes per word keeps a request near 4 MB, well under the
 * 10 MiB HTTP payload limit of the smallest Amazon OpenSearch Service instances. */
const BULK_DOCUMENTS = 200;
const BULK_WORDS = 400_000;
const PRODUCT_IDS_CHUNK = 1000;
const MAX_K = 10_000;

export interface OpenSearchVisualWordIndexOptions {
  client: Client;
  /** Index name prefix (`config.vectorIndex.indexPrefix`); the index is `${indexPrefix}-visual-words-v1`. */
  indexPrefix: string;
  /** Refresh policy of writes; `wait_for` (default): a search after a write sees it, without forced segments. */
  refresh?: boolean | 'wait_for';
  shards?: number;
  replicas?: number;
  /** Most words sent per query (default VISUAL_WORD_MAX_QUERY_TERMS); must fit the cluster's clause limit. */
  maxQueryTerms?: number;
}

/** Index settings and mapping (exported for tests). */
export function visualWordIndexBody(
  options: { shards?: number; replicas?: number } = {},
): Record<string, unknown> {
  return {
    settings: {
      index: {
        ...(options.shards === undefined ? {} : { number_of_shards: options.shards }),
        ...(options.replicas === undefined ? {} : { number_of_replicas: options.replicas }),
        // k1 = 0: a matching term scores its idf whatever its frequency; b is then irrelevant.
        similarity: { [SIMILARITY]: { type: 'BM25', k1: 0, b: 0 } },
      },
    },
    mappings: {
      dynamic: 'strict',
      _routing: { required: true },
      // The words are only searched, never read back: keeping them out of _source saves ~80 KB per image.
      _source: { excludes: [WORDS_FIELD] },
      properties: {
        feed_id: { type: 'keyword' },
        product_id: { type: 'keyword' },
        item_group_id: { type: 'keyword' },
        image_id: { type: 'keyword' },
        [WORDS_FIELD]: {
          type: 'text',
          analyzer: 'whitespace',
          similarity: SIMILARITY,
          index_options: 'docs',
          norms: false,
        },
      },
    },
  };
}

/** Index names must be lower case and free of `\ / * ? " < > | , # :` and spaces. */
export function visualWordIndexName(indexPrefix: string): string {
  return `${indexPrefix}-${VISUAL_WORDS_INDEX_SUFFIX}`.toLowerCase().replace(/[\\/*?"<>|,#:\s]+/g, '_');
}

/** At most `max` of the (sorted, distinct) words, evenly spaced, so every slice keeps its share. */
export function thinWords(words: Float64Array, max: number): Float64Array {
  if (words.length <= max) return words;
  const kept = new Float64Array(max);
  for (let i = 0; i < max; i += 1) kept[i] = words[Math.floor((i * words.length) / max)]!;
  return kept;
}

function compareHits(a: VisualWordHit, b: VisualWordHit): number {
  if (a.score !== b.score) return b.score - a.score;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

interface SearchHit {
  _id: string;
  _score: number | null;
  sort?: unknown[];
  _source?: { product_id?: string; item_group_id?: string };
}

export class OpenSearchVisualWordIndex implements VisualWordIndex {
  readonly indexName: string;
  readonly #client: Client;
  readonly #refresh: boolean | 'wait_for';
  readonly #maxQueryTerms: number;
  readonly #options: OpenSearchVisualWordIndexOptions;
  #created: Promise<void> | undefined;

  constructor(options: OpenSearchVisualWordIndexOptions) {
    const maxQueryTerms = options.maxQueryTerms ?? VISUAL_WORD_MAX_QUERY_TERMS;
    if (!Number.isInteger(maxQueryTerms) || maxQueryTerms <= 0) {
      throw new RangeError(`maxQueryTerms must be a positive integer, got ${maxQueryTerms}`);
    }
    this.indexName = visualWordIndexName(options.indexPrefix);
    this.#client = options.client;
    this.#refresh = options.refresh ?? 'wait_for';
    this.#maxQueryTerms = maxQueryTerms;
    this.#options = options;
  }

  async upsert(documents: VisualWordDocument[]): Promise<void> {
    if (documents.length === 0) return;
    await this.#ensureIndex();
    let body: Array<Record<string, unknown>> = [];
    let count = 0;
    let words = 0;
    const send = async (): Promise<void> => {
      if (count === 0) return;
      const response = await this.#client.bulk({ index: this.indexName, body, refresh: this.#refresh });
      body = [];
      count = 0;
      words = 0;
      if (response.body.errors) {
        const failed = response.body.items.find((item) => Object.values(item)[0]?.error);
        const error = failed ? Object.values(failed)[0]?.error : undefined;
        throw new Error(`OpenSearch bulk upsert failed: ${error?.type ?? 'unknown'}: ${error?.reason ?? ''}`);
      }
    };
    for (const document of documents) {
      if (count > 0 && (count >= BULK_DOCUMENTS || words + document.words.length > BULK_WORDS)) await send();
      body.push({ index: { _index: this.indexName, _id: document.id, routing: document.feedId } });
      body.push({
        feed_id: document.feedId,
        product_id: document.productId,
        item_group_id: document.itemGroupId,
        image_id: document.id,
        [WORDS_FIELD]: Array.from(document.words, wordTerm).join(' '),
      });
      count += 1;
      words += document.words.length;
    }
    await send();
  }

  async deleteProducts(feedId: string, productIds: string[], except: readonly string[] = []): Promise<void> {
    const unique = [...new Set(productIds)];
    for (let start = 0; start < unique.length; start += PRODUCT_IDS_CHUNK) {
      await deleteFeedDocuments(
        this.#client,
        this.indexName,
        feedId,
        [
          { term: { feed_id: feedId } },
          { terms: { product_id: unique.slice(start, start + PRODUCT_IDS_CHUNK) } },
        ],
        except,
      );
    }
  }

  async deleteFeed(feedId: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    await deleteWholeFeed(this.#client, this.indexName, feedId, options);
  }

  async search(query: VisualWordQuery): Promise<VisualWordHit[]> {
    // OpenSearch caps size at 10,000 (index.max_result_window).
    const k = Math.min(Math.floor(query.k), MAX_K);
    if (k <= 0 || query.words.length === 0) return [];
    const terms = Array.from(thinWords(query.words, this.#maxQueryTerms), wordTerm);
    const excluded = [...new Set(query.excludeItemGroupIds ?? [])];
    try {
      const response = await this.#client.search({
        index: this.indexName,
        routing: query.feedId,
        body: {
          size: k,
          track_total_hits: false,
          _source: ['product_id', 'item_group_id'],
          sort: [{ _score: 'desc' }, { image_id: 'asc' }],
          query: {
            bool: {
              filter: [{ term: { feed_id: query.feedId } }],
              must: [{ match: { [WORDS_FIELD]: { query: terms.join(' '), operator: 'or' } } }],
              ...(excluded.length > 0 ? { must_not: [{ terms: { item_group_id: excluded } }] } : {}),
            },
          },
        },
      });
      const hits = (response.body.hits.hits as SearchHit[]).map((hit) => ({
        id: hit._id,
        productId: hit._source?.product_id ?? '',
        itemGroupId: hit._source?.item_group_id ?? '',
        // With an explicit sort the score is also the first sort value.
        score: hit._score ?? Number(hit.sort?.[0] ?? 0),
      }));
      return hits.filter((hit) => hit.score > 0).sort(compareHits);
    } catch (error) {
      if (statusOf(error) === 404) return [];
      throw error;
    }
  }

  /** Writes are durable once acknowledged (translog); nothing to do. */
  async flush(): Promise<void> {}

  /** Creates the index on first write; tolerates a concurrent creator. */
  #ensureIndex(): Promise<void> {
    this.#created ??= createIndexIfMissing(
      this.#client,
      this.indexName,
      visualWordIndexBody({ shards: this.#options.shards, replicas: this.#options.replicas }),
    ).catch((error: unknown) => {
      this.#created = undefined;
      throw error;
    });
    return this.#created;
  }
}
