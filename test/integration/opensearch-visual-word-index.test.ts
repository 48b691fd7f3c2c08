import { Client } from '@opensearch-project/opensearch';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  OpenSearchVisualWordIndex,
  thinWords,
  VISUAL_WORD_FILTER_CLAUSES,
  VISUAL_WORD_MAX_QUERY_TERMS,
  visualWordIndexBody,
  visualWordIndexName,
} from '#lib/adapters/opensearch-visual-word-index.ts';
import { parseWordTerm, SLICE_SPAN, wordTerm } from '#lib/vision/local-features/visual-words.ts';
import { startFakeOpenSearch, type FakeOpenSearch } from '#test/support/fake-opensearch.ts';
import {
  describeVisualWordIndexContract,
  range,
  wordDoc,
  wordList,
  words,
} from './visual-word-index.contract.ts';

/** The fake cluster's clause limit: the least the domain must allow (infra test: the stack sets more). */
const CLAUSE_LIMIT = VISUAL_WORD_MAX_QUERY_TERMS + VISUAL_WORD_FILTER_CLAUSES;

let fake: FakeOpenSearch;
/** A cluster left at OpenSearch's default `indices.query.bool.max_clause_count` (1024). */
let defaultFake: FakeOpenSearch;
let run = 0;

beforeAll(async () => {
  fake = await startFakeOpenSearch({ maxClauseCount: CLAUSE_LIMIT });
  defaultFake = await startFakeOpenSearch();
});

afterAll(async () => {
  await fake.close();
  await defaultFake.close();
});

/** Each test gets its own prefix, hence its own index: tests share the server, never documents. */
function freshIndex(
  options: Partial<ConstructorParameters<typeof OpenSearchVisualWordIndex>[0]> = {},
  server: FakeOpenSearch = fake,
): OpenSearchVisualWordIndex {
  run += 1;
  return new OpenSearchVisualWordIndex({
    client: new Client({ node: server.url }),
    indexPrefix: `contract-${run}`,
    ...options,
  });
}

describeVisualWordIndexContract('OpenSearch against the HTTP fake', async () => ({
  index: freshIndex(),
  close: async () => {},
}));

function requestsSince(before: number, path: string): FakeOpenSearch['requests'] {
  return fake.requests.slice(before).filter((request) => request.path.endsWith(path));
}

describe('OpenSearchVisualWordIndex', () => {
  it("passes a feed deletion's signal on (an aborted one deletes nothing; a live one deletes in calls)", async () => {
    const index = freshIndex();
    await index.upsert([wordDoc('f1', 'p1', [1, 2]), wordDoc('f2', 'p1', [1, 2])]);
    const before = fake.requests.length;

    await expect(index.deleteFeed('f1', { signal: AbortSignal.abort() })).rejects.toThrow();
    expect(requestsSince(before, '/_delete_by_query')).toEqual([]);
    await index.deleteFeed('f1', { signal: new AbortController().signal });

    const [call] = requestsSince(before, '/_delete_by_query');
    expect((call?.body as { max_docs?: number }).max_docs).toBe(10_000);
    expect((await index.search({ feedId: 'f1', words: words(1, 2), k: 5 })).length).toBe(0);
    expect((await index.search({ feedId: 'f2', words: words(1, 2), k: 5 })).length).toBe(1);
  });

  it('creates its index on first write: routed, strict, words as whitespace text with an idf-only BM25', async () => {
    // Prepare
    const index = freshIndex({ indexPrefix: 'Products' });

    // Act
    await index.upsert([wordDoc('f1', 'p1', [1, 2])]);
    await index.upsert([wordDoc('f1', 'p2', [3])]);

    // Assess
    expect(index.indexName).toBe('products-visual-words-v1');
    const creates = fake.requests.filter(
      (request) => request.method === 'PUT' && request.path === '/products-visual-words-v1',
    );
    expect(creates).toHaveLength(1);
    expect(creates[0]?.body).toEqual(visualWordIndexBody());
    expect(creates[0]?.body).toMatchObject({
      settings: { index: { similarity: { visual_word_idf: { type: 'BM25', k1: 0 } } } },
      mappings: {
        dynamic: 'strict',
        _routing: { required: true },
        properties: {
          feed_id: { type: 'keyword' },
          image_id: { type: 'keyword' },
          words: { type: 'text', analyzer: 'whitespace', similarity: 'visual_word_idf' },
        },
      },
    });
  });

  it('writes every word as its term and routes writes, deletes and queries by feed id', async () => {
    // Prepare
    const index = freshIndex();
    const before = fake.requests.length;

    // Act
    await index.upsert([wordDoc('feed-a', 'p1', [1, 2, 3], { itemGroupId: 'g' })]);
    await index.search({ feedId: 'feed-a', words: words(1, 2), k: 7, excludeItemGroupIds: ['g2', 'g2'] });
    await index.deleteProducts('feed-a', ['p1']);
    await index.deleteFeed('feed-a');

    // Assess
    const [bulk] = requestsSince(before, '/_bulk');
    const [action, source] = String(bulk?.body)
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(action).toEqual({ index: { _index: index.indexName, _id: 'feed-a/p1/0', routing: 'feed-a' } });
    expect(source).toEqual({
      feed_id: 'feed-a',
      product_id: 'p1',
      item_group_id: 'g',
      image_id: 'feed-a/p1/0',
      words: Array.from(words(1, 2, 3), wordTerm).join(' '),
    });
    expect(bulk?.query.get('refresh')).toBe('wait_for');
    const [search] = requestsSince(before, '/_search');
    expect(search?.query.get('routing')).toBe('feed-a');
    expect(search?.body).toEqual({
      size: 7,
      track_total_hits: false,
      _source: ['product_id', 'item_group_id'],
      sort: [{ _score: 'desc' }, { image_id: 'asc' }],
      query: {
        bool: {
          filter: [{ term: { feed_id: 'feed-a' } }],
          must: [
            { match: { words: { query: Array.from(words(1, 2), wordTerm).join(' '), operator: 'or' } } },
          ],
          must_not: [{ terms: { item_group_id: ['g2'] } }],
        },
      },
    });
    const deletes = requestsSince(before, '/_delete_by_query');
    expect(deletes.map((request) => request.query.get('routing'))).toEqual(['feed-a', 'feed-a']);
  });

  it("scores an image with the sum of BM25's idf of the shared words, whatever their frequency", async () => {
    // Prepare: N = 4 images in the shard (two feeds); word 1 is in 3 of them, word 2 in 1, word 3 in 2.
    const index = freshIndex();
    await index.upsert([
      wordDoc('f1', 'a', [1, 2, 3]),
      wordDoc('f1', 'b', [1, 3]),
      wordDoc('f1', 'c', [4]),
      wordDoc('f2', 'd', [1]),
    ]);
    const idf = (df: number): number => Math.log(1 + (4 - df + 0.5) / (df + 0.5));

    // Act
    const hits = await index.search({ feedId: 'f1', words: words(1, 2, 3), k: 10 });

    // Assess
    expect(hits.map((hit) => hit.id)).toEqual(['f1/a/0', 'f1/b/0']);
    expect(hits[0]?.score).toBeCloseTo(idf(3) + idf(1) + idf(2), 5);
    expect(hits[1]?.score).toBeCloseTo(idf(3) + idf(2), 5);
  });

  it('needs the raised clause limit: a full query fails on a cluster left at 1024 clauses', async () => {
    // Prepare
    const onDefault = freshIndex({}, defaultFake);
    const raised = freshIndex();
    const query = { feedId: 'f1', words: wordList(range(0, 8000)), k: 5 };
    await onDefault.upsert([wordDoc('f1', 'p1', range(0, 100))]);
    await raised.upsert([wordDoc('f1', 'p1', range(0, 100))]);

    // Act
    const failure = await onDefault.search(query).then(
      () => undefined,
      (error: unknown) => error,
    );
    const hits = await raised.search(query);

    // Assess
    expect(String(failure)).toMatch(/too_many_clauses/);
    expect(hits.map((hit) => hit.id)).toEqual(['f1/p1/0']);
  });

  it('thins a query with more words than maxQueryTerms to an even spread over its slices', async () => {
    // Prepare
    const index = freshIndex({ maxQueryTerms: 100 });
    await index.upsert([wordDoc('f1', 'p1', range(0, 1000))]);
    const before = fake.requests.length;

    // Act
    const hits = await index.search({ feedId: 'f1', words: wordList(range(0, 1000)), k: 5 });

    // Assess
    expect(hits.map((hit) => hit.id)).toEqual(['f1/p1/0']);
    const [search] = requestsSince(before, '/_search');
    const body = search?.body as {
      query: { bool: { must: Array<{ match: { words: { query: string } } }> } };
    };
    const sent = body.query.bool.must[0]!.match.words.query.split(' ').map((term) => parseWordTerm(term)!);
    expect(sent).toHaveLength(100);
    expect(new Set(sent.map((word) => Math.floor(word / SLICE_SPAN))).size).toBe(8);
    expect(thinWords(words(1, 2, 3), 5)).toEqual(words(1, 2, 3));
  });

  it('splits large upserts into bulk requests of bounded size', async () => {
    // Prepare: three images of 150,000 words (~1.5 MB each): the 400,000-word budget takes two per request.
    const index = freshIndex();
    const documents = [0, 1, 2].map((i) => wordDoc('f1', `p${i}`, range(i * 150_000, (i + 1) * 150_000)));
    const before = fake.requests.length;

    // Act
    await index.upsert(documents);

    // Assess
    const bulks = requestsSince(before, '/_bulk');
    expect(bulks.map((request) => String(request.body).trim().split('\n').length / 2)).toEqual([2, 1]);
    const hits = await index.search({ feedId: 'f1', words: words(5, 150_005, 300_005), k: 10 });
    expect(hits.map((hit) => hit.id)).toEqual(['f1/p0/0', 'f1/p1/0', 'f1/p2/0']);
  });

  it('reports a rejected bulk item as an error', async () => {
    // Prepare: an index created elsewhere, strictly mapped without the image id.
    const index = freshIndex();
    const body = visualWordIndexBody() as { mappings: { properties: Record<string, unknown> } };
    delete body.mappings.properties.image_id;
    await new Client({ node: fake.url }).indices.create({
      index: index.indexName,
      body: body as Record<string, unknown>,
    });

    // Act
    const upsert = index.upsert([wordDoc('f1', 'p1', [1])]);

    // Assess
    await expect(upsert).rejects.toThrow(/strict_dynamic_mapping_exception/);
  });

  it('names its index validly whatever the prefix', () => {
    // Act
    const name = visualWordIndexName('My Prefix#1');

    // Assess
    expect(name).toBe('my_prefix_1-visual-words-v1');
  });
});
