import { Client } from '@opensearch-project/opensearch';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { deleteFeedDocuments } from '#lib/adapters/opensearch-index-ops.ts';
import {
  createOpenSearchClient,
  OpenSearchFeedVectors,
  OpenSearchVectorIndex,
  similarityFromScore,
  vectorIndexBody,
  vectorIndexName,
} from '#lib/adapters/opensearch-vector-index.ts';
import { startFakeOpenSearch, type FakeOpenSearch } from '#test/support/fake-opensearch.ts';
import { configureContainer, getContainer } from '#lib/container.ts';
import { loadConfig } from '#lib/config.ts';
import type { VectorHit } from '#lib/ports.ts';
import {
  CONTRACT_DIMENSION,
  describeVectorIndexContract,
  doc,
  randomUnit,
  unit,
} from './vector-index.contract.ts';

let fake: FakeOpenSearch;
let run = 0;

beforeAll(async () => {
  fake = await startFakeOpenSearch();
});

afterAll(async () => {
  await fake.close();
});

/** Each test gets its own model version, hence its own index: tests share the server, never documents. */
/** An adapter whose index was created elsewhere with twice the dimension: its writes and searches fail. */
async function indexOfAnotherDimension(): Promise<OpenSearchVectorIndex> {
  const index = freshIndex();
  await new Client({ node: fake.url }).indices.create({
    index: index.indexName,
    body: vectorIndexBody({ dimension: CONTRACT_DIMENSION * 2, spaceType: 'innerproduct', engine: 'faiss' }),
  });
  return index;
}

function freshIndex(
  options: Partial<ConstructorParameters<typeof OpenSearchVectorIndex>[0]> = {},
): OpenSearchVectorIndex {
  run += 1;
  return new OpenSearchVectorIndex({
    client: new Client({ node: fake.url }),
    indexPrefix: 'products',
    modelVersion: `contract-${run}`,
    dimension: CONTRACT_DIMENSION,
    ...options,
  });
}

describeVectorIndexContract('OpenSearch (faiss, innerproduct) against the HTTP fake', async () => ({
  index: freshIndex(),
  close: async () => {},
}));

describeVectorIndexContract('OpenSearch (lucene, cosinesimil) against the HTTP fake', async () => ({
  index: freshIndex({ engine: 'lucene', spaceType: 'cosinesimil' }),
  close: async () => {},
}));

describe('the feed deletion’s vectors (OpenSearchFeedVectors, through the container)', () => {
  it('deletes a feed from the index of every model version without loading a model', async () => {
    // Prepare: two model versions' indices under their own prefix, each with two feeds
    const client = new Client({ node: fake.url });
    const indexOf = (modelVersion: string) =>
      new OpenSearchVectorIndex({ client, indexPrefix: 'gone', modelVersion, dimension: CONTRACT_DIMENSION });
    for (const modelVersion of ['old-model', 'new-model']) {
      const index = indexOf(modelVersion);
      await index.upsert([doc('f1', 'p1', unit(1, 0)), doc('f2', 'p1', unit(1, 0))]);
    }
    configureContainer(
      loadConfig({
        VECTOR_INDEX: 'opensearch',
        OPENSEARCH_URL: fake.url,
        OPENSEARCH_INDEX_PREFIX: 'gone',
        MODEL_DIR: '/nonexistent/models',
        LOG_LEVEL: 'silent',
      }),
    );
    try {
      // Act
      const vectors = await getContainer().feedVectors();
      await vectors.deleteFeed('f1');
      await vectors.flush();
      // Assess
      for (const modelVersion of ['old-model', 'new-model']) {
        const index = indexOf(modelVersion);
        expect([await index.count('f1'), await index.count('f2')], modelVersion).toEqual([0, 1]);
      }
      // A prefix with no index at all: nothing to delete, no error
      configureContainer(
        loadConfig({
          VECTOR_INDEX: 'opensearch',
          OPENSEARCH_URL: fake.url,
          OPENSEARCH_INDEX_PREFIX: 'none',
          LOG_LEVEL: 'silent',
        }),
      );
      await (await getContainer().feedVectors()).deleteFeed('f1');
    } finally {
      configureContainer(loadConfig({ LOG_LEVEL: 'silent' }));
    }
  });
});

describe('a feed deletion out of its time (deleteFeedDocuments with a signal)', () => {
  it('deletes `batch` documents per call and stops between calls once the signal aborts', async () => {
    // Prepare: 5 documents of f1 and 1 of f2; calls of 2 documents, the signal aborts after the first
    const index = freshIndex();
    await index.upsert([
      ...[1, 2, 3, 4, 5].map((n) => doc('f1', `p${n}`, unit(1, 0))),
      doc('f2', 'p1', unit(1, 0)),
    ]);
    const client = new Client({ node: fake.url });
    const stop = new AbortController();
    const deleteByQuery = client.deleteByQuery.bind(client);
    const calls: number[] = [];
    client.deleteByQuery = (async (params: Parameters<typeof deleteByQuery>[0]) => {
      const response = await deleteByQuery(params);
      calls.push((response.body as { deleted: number }).deleted);
      stop.abort();
      return response;
    }) as typeof client.deleteByQuery;
    const feed = [{ term: { feed_id: 'f1' } }];

    // Act
    await expect(
      deleteFeedDocuments(client, index.indexName, 'f1', feed, [], { signal: stop.signal, batch: 2 }),
    ).rejects.toThrow();
    const stopped = await index.count('f1');
    await deleteFeedDocuments(client, index.indexName, 'f1', feed, [], {
      signal: new AbortController().signal,
      batch: 2,
    });

    // Assess: 2 of 5, then the other 3 in calls of 2, 1; f2 untouched
    expect(stopped).toBe(3);
    expect(calls).toEqual([2, 2, 1]);
    expect([await index.count('f1'), await index.count('f2')]).toEqual([0, 1]);
  });

  it('passes the signal on from the adapters (an aborted one deletes nothing)', async () => {
    const index = freshIndex();
    await index.upsert([doc('f1', 'p1', unit(1, 0))]);
    const aborted = { signal: AbortSignal.abort() };

    await expect(index.deleteFeed('f1', aborted)).rejects.toThrow();
    await expect(
      new OpenSearchFeedVectors(new Client({ node: fake.url }), 'products').deleteFeed('f1', aborted),
    ).rejects.toThrow();

    expect(await index.count('f1')).toBe(1);
  });
});

describe('OpenSearchVectorIndex', () => {
  it('creates one index per model version with a routed knn mapping of the given dimension', async () => {
    // Prepare
    const index = freshIndex({ modelVersion: 'MobileNet:v2/448' });

    // Act
    await index.upsert([doc('f1', 'p1', unit(1, 0))]);

    // Assess
    expect(index.indexName).toBe('products-mobilenet_v2_448');
    // Writes name their index in the path: the functions' grants cover the product indices, not _bulk.
    expect(fake.requests.filter((request) => request.path.endsWith('/_bulk')).at(-1)?.path).toBe(
      '/products-mobilenet_v2_448/_bulk',
    );
    const create = fake.requests.find(
      (request) => request.method === 'PUT' && request.path === '/products-mobilenet_v2_448',
    );
    expect(create?.body).toEqual(
      vectorIndexBody({ dimension: CONTRACT_DIMENSION, spaceType: 'innerproduct', engine: 'faiss' }),
    );
    expect(create?.body).toMatchObject({
      settings: { index: { knn: true } },
      mappings: {
        _routing: { required: true },
        properties: {
          feed_id: { type: 'keyword' },
          vector: {
            type: 'knn_vector',
            dimension: CONTRACT_DIMENSION,
            method: { name: 'hnsw', space_type: 'innerproduct' },
          },
        },
      },
    });
  });

  it('keeps feeds in one index and routes every query by feed id', async () => {
    // Prepare
    const index = freshIndex();
    await index.upsert([doc('feed-a', 'p1', unit(1, 0)), doc('feed-b', 'p1', unit(1, 0))]);
    const before = fake.requests.length;

    // Act
    await index.search({
      feedId: 'feed-b',
      vector: unit(1, 0),
      k: 5,
      filter: { color: ['Red'] },
      excludeItemGroupIds: ['g1'],
    });

    // Assess
    const creates = fake.requests.filter(
      (request) => request.method === 'PUT' && request.path === `/${index.indexName}`,
    );
    expect(creates).toHaveLength(1);
    const search = fake.requests.slice(before).find((request) => request.path.endsWith('/_search'));
    expect(search?.query.get('routing')).toBe('feed-b');
    expect(search?.body).toMatchObject({
      size: 5,
      query: {
        knn: {
          vector: {
            k: 5,
            filter: {
              bool: {
                filter: [{ term: { feed_id: 'feed-b' } }, { terms: { filters: ['color=red'] } }],
                must_not: [{ terms: { item_group_id: ['g1'] } }],
              },
            },
          },
        },
      },
    });
  });

  it('asks several queries in one _msearch, each routed by its feed with the body search sends', async () => {
    // Prepare
    const index = freshIndex();
    await index.upsert([doc('feed-a', 'p1', unit(1, 0)), doc('feed-b', 'p2', unit(0, 1))]);
    const single = { feedId: 'feed-b', vector: unit(1, 0), k: 5, filter: { color: ['Red'] } };
    const searchStart = fake.requests.length;
    await index.search(single);
    const searchBody = fake.requests
      .slice(searchStart)
      .find((request) => request.path.endsWith('/_search'))?.body;
    const before = fake.requests.length;

    // Act
    await index.searchMany([
      { feedId: 'feed-a', vector: unit(1, 0), k: 3, excludeItemGroupIds: ['g1'] },
      { feedId: 'feed-a', vector: unit(0, 1), k: 0 },
      single,
    ]);

    // Assess
    const sent = fake.requests.slice(before);
    expect(sent.map((request) => [request.method, request.path, request.status])).toEqual([
      ['POST', `/${index.indexName}/_msearch`, 200],
    ]);
    const lines = String(sent[0]?.body)
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as unknown);
    expect(lines).toHaveLength(4);
    expect(lines[0]).toEqual({ routing: 'feed-a' });
    expect(lines[1]).toMatchObject({
      size: 3,
      query: {
        knn: { vector: { k: 3, filter: { bool: { must_not: [{ terms: { item_group_id: ['g1'] } }] } } } },
      },
    });
    expect(lines[2]).toEqual({ routing: 'feed-b' });
    expect(lines[3]).toEqual(searchBody);
  });

  it('splits many queries into several _msearch requests and keeps their order', async () => {
    // Prepare
    const index = freshIndex();
    await index.upsert(Array.from({ length: 30 }, (_, i) => doc('f1', `p${i}`, randomUnit(i + 1))));
    const queries = Array.from({ length: 230 }, (_, i) => ({
      feedId: 'f1',
      vector: randomUnit(1000 + i),
      k: 1 + (i % 7),
    }));
    const expected: VectorHit[][] = [];
    for (const query of queries) expected.push(await index.search(query));
    const before = fake.requests.length;

    // Act
    const lists = await index.searchMany(queries);

    // Assess
    expect(lists).toEqual(expected);
    const sent = fake.requests.slice(before);
    expect(sent.map((request) => request.path)).toEqual(Array(3).fill(`/${index.indexName}/_msearch`));
  });

  it('fails several queries when one of the searches fails other than on a missing index', async () => {
    // Prepare: an index created elsewhere with another dimension rejects our query vectors.
    const index = await indexOfAnotherDimension();

    // Act
    const lists = index.searchMany([{ feedId: 'f1', vector: unit(1, 0), k: 5 }]);

    // Assess
    await expect(lists).rejects.toThrow(/illegal_argument_exception/);
  });

  it('maps engine scores back to cosine similarity', () => {
    // Prepare: scores as the k-NN plugin documents them for cosines 0.8, 0 and -0.5.
    const innerProduct = [0.8 + 1, 1 / (1 - 0), 1 / (1 + 0.5)];
    const cosine = [(1 + 0.8) / 2, 0.5, (1 - 0.5) / 2];

    // Act
    const fromInnerProduct = innerProduct.map((score) => similarityFromScore(score, 'innerproduct'));
    const fromCosine = cosine.map((score) => similarityFromScore(score, 'cosinesimil'));

    // Assess
    expect(fromInnerProduct).toEqual([expect.closeTo(0.8, 9), expect.closeTo(0, 9), expect.closeTo(-0.5, 9)]);
    expect(fromCosine).toEqual([expect.closeTo(0.8, 9), expect.closeTo(0, 9), expect.closeTo(-0.5, 9)]);
  });

  it('reports a rejected bulk item as an error', async () => {
    // Prepare: an index created elsewhere with another dimension rejects our documents.
    const index = await indexOfAnotherDimension();

    // Act
    const upsert = index.upsert([doc('f1', 'p1', unit(1, 0))]);

    // Assess
    await expect(upsert).rejects.toThrow(/mapper_parsing_exception/);
  });

  it('signs requests with SigV4 when configured for Amazon OpenSearch Service', async () => {
    // Prepare
    vi.stubEnv('AWS_ACCESS_KEY_ID', 'AKIAFAKEFAKEFAKE');
    vi.stubEnv('AWS_SECRET_ACCESS_KEY', 'fake-secret');
    const index = new OpenSearchVectorIndex({
      client: createOpenSearchClient({ url: fake.url, sigv4: true, region: 'eu-west-1' }),
      indexPrefix: 'signed',
      modelVersion: 'v1',
      dimension: CONTRACT_DIMENSION,
    });
    const before = fake.requests.length;

    // Act
    await index.count('f1');

    // Assess
    vi.unstubAllEnvs();
    const authorization = String(fake.requests[before]?.headers.authorization);
    expect(authorization).toMatch(
      /^AWS4-HMAC-SHA256 Credential=AKIAFAKEFAKEFAKE\/\d{8}\/eu-west-1\/es\/aws4_request/,
    );
  });

  it('names indices validly whatever the model version', () => {
    // Act
    const name = vectorIndexName('Products', 'Model #2, "beta"');

    // Assess
    expect(name).toBe('products-model_2_beta_');
  });
});
